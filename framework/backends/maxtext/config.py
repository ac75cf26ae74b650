"""What MaxTextAdapter.convert_config hands the GRPO trainer: the backend-neutral task and data
(framework/tasks/grpo.py, framework/data/math.py) plus this backend's own settings."""

from __future__ import annotations

from dataclasses import dataclass

from framework.core.errors import ConfigError
from framework.core.parallel import ParallelConfig
from framework.data.math import MathSpec
from framework.tasks.grpo import GRPOTask

REMAT_NAMES = ("none", "minimal", "full")  # keys of models.transformer.REMAT_POLICIES
ATTENTION_KERNELS = ("xla", "cudnn")  # implementations of jax.nn.dot_product_attention
DECODE_KERNELS = ("xla", "pallas")  # decode-step attention: XLA ops, or models/decode_attention.py


def check_choice(value: str, valid: tuple[str, ...], key: str) -> str:
    if value not in valid:
        raise ConfigError(f"{key}: {value!r} is not one of {', '.join(valid)}")
    return value


@dataclass
class GRPOConfig:
    task: GRPOTask
    data: MathSpec
    model_name: str
    model_source: str  # a local HF directory
    hardware: dict  # the hardware group (name, accelerator, peak rates, ...)
    parallel: ParallelConfig  # the run's layout (unresolved: -1 kept); sharding.mesh_shape maps it to the mesh
    logical_axis_rules: dict  # overrides of sharding.DEFAULT_RULES
    cache_dir: str  # tiny model builds and the JAX compilation cache
    seed: int
    remat: str  # models.config.REMAT_NAMES
    attention: str  # auto | models.config.ATTENTION_KERNELS
    decode_attention: str  # auto | DECODE_KERNELS
