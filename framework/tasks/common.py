"""Pieces several task schemas share: optimizer and schedule, LoRA, evaluation, checkpoint policy."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from framework.core.checkpoint import CheckpointPolicy  # noqa: F401  (re-exported: tasks name it here)
from framework.core.errors import ConfigError
from framework.core.ranges import Count, Fraction, NonNegativeFloat, NonNegativeInt, OpenFraction, PositiveFloat


@dataclass
class OptimizerConfig:
    """AdamW with linear warmup, then a constant, cosine or linear schedule, and global-norm clipping."""

    learning_rate: PositiveFloat  # peak, reached after warmup_steps
    b1: OpenFraction
    b2: OpenFraction
    eps: PositiveFloat
    weight_decay: NonNegativeFloat
    warmup_steps: NonNegativeInt  # optimizer steps of linear warmup from 0
    schedule: Literal["constant", "cosine", "linear"]  # after warmup, until the task's last step
    min_lr_ratio: Fraction  # cosine/linear end at learning_rate * min_lr_ratio
    max_grad_norm: NonNegativeFloat  # 0 = no clipping


@dataclass
class LoRAConfig:
    """Low-rank adapters (PEFT on torch, mlx_lm.tuner on MLX); used when the task's finetune is `lora`."""

    rank: Count
    alpha: PositiveFloat  # the update is scaled by alpha / rank
    dropout: OpenFraction
    target_modules: list[str]  # module names (q_proj, v_proj, ...) or ["all-linear"]


@dataclass
class EvalConfig:
    """Loss (and task metrics) on held-out examples."""

    every: NonNegativeInt  # steps; and after the last one; 0 = never
    num_examples: NonNegativeInt  # the first N examples of the held-out split


def check_optimizer(opt: OptimizerConfig, key: str) -> None:
    if opt.learning_rate <= 0:
        raise ConfigError(f"{key}.learning_rate: {opt.learning_rate} must be > 0")
    for name in ("warmup_steps", "weight_decay", "max_grad_norm"):
        if getattr(opt, name) < 0:
            raise ConfigError(f"{key}.{name}: {getattr(opt, name)} must be >= 0")
    if not 0.0 <= opt.min_lr_ratio <= 1.0:
        raise ConfigError(f"{key}.min_lr_ratio: {opt.min_lr_ratio} must be in [0, 1]")


def check_lora(lora: LoRAConfig, key: str) -> None:
    if lora.rank < 1:
        raise ConfigError(f"{key}.rank: {lora.rank} must be >= 1")
    if lora.alpha <= 0:
        raise ConfigError(f"{key}.alpha: {lora.alpha} must be > 0")
    if not 0.0 <= lora.dropout < 1.0:
        raise ConfigError(f"{key}.dropout: {lora.dropout} must be in [0, 1)")
    if not lora.target_modules:
        raise ConfigError(f"{key}.target_modules: empty; name modules like [q_proj, v_proj] or [all-linear]")


def check_positive(values: dict[str, int | float], key: str) -> None:
    for name, value in values.items():
        if value < 1:
            raise ConfigError(f"{key}.{name}: {value} must be >= 1")


def check_batch(global_batch: int, micro_batch: int, key: str) -> None:
    """The global batch splits into whole micro-batches (data-parallel ranks x accumulation steps)."""
    check_positive({"global_batch_size": global_batch, "micro_batch_size": micro_batch}, key)
    if global_batch % micro_batch:
        raise ConfigError(f"{key}.micro_batch_size: {micro_batch} must divide global_batch_size={global_batch}")


def check_batch_fits_data(global_batch: int, records: int, where: str, key: str, limit: int | None = None) -> None:
    """A global batch larger than the training set: TRL's step took the records there were (a smaller batch), mlx
    repeated records within one step; neither said so. `limit`: data.train_limit."""
    if global_batch > records:
        more = "raise data.train_limit" if limit == records else "add records"
        raise ConfigError(f"{key}.global_batch_size: {global_batch} is more than the {records} training records of "
                          f"{where}; lower it (and {key}.micro_batch_size), or {more}")
