"""Typed schemas of the plain-data config groups (model, hardware).

They carry types only, no defaults: the YAML files are the single source of every value, and
these classes check that a file has exactly the keys, with the types, that the code reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

from framework.core.dtypes import TrainDtype


@dataclass
class ModelConfig:
    name: str
    hub_id: Optional[str]  # e.g. Qwen/Qwen2.5-0.5B-Instruct
    path: Optional[str]  # a local HF directory, used instead of the hub when set
    random_init: bool  # build the architecture with random weights (tests, benchmarks)
    dtype: TrainDtype  # framework.core.dtypes
    hf_config: dict  # architecture fields of the HF config.json


@dataclass
class HardwareConfig:
    name: str
    accelerator: Literal["gpu", "tpu", "cpu", "mps"]
    device_name: str
    devices_per_node: int
    nodes: int
    memory_gb: float
    peak_tflops: dict  # {bf16, fp8, fp32} (framework.core.dtypes.SHORT): dense peak rates; null where none
    hbm_tb_s: float
    intra_node_gb_s: Optional[float]  # per direction
    inter_node_gb_s: Optional[float]  # per direction
    efficiency_table: Optional[str]  # a measured efficiency table (task=calibrate), or null
    launcher: dict  # SLURM resources per node: gpus_per_node, tasks_per_node, cpus_per_task, mem_gb
