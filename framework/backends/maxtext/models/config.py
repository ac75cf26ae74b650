"""Architecture config of the Flax decoder family (Llama, Qwen2/2.5, Qwen3) read from an HF config."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Mapping

from framework.backends.maxtext.config import (ATTENTION_KERNELS, DECODE_KERNELS, REMAT_NAMES, SHARED_PREFIX,
                                              check_attention_dtype, check_choice)
from framework.core.errors import ConfigError, DataError
from framework.core.plain import to_plain
from framework.models.hf_config import DecoderArchitecture, read_decoder

TRAINABLE = ("float32", "bfloat16")  # framework.core.dtypes names this backend trains in


def kernel_platform() -> str:
    """jax.default_backend() with ROCm told apart: "gpu" then means CUDA, the platform of cuDNN and of
    the Pallas kernels as we run them (ROCm is untested with them, so auto picks XLA's there)."""
    import jax

    backend = jax.default_backend()
    if backend == "gpu" and "rocm" in str(jax.devices()[0].client.platform_version).lower():
        return "rocm"
    return backend


@dataclasses.dataclass(frozen=True)
class ModelConfig(DecoderArchitecture):
    """Everything the Flax modules need; hashable, so it can be a module field or a static jit arg.
    The architecture fields are framework.models.hf_config's (read once for every backend)."""

    param_dtype: str = "float32"
    dtype: str = "float32"  # compute dtype of matmuls; norms, softmax and logits stay in float32
    hf_config_json: str = "{}"  # the source HF config, written back by save_hf_checkpoint
    # How the layers run, not what they compute (set from conf/backend/maxtext.yaml):
    remat: str = "none"  # transformer.REMAT_POLICIES: none | minimal | full
    attention_kernel: str = "xla"  # jax.nn.dot_product_attention implementation: xla | cudnn
    decode_kernel: str = "xla"  # attention of a decode step: DECODE_KERNELS
    shared_prefix: str = "auto"  # SHARED_PREFIX: the sampler's prompt K/V per group (prefix_cache.shares_prefix)

    def __post_init__(self) -> None:
        check_choice(self.remat, REMAT_NAMES, "backend.adapter.remat")
        check_choice(self.attention_kernel, ATTENTION_KERNELS, "backend.adapter.attention")
        check_choice(self.decode_kernel, DECODE_KERNELS, "backend.adapter.decode_attention")
        check_choice(self.shared_prefix, SHARED_PREFIX, "backend.adapter.shared_prefix")
        check_attention_dtype(self.attention_kernel, self.dtype)

    def for_platform(self, remat: str, attention: str, decode: str, platform: str,
                     shared_prefix: str = "auto") -> "ModelConfig":
        """With the backend's remat policy, attention kernels and shared prefix. auto: on an NVIDIA GPU (platform
        "gpu", see kernel_platform) in bfloat16, cuDNN flash attention (it has no float32 kernel) and the Pallas
        decode kernel; else (CPU, TPU, ROCm) XLA's. The shared prefix's auto stays: the sampler's shapes decide it."""
        fused = platform == "gpu" and self.dtype == "bfloat16"
        if attention == "auto":
            attention = "cudnn" if fused else "xla"
        if decode == "auto":
            decode = "pallas" if fused else "xla"
        return self.replace(remat=remat, attention_kernel=attention, decode_kernel=decode, shared_prefix=shared_prefix)

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
        return cls(**{field.name: getattr(arch, field.name) for field in dataclasses.fields(DecoderArchitecture)},
                   param_dtype=_dtype(param_dtype, "model.dtype"), dtype=_dtype(dtype or param_dtype, "compute dtype"),
                   hf_config_json=json.dumps(to_plain(hf_config), sort_keys=True))

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
