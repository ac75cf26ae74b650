"""Typed schemas of the plain-data config groups (model, hardware, logger) and of `patches`.

They carry types only, no defaults: the YAML files are the single source of every value, and
these classes check that a file has exactly the keys, with the types, that the code reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Optional, Union

from framework.core.dtypes import TrainDtype
from framework.core.errors import ConfigError
from framework.core.ranges import Count, PositiveFloat


@dataclass
class ModelConfig:
    name: str
    hub_id: Optional[str]  # e.g. Qwen/Qwen2.5-0.5B-Instruct
    path: Optional[str]  # a local HF directory, used instead of the hub when set
    random_init: bool  # build the architecture with random weights (tests, benchmarks)
    dtype: TrainDtype  # framework.core.dtypes
    hf_config: dict  # architecture fields of the HF config.json


@dataclass
class PeakTflops:
    """Dense peak rates per dtype (framework.core.dtypes.SHORT); null where the device has none."""

    bf16: Optional[PositiveFloat]
    fp8: Optional[PositiveFloat]
    fp32: Optional[PositiveFloat]


@dataclass
class HardwareConfig:
    name: str
    accelerator: Literal["gpu", "tpu", "cpu", "mps"]
    device_name: str
    devices_per_node: Count
    nodes: Count
    memory_gb: PositiveFloat
    peak_tflops: PeakTflops
    hbm_tb_s: PositiveFloat
    intra_node_gb_s: Optional[PositiveFloat]  # per direction
    inter_node_gb_s: Optional[PositiveFloat]  # per direction
    # a measured efficiency table (task=calibrate), a mapping {software stack: table or null}, or null
    efficiency_table: Union[str, dict[str, Optional[str]], None]
    launcher: dict  # SLURM resources per node: gpus_per_node, tasks_per_node, cpus_per_task, mem_gb


@dataclass
class WandbConfig:
    enabled: bool
    project: Optional[str]  # null: wandb's own (WANDB_PROJECT, else its default)
    entity: Optional[str]
    group: Optional[str]
    mode: Literal["offline", "online", "disabled", "shared"]  # wandb.init's modes (offline: sync later)
    tags: list[str]


@dataclass
class LoggerConfig:
    name: str
    wandb: WandbConfig


@dataclass
class PatchesConfig:
    enable: list[str]  # patch ids (patches.json of a run lists them)
    disable: list[str]


# hf_config fields every code path divides by or sizes arrays with: each must be an integer >= 1 when present.
ARCHITECTURE_COUNTS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                       "intermediate_size", "vocab_size", "head_dim", "max_position_embeddings",
                       "moe_intermediate_size", "num_experts", "n_routed_experts", "num_experts_per_tok")


def check_model_architecture(hf_config: Any, where: str = "model.hf_config.") -> None:
    """ConfigError naming the key (after `where`: the model group's hf_config, or a folder's config.json) whose count
    is not an integer >= 1, or whose head split is off."""
    from framework.core.validation import type_error

    for name in ARCHITECTURE_COUNTS:
        value = hf_config.get(name)
        if value is not None and (reason := type_error(value, Count)):
            raise ConfigError(f"{where}{name}: {reason}")
    heads, kv_heads = hf_config.get("num_attention_heads"), hf_config.get("num_key_value_heads")
    if heads and kv_heads and heads % kv_heads:
        raise ConfigError(f"{where}num_key_value_heads: {kv_heads} must divide num_attention_heads={heads}")
