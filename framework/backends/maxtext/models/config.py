"""Architecture config of the Flax decoder family (Llama, Qwen2/2.5, Qwen3) read from an HF config."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Mapping

from framework.backends.maxtext.config import ATTENTION_KERNELS, REMAT_NAMES, check_choice
from framework.core.errors import ConfigError, DataError
from framework.core.plain import to_plain

SUPPORTED_MODEL_TYPES = ("llama", "qwen2", "qwen3")
SUPPORTED_ROPE_TYPES = ("default", "llama3")
TRAINABLE = ("float32", "bfloat16")  # framework.core.dtypes names this backend trains in


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Everything the Flax modules need; hashable, so it can be a module field or a static jit arg.

    qkv_bias/o_bias/mlp_bias/qk_norm are what tell the families apart: Qwen2 has q/k/v biases,
    Qwen3 normalises q and k per head (and has an explicit head_dim), Llama has neither.
    """

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
    rope_type: str = "default"
    # llama3 rope scaling: (factor, low_freq_factor, high_freq_factor, original_max_position_embeddings)
    rope_llama3: tuple[float, float, float, int] | None = None
    qkv_bias: bool = False
    o_bias: bool = False
    mlp_bias: bool = False
    qk_norm: bool = False
    tie_word_embeddings: bool = False
    param_dtype: str = "float32"
    dtype: str = "float32"  # compute dtype of matmuls; norms, softmax and logits stay in float32
    hf_config_json: str = "{}"  # the source HF config, written back by save_hf_checkpoint
    # How the layers run, not what they compute (set from conf/backend/maxtext.yaml):
    remat: str = "none"  # transformer.REMAT_POLICIES: none | minimal | full
    attention_kernel: str = "xla"  # jax.nn.dot_product_attention implementation: xla | cudnn

    def __post_init__(self) -> None:
        check_choice(self.remat, REMAT_NAMES, "backend.adapter.remat")
        check_choice(self.attention_kernel, ATTENTION_KERNELS, "backend.adapter.attention")
        if self.attention_kernel == "cudnn" and self.dtype == "float32":
            raise ConfigError("backend.adapter.attention: cudnn has no float32 kernel; use xla or auto "
                              "with compute dtype float32")

    def for_platform(self, remat: str, attention: str, platform: str) -> "ModelConfig":
        """With the backend's remat policy and attention kernel; attention auto = cuDNN on a GPU in
        bfloat16 (its flash attention has no float32 kernel), else XLA."""
        if attention == "auto":
            attention = "cudnn" if platform == "gpu" and self.dtype == "bfloat16" else "xla"
        return self.replace(remat=remat, attention_kernel=attention)

    @property
    def hf_config(self) -> dict[str, Any]:
        return json.loads(self.hf_config_json)

    def replace(self, **changes: Any) -> "ModelConfig":
        return dataclasses.replace(self, **changes)

    @classmethod
    def from_hf_config(cls, hf_config: Mapping[str, Any], *, param_dtype: str = "float32",
                       dtype: str | None = None) -> "ModelConfig":
        """From HF config.json fields (transformers 4 `rope_theta`/`rope_scaling` or 5 `rope_parameters`)."""
        hf = to_plain(hf_config)
        model_type = hf.get("model_type")
        if model_type not in SUPPORTED_MODEL_TYPES:
            raise ConfigError(f"model.hf_config.model_type: {model_type!r} is not supported by the maxtext "
                              f"backend; supported: {list(SUPPORTED_MODEL_TYPES)}")
        if hf.get("hidden_act", "silu") != "silu":
            raise ConfigError(f"model.hf_config.hidden_act: {hf['hidden_act']!r} is not supported; only silu")
        if hf.get("use_sliding_window"):
            raise ConfigError("model.hf_config.use_sliding_window: sliding-window attention is not supported; "
                              "set it to false")
        missing = [k for k in ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
                               "num_attention_heads") if k not in hf]
        if missing:
            raise ConfigError(f"model.hf_config: missing fields {missing}")
        num_heads = int(hf["num_attention_heads"])
        num_kv_heads = int(hf.get("num_key_value_heads") or num_heads)
        if num_heads % num_kv_heads:
            raise ConfigError(f"model.hf_config.num_key_value_heads: {num_kv_heads} does not divide "
                              f"num_attention_heads={num_heads}")
        head_dim = int(hf.get("head_dim") or hf["hidden_size"] // num_heads)
        rope_theta, rope_type, rope_llama3 = _rope(hf)
        attention_bias = bool(hf.get("attention_bias", False))
        return cls(
            model_type=model_type,
            vocab_size=int(hf["vocab_size"]),
            hidden_size=int(hf["hidden_size"]),
            intermediate_size=int(hf["intermediate_size"]),
            num_layers=int(hf["num_hidden_layers"]),
            num_heads=num_heads,
            num_kv_heads=num_kv_heads,
            head_dim=head_dim,
            rms_norm_eps=float(hf.get("rms_norm_eps", 1e-6)),
            rope_theta=rope_theta,
            rope_type=rope_type,
            rope_llama3=rope_llama3,
            # Qwen2 always has q/k/v biases and never an o bias; the others follow attention_bias.
            qkv_bias=True if model_type == "qwen2" else attention_bias,
            o_bias=False if model_type == "qwen2" else attention_bias,
            mlp_bias=bool(hf.get("mlp_bias", False)) if model_type == "llama" else False,
            qk_norm=model_type == "qwen3",
            tie_word_embeddings=bool(hf.get("tie_word_embeddings", False)),
            param_dtype=_dtype(param_dtype, "model.dtype"),
            dtype=_dtype(dtype or param_dtype, "compute dtype"),
            hf_config_json=json.dumps(hf, sort_keys=True),
        )

    @classmethod
    def from_pretrained(cls, model_dir: str | Path, **dtypes: str) -> "ModelConfig":
        """From `<model_dir>/config.json`."""
        path = Path(model_dir) / "config.json"
        if not path.is_file():
            raise DataError(f"{path}: no config.json; a model directory needs an HF config.json")
        try:
            hf = json.loads(path.read_text())
        except json.JSONDecodeError as error:
            raise DataError(f"{path}: not valid JSON ({error})") from error
        return cls.from_hf_config(hf, **dtypes)


def _dtype(name: str, key: str) -> str:
    if name not in TRAINABLE:
        raise ConfigError(f"{key}: {name!r} is not one of {', '.join(TRAINABLE)} (backend=maxtext)")
    return name


def _rope(hf: Mapping[str, Any]) -> tuple[float, str, tuple[float, float, float, int] | None]:
    params = dict(hf.get("rope_parameters") or hf.get("rope_scaling") or {})
    theta = float(params.get("rope_theta", hf.get("rope_theta", 10000.0)))
    rope_type = params.get("rope_type", params.get("type", "default")) or "default"
    if rope_type not in SUPPORTED_ROPE_TYPES:
        raise ConfigError(f"model.hf_config.rope_scaling: rope_type {rope_type!r} is not supported; "
                          f"supported: {list(SUPPORTED_ROPE_TYPES)} (or no rope_scaling)")
    if rope_type == "default":
        return theta, rope_type, None
    try:
        llama3 = (float(params["factor"]), float(params["low_freq_factor"]), float(params["high_freq_factor"]),
                  int(params["original_max_position_embeddings"]))
    except KeyError as error:
        raise ConfigError(f"model.hf_config.rope_scaling: llama3 scaling needs {error.args[0]}") from error
    return theta, rope_type, llama3
