"""The one dtype vocabulary of configs (model, task, sim, hardware) and its translations.

Configs name dtypes `float32`, `bfloat16`, `float16` or `float8` (fp8 e4m3, simulator and peak rates
only). Each library's own name comes from here, never from a table of the backend's.
"""

from __future__ import annotations

from typing import Literal

Dtype = Literal["float32", "bfloat16", "float16", "float8"]
TrainDtype = Literal["float32", "bfloat16", "float16"]  # what a model's weights and matmuls can run in
DTYPES: tuple[str, ...] = ("float32", "bfloat16", "float16", "float8")
BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "float8": 1}
SHORT = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "float8": "fp8"}  # peak_tflops keys
LONG = {short: name for name, short in SHORT.items()}  # the simulator's and peak_tflops' names back


def check(name: str, key: str) -> str:
    """`name` if it is in the vocabulary, else a ConfigError naming `key` and the valid names."""
    from framework.core.errors import ConfigError

    if name not in DTYPES:
        raise ConfigError(f"{key}: unknown dtype {name!r}; valid: {', '.join(DTYPES)}")
    return name


def torch_dtype(name: str):
    import torch

    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16,
            "float8": torch.float8_e4m3fn}[name]


def jax_dtype(name: str):
    import jax.numpy as jnp

    return {"float32": jnp.float32, "bfloat16": jnp.bfloat16, "float16": jnp.float16,
            "float8": jnp.float8_e4m3fn}[name]


def mlx_dtype(name: str):
    import mlx.core as mx

    if name == "float8":
        raise ValueError("mlx has no float8 dtype")
    return {"float32": mx.float32, "bfloat16": mx.bfloat16, "float16": mx.float16}[name]
