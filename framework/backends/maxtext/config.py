"""What MaxTextAdapter.convert_config hands the GRPO trainer: the backend-neutral task and data
(framework/tasks/grpo.py, framework/data/math.py) plus this backend's own settings."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from framework.core.errors import ConfigError
from framework.core.parallel import ParallelConfig
from framework.data.math import MathSpec
from framework.tasks.grpo import GRPOTask

# The remat policies (models.transformer.REMAT_POLICIES, MaxText's names), fastest first, each as the
# simulator's workload describes what a layer keeps for the backward pass (sims.workload.Workload):
# none keeps every activation; minimal (dots_with_no_batch_dims_saveable) the outputs of the weight
# matmuls, not of attention's batched ones; full (nothing_saveable) only the layer's input.
REMAT_WORKLOADS = {
    "none": {"recompute": False, "recompute_keeps": ()},
    "minimal": {"recompute": True, "recompute_keeps": ("gemm",)},
    "full": {"recompute": True, "recompute_keeps": ()},
}
REMAT_NAMES = tuple(REMAT_WORKLOADS)
ATTENTION_KERNELS = ("xla", "cudnn")  # implementations of jax.nn.dot_product_attention
DECODE_KERNELS = ("xla", "pallas")  # decode-step attention: XLA ops, or models/decode_attention.py
# The prompt's K/V once per group of samples (models/prefix_cache.py): where worth it, always where possible, never
SHARED_PREFIX = ("auto", "on", "off")


def check_choice(value: str, valid: tuple[str, ...], key: str) -> str:
    if value not in valid:
        raise ConfigError(f"{key}: {value!r} is not one of {', '.join(valid)}")
    return value


def check_attention_dtype(attention: str, dtype: str) -> None:
    """cuDNN's flash attention has bfloat16 and float16 kernels only (auto picks it in bfloat16 alone)."""
    if attention == "cudnn" and dtype == "float32":
        raise ConfigError("backend.adapter.attention: cudnn has no float32 kernel; use xla or auto "
                          "with compute dtype float32")


@dataclass
class GRPOConfig:
    task: GRPOTask
    data: MathSpec
    model_name: str
    model_source: Any  # framework.models.source.ModelSource: the small files first, the weights in the background
    hardware: dict  # the hardware group (name, accelerator, peak rates, ...)
    parallel: ParallelConfig  # the run's layout (unresolved: -1 kept); sharding.mesh_shape maps it to the mesh
    logical_axis_rules: dict  # overrides of sharding.DEFAULT_RULES
    cache_dir: str  # tiny model builds and the JAX compilation cache
    seed: int
    remat: str  # auto (the preflight picks; trainers/preflight.py:pick_update_plan) | REMAT_NAMES
    attention: str  # auto | models.config.ATTENTION_KERNELS
    decode_attention: str  # auto | DECODE_KERNELS
    shared_prefix: str  # SHARED_PREFIX (prefix_cache.shares_prefix decides at trace time)
    aot_compile: bool  # compile the first step's programs in background threads during init

    def close(self) -> None:
        """Stop the model build still running when the run fails before its trainer exists (the runtime)."""
        self.model_source.close()
