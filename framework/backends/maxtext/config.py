"""What MaxTextAdapter.convert_config hands the GRPO trainer: the backend-neutral task and data
(framework/tasks/grpo.py, framework/data/math.py) plus this backend's own settings."""

from __future__ import annotations

from dataclasses import dataclass

from framework.core.parallel import ParallelConfig
from framework.data.math import MathSpec
from framework.tasks.grpo import GRPOTask


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
