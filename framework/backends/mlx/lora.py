"""LoRA through mlx_lm.tuner: which linear layers get adapters, switching them off, fusing them.

mlx-lm scales the update by `scale`; PEFT's alpha / rank is the same number, so a Crucible LoRA
config (rank, alpha, dropout, target_modules) means the same adapter on both backends. mlx keeps
lora_a as (in, rank) and lora_b as (rank, out): PEFT's lora_A.weight and lora_B.weight transposed.
"""

from __future__ import annotations

from contextlib import contextmanager

import mlx.core as mx
import mlx.nn as nn
from mlx.utils import tree_flatten, tree_unflatten

from framework.core.errors import ConfigError
from framework.tasks.common import LoRAConfig

ALL_LINEAR = "all-linear"


def linear_keys(layer: nn.Module) -> list[str]:
    """Paths (inside one transformer block) of its linear layers, e.g. self_attn.q_proj."""
    return [path for path, module in layer.named_modules() if isinstance(module, (nn.Linear, nn.QuantizedLinear))]


def target_keys(model: nn.Module, targets: list[str], key: str) -> list[str]:
    """Block-relative paths whose last name is a target (or every linear for all-linear); each target must match."""
    available = linear_keys(model.layers[0])
    if ALL_LINEAR in targets:
        return available
    names = {path.rsplit(".", 1)[-1] for path in available}
    missing = [t for t in targets if t not in names]
    if missing:
        raise ConfigError(f"{key}.target_modules: {missing} match no linear layer of this model; valid: "
                          f"{', '.join(sorted(names))} or {ALL_LINEAR}")
    return [path for path in available if path.rsplit(".", 1)[-1] in targets]


def apply_lora(model: nn.Module, lora: LoRAConfig, key: str, seed: int) -> list[str]:
    """Freeze the model and add LoRA adapters to every block (lora_a seeded); returns the adapted paths."""
    from mlx_lm.tuner.utils import linear_to_lora_layers

    keys = target_keys(model, list(lora.target_modules), key)
    model.freeze()
    mx.random.seed(seed)
    config = {"rank": lora.rank, "scale": lora.alpha / lora.rank, "dropout": lora.dropout, "keys": keys}
    linear_to_lora_layers(model, len(model.layers), config)
    return keys


def lora_modules(model: nn.Module) -> list[nn.Module]:
    return [m for _, m in model.named_modules() if hasattr(m, "lora_a") and hasattr(m, "fuse")]


@contextmanager
def adapters_disabled(model: nn.Module):
    """The base model: every adapter's scale is 0 (exactly the base output; also inside mx.compile traces)."""
    modules = lora_modules(model)
    scales = [m.scale for m in modules]
    for module in modules:
        module.scale = 0.0
    try:
        yield model
    finally:
        for module, scale in zip(modules, scales):
            module.scale = scale


def set_adapter_dtype(model: nn.Module, dtype) -> None:
    """LoRA weights in the task's param_dtype (the frozen base stays in compute_dtype)."""
    params = [(k, v.astype(dtype)) for k, v in tree_flatten(model.trainable_parameters())]
    model.update(tree_unflatten(params))


def fuse(model: nn.Module) -> nn.Module:
    """Replace every LoRA layer by one linear layer holding W + scale * (A B)^T (in the base's dtype)."""
    fused = [(path, m.fuse(dequantize=True)) for path, m in model.named_modules()
             if hasattr(m, "lora_a") and hasattr(m, "fuse")]
    model.update_modules(tree_unflatten(fused))
    return model


def adapter_config(lora: LoRAConfig, keys: list[str], num_layers: int) -> dict:
    """mlx-lm's adapter_config.json: `mlx_lm.load(path, adapter_path=...)` reads the adapter back."""
    return {"fine_tune_type": "lora", "num_layers": num_layers,
            "lora_parameters": {"rank": lora.rank, "scale": lora.alpha / lora.rank, "dropout": lora.dropout,
                                "keys": keys}}
