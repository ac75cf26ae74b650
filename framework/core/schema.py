"""Typed schemas of the plain-data config groups (model, hardware, logger), of `patches` and of the `task` node.

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


@dataclass
class TaskObjective:
    """What a search optimises (recipe=sim_search): run.py returns this metric of the run."""

    metric: str
    direction: Literal["minimize", "maximize"]


# The `task` node's own keys (conf/task/*.yaml; a task's settings live under its name, e.g. grpo:). Read after the
# run (key_metrics, objective) or the sweep (sweep_plot), so a wrong type failed there, with a traceback.
TASK_NODE = {"name": str, "key_metrics": Optional[list[str]], "resume_may_change": Optional[list[str]],
             "sweep_plot": Optional[str], "objective": Optional[TaskObjective]}


def check_patches(node: Any) -> PatchesConfig:
    """The `patches` node as ids; an id in both lists is refused (the runner would let disable win, silently)."""
    from framework.core.build import build

    patches = build(PatchesConfig, node, "patches")  # lists of ids: patches=3 was an AttributeError
    both = sorted(set(patches.enable) & set(patches.disable))
    if both:
        raise ConfigError(f"patches: {both[0]!r} is in both patches.enable and patches.disable; valid: one of them")
    return patches


def check_task_node(task: Any) -> None:
    from framework.core.build import build
    from framework.core.plain import to_plain
    from framework.core.validation import type_error

    for key, tp in TASK_NODE.items():
        if key in task and (reason := type_error(to_plain(task.get(key)), tp)) is not None:
            raise ConfigError(f"task.{key}: {reason}")
    unknown = sorted(str(key) for key in task if key not in TASK_NODE)  # `+task.steps=10` was read by nothing
    if unknown:
        raise ConfigError(f"task.{unknown[0]}: unknown key of the task node; valid: {', '.join(TASK_NODE)} (a task's "
                          f"settings live under its name: {task.get('name')}.KEY=VALUE)")
    if task.get("objective") is not None:
        build(TaskObjective, task.objective, "task.objective")


# hf_config fields every code path divides by or sizes arrays with: each must be an integer >= 1 when present.
ARCHITECTURE_COUNTS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                       "intermediate_size", "vocab_size", "head_dim", "max_position_embeddings",
                       "moe_intermediate_size", "num_experts", "n_routed_experts", "num_experts_per_tok")


# hf_config fields read as true/false (bool('maybe') is True) and as positive rates (a negative eps, a NaN theta).
ARCHITECTURE_FLAGS = ("tie_word_embeddings", "attention_bias", "mlp_bias", "use_sliding_window")
ARCHITECTURE_RATES = ("rms_norm_eps", "rope_theta")


def _non_finite(node: Any, path: str = "") -> str | None:
    """The dotted key of the first NaN or inf number under `node` (a plain mapping or list), or None."""
    import math

    items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else ()
    for key, value in items:
        where = f"{path}{key}"
        if isinstance(value, float) and not math.isfinite(value):
            return f"{where}: {value} is not a finite number; valid: a finite number"
        if (found := _non_finite(value, f"{where}.")) is not None:
            return found
    return None


def check_model_architecture(hf_config: Any, where: str = "model.hf_config.") -> None:
    """ConfigError naming the key (after `where`: the model group's hf_config, or a folder's config.json) whose count
    is not an integer >= 1, whose head split is off, which is no finite number, no true/false where one is read, or
    routes a token to more experts than there are."""
    from framework.core.plain import to_plain
    from framework.core.validation import type_error

    if (reason := _non_finite(to_plain(hf_config))) is not None:
        raise ConfigError(f"{where}{reason}")
    for names, tp in ((ARCHITECTURE_COUNTS, Count), (ARCHITECTURE_FLAGS, bool), (ARCHITECTURE_RATES, PositiveFloat)):
        for name in names:
            value = hf_config.get(name)
            if value is not None and (reason := type_error(value, tp)):
                raise ConfigError(f"{where}{name}: {reason}")
    heads, kv_heads = hf_config.get("num_attention_heads"), hf_config.get("num_key_value_heads")
    if heads and kv_heads and heads % kv_heads:
        raise ConfigError(f"{where}num_key_value_heads: {kv_heads} must divide num_attention_heads={heads}")
    top_k = hf_config.get("num_experts_per_tok")
    experts_key = next((k for k in ("num_experts", "n_routed_experts") if hf_config.get(k)), None)
    if top_k and experts_key and top_k > hf_config.get(experts_key):
        raise ConfigError(f"{where}num_experts_per_tok: {top_k} is more than the model's {experts_key}="
                          f"{hf_config.get(experts_key)}; valid: 1 to {hf_config.get(experts_key)} (experts each token "
                          f"is routed to)")
