"""The decoder an HF config.json describes (Llama, Qwen2/2.5, Qwen3), read once for every backend.

transformers 4 writes `rope_theta`/`rope_scaling`, transformers 5 `rope_parameters`; both are read.
What the families differ in: Qwen2 has q/k/v biases (never an o bias), Qwen3 normalises q and k per
head (and has an explicit head_dim), Llama may have `attention_bias`/`mlp_bias` and llama3 rope
scaling. Anything a backend cannot map is a one-line ConfigError naming the key.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from framework.core.errors import ConfigError

DECODER_TYPES = ("llama", "qwen2", "qwen3")
ROPE_TYPES = ("default", "llama3")
_REQUIRED = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads")
_LLAMA3 = ("factor", "low_freq_factor", "high_freq_factor", "original_max_position_embeddings")

DEFAULT_MAX_POSITIONS = 4096  # transformers' LlamaConfig default


@dataclass(frozen=True)
class DecoderArchitecture:
    model_type: str
    vocab_size: int
    hidden_size: int
    intermediate_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    head_dim: int
    rms_norm_eps: float
    rope_theta: float
    rope_type: str  # ROPE_TYPES
    # llama3 rope scaling: (factor, low_freq_factor, high_freq_factor, original_max_position_embeddings)
    rope_llama3: tuple[float, float, float, int] | None
    max_position_embeddings: int
    tie_word_embeddings: bool
    qkv_bias: bool
    o_bias: bool
    mlp_bias: bool
    qk_norm: bool


def read_decoder(hf: Mapping[str, Any], backend: str) -> DecoderArchitecture:
    """The architecture of `hf` (the model group's hf_config or a config.json), or a ConfigError."""
    model_type = hf.get("model_type")
    if model_type not in DECODER_TYPES:
        raise ConfigError(f"model.hf_config.model_type: {model_type!r} does not run on backend={backend}; "
                          f"valid: {', '.join(DECODER_TYPES)}")
    if hf.get("hidden_act", "silu") != "silu":
        raise ConfigError(f"model.hf_config.hidden_act: {hf['hidden_act']!r} does not run on backend={backend}; "
                          f"valid: silu (SwiGLU)")
    missing = [key for key in _REQUIRED if key not in hf]
    if missing:
        raise ConfigError(f"model.hf_config: missing fields {missing}")
    heads = int(hf["num_attention_heads"])
    kv_heads = int(hf.get("num_key_value_heads") or heads)
    if heads % kv_heads:
        raise ConfigError(f"model.hf_config.num_key_value_heads: {kv_heads} does not divide "
                          f"num_attention_heads={heads}")
    theta, rope_type, llama3 = read_rope(hf, backend)
    attention_bias = bool(hf.get("attention_bias", False))
    return DecoderArchitecture(
        model_type=model_type, vocab_size=int(hf["vocab_size"]), hidden_size=int(hf["hidden_size"]),
        intermediate_size=int(hf["intermediate_size"]), num_layers=int(hf["num_hidden_layers"]),
        num_heads=heads, num_kv_heads=kv_heads, head_dim=int(hf.get("head_dim") or int(hf["hidden_size"]) // heads),
        rms_norm_eps=float(hf.get("rms_norm_eps", 1e-6)), rope_theta=theta, rope_type=rope_type,
        rope_llama3=llama3, max_position_embeddings=max_positions(hf),
        tie_word_embeddings=bool(hf.get("tie_word_embeddings", False)),
        qkv_bias=model_type == "qwen2" or attention_bias, o_bias=model_type != "qwen2" and attention_bias,
        mlp_bias=model_type == "llama" and bool(hf.get("mlp_bias", False)), qk_norm=model_type == "qwen3")


def max_positions(hf: Mapping[str, Any]) -> int:
    """The positions a model was built for (transformers' default where a config leaves it out)."""
    return int(hf.get("max_position_embeddings") or DEFAULT_MAX_POSITIONS)


def read_rope(hf: Mapping[str, Any], backend: str) -> tuple[float, str, tuple[float, float, float, int] | None]:
    """(theta, rope type, llama3 scaling or None)."""
    params = dict(hf.get("rope_parameters") or hf.get("rope_scaling") or {})
    theta = float(params.get("rope_theta", hf.get("rope_theta", 10000.0)))
    rope_type = params.get("rope_type", params.get("type", "default")) or "default"
    if rope_type not in ROPE_TYPES:
        raise ConfigError(f"model.hf_config.rope_scaling: rope type {rope_type!r} does not run on "
                          f"backend={backend}; valid: {', '.join(ROPE_TYPES)} (or no rope_scaling)")
    if rope_type == "default":
        return theta, rope_type, None
    missing = [key for key in _LLAMA3 if key not in params]
    if missing:
        raise ConfigError(f"model.hf_config.rope_scaling: llama3 scaling needs {', '.join(missing)}")
    factor, low, high, original = (params[key] for key in _LLAMA3)
    return theta, rope_type, (float(factor), float(low), float(high), int(original))
