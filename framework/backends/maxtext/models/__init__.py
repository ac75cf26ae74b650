"""Flax decoder models of the maxtext backend (Llama, Qwen2/2.5, Qwen3)."""

from framework.backends.maxtext.models.config import ModelConfig, kernel_platform
from framework.backends.maxtext.models.rope import positions_from_mask
from framework.backends.maxtext.models.kv_cache import KVCache
from framework.backends.maxtext.models.transformer import Transformer, abstract_params, forward

__all__ = ["KVCache", "ModelConfig", "Transformer", "abstract_params", "forward", "kernel_platform", "positions_from_mask"]
