"""transformers 5 writes `rope_parameters` in config.json; mlx-lm <= 0.32 reads only `rope_theta`.

A qwen2/llama directory saved by transformers 5 has no top-level `rope_theta`, so mlx-lm silently
builds the model with its dataclass default (1e6 for qwen2, 10000 for llama): the logits differ
from transformers' (max abs diff 4e-3 on tiny_qwen2, whose rope_theta is 1e4). The patch wraps
`mlx_lm.utils.load_config` so that a flat `rope_parameters` fills `rope_theta` (and `rope_scaling`
for a non-default rope type) when they are absent; models that read `rope_parameters` themselves
(mistral4, glm_moe_dsa) are unaffected, nested per-layer-type mappings (laguna) are left alone.
"""

from __future__ import annotations

from framework.core.patches import PatchContext, Phase, register_patch

PATCH_ID = "mlx.rope_parameters"
_MARK = "_crucible_rope_parameters"


def fill_rope_fields(config: dict) -> dict:
    """`config` with rope_theta / rope_scaling taken from a flat transformers-5 `rope_parameters`."""
    rope = config.get("rope_parameters")
    if not isinstance(rope, dict) or "rope_theta" not in rope:
        return config
    config.setdefault("rope_theta", rope["rope_theta"])
    rope_type = rope.get("rope_type", rope.get("type", "default"))
    if rope_type != "default" and not config.get("rope_scaling"):
        config["rope_scaling"] = dict(rope)
    return config


def install() -> None:
    """Wrap mlx_lm.utils.load_config (idempotent: installing twice wraps once)."""
    import mlx_lm.utils as utils

    if getattr(utils.load_config, _MARK, False):
        return
    original = utils.load_config

    def load_config(model_path):
        return fill_rope_fields(original(model_path))

    setattr(load_config, _MARK, True)
    utils.load_config = load_config


@register_patch(PATCH_ID, backend="mlx", phase=Phase.SETUP, requires={"mlx-lm": ">=0.20,<0.33", "transformers": ">=5"},
                description="mlx-lm reads rope_theta from transformers-5 `rope_parameters` (else it assumes "
                            "its default, 1e6 for qwen2)")
def rope_parameters(ctx: PatchContext) -> None:
    install()
