"""Maps an HF `model_type` to the function that turns its config into a ComputationalGraph."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

from framework.core.errors import ConfigError
from sims.ir import ComputationalGraph

MODES = ("prefill", "decode", "train")
Builder = Callable[[Mapping, str], ComputationalGraph]
_BUILDERS: dict[str, Builder] = {}


def register_config_builder(model_type: str) -> Callable[[Builder], Builder]:
    """Decorator: `@register_config_builder("llama")` on `fn(hf_config, mode) -> ComputationalGraph`."""

    def register(builder: Builder) -> Builder:
        if model_type in _BUILDERS:
            raise ValueError(f"a graph builder for model_type {model_type!r} is already registered")
        _BUILDERS[model_type] = builder
        return builder

    return register


def supported_model_types() -> list[str]:
    return sorted(_BUILDERS)


def infer_model_type(hf_config: Mapping) -> str:
    """`model_type` if present, else derived from `architectures` (Qwen3MoeForCausalLM -> qwen3_moe)."""
    model_type = hf_config.get("model_type")
    if model_type:
        return str(model_type)
    for architecture in hf_config.get("architectures") or ():
        stem = re.sub(r"For(CausalLM|ConditionalGeneration)$", "", architecture)
        return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", "_", stem).lower()
    raise ConfigError("hf_config has neither model_type nor architectures; set model_type, e.g. 'llama'")


def builder_for(hf_config: Mapping) -> Builder:
    model_type = infer_model_type(hf_config)
    if model_type not in _BUILDERS:
        supported = ", ".join(supported_model_types())
        raise ConfigError(f"hf_config.model_type {model_type!r} has no simulator graph builder; supported: {supported}")
    return _BUILDERS[model_type]
