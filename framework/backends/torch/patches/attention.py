"""Attention kernel: sdpa where the model class supports it, else eager."""

from __future__ import annotations

import logging

from framework.core.patches import PatchContext, Phase, register_patch

log = logging.getLogger(__name__)


def _wants_sdpa(ctx: PatchContext) -> bool:
    return ctx.backend_config.attn_implementation == "sdpa"


@register_patch("torch-eager-attention-fallback", backend="torch", phase=Phase.CONVERT, condition=_wants_sdpa,
                requires={"transformers": ">=5,<6"},
                description="models whose transformers class lacks sdpa attention run eager attention instead of "
                            "failing at load")
def eager_attention_fallback(ctx: PatchContext) -> None:
    from transformers import AutoConfig
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING

    config = ctx.backend_config
    hf_config = AutoConfig.from_pretrained(config.model_source)
    try:
        model_cls = MODEL_FOR_CAUSAL_LM_MAPPING[type(hf_config)]
    except KeyError:
        return  # not a causal LM transformers knows: loading will say so
    if not getattr(model_cls, "_supports_sdpa", False):
        log.warning("%s has no sdpa attention in this transformers: using eager", model_cls.__name__)
        config.attn_implementation = "eager"
