"""Architecture config of the Flax decoder family (Llama, Qwen2/2.5, Qwen3) read from an HF config."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Mapping

from framework.backends.maxtext.config import ATTENTION_KERNELS, REMAT_NAMES, check_choice
from framework.core.errors import ConfigError, DataError
from framework.core.plain import to_plain
from framework.models.hf_config import read_decoder

TRAINABLE = ("float32", "bfloat16")  # framework.core.dtypes names this backend trains in


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Everything the Flax modules need; hashable, so it can be a module field or a static jit arg.
    The architecture fields come from framework.models.hf_config.read_decoder (shared by every backend)."""

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
        arch = read_decoder(to_plain(hf_config), "maxtext")
        if hf_config.get("use_sliding_window"):
            raise ConfigError("model.hf_config.use_sliding_window: sliding-window attention is not supported; "
                              "set it to false")
        return cls(
            model_type=arch.model_type, vocab_size=arch.vocab_size, hidden_size=arch.hidden_size,
            intermediate_size=arch.intermediate_size, num_layers=arch.num_layers, num_heads=arch.num_heads,
            num_kv_heads=arch.num_kv_heads, head_dim=arch.head_dim, rms_norm_eps=arch.rms_norm_eps,
            rope_theta=arch.rope_theta, rope_type=arch.rope_type, rope_llama3=arch.rope_llama3,
            qkv_bias=arch.qkv_bias, o_bias=arch.o_bias, mlp_bias=arch.mlp_bias, qk_norm=arch.qk_norm,
            tie_word_embeddings=arch.tie_word_embeddings,
            param_dtype=_dtype(param_dtype, "model.dtype"),
            dtype=_dtype(dtype or param_dtype, "compute dtype"),
            hf_config_json=json.dumps(to_plain(hf_config), sort_keys=True),
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
