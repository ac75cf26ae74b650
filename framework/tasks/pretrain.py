"""Causal-LM pretraining on tokenised text (megatron-core)."""

from __future__ import annotations

from dataclasses import dataclass

from framework.core.checkpoint import CheckpointPolicy
from framework.core.dtypes import TrainDtype
from framework.core.errors import ConfigError
from framework.core.ranges import Count, NonNegativeInt
from framework.tasks.common import OptimizerConfig, check_batch, check_optimizer, check_positive


@dataclass
class PretrainEval:
    every: NonNegativeInt  # steps; and after the last; 0 = never
    iters: Count  # validation micro-batches per evaluation


@dataclass
class PretrainTask:
    steps: Count  # optimizer steps (train_iters)
    global_batch_size: Count  # sequences per step over all data-parallel ranks
    micro_batch_size: Count  # sequences per forward/backward on one rank (pipeline micro-batch)
    seq_length: Count
    split: list[int]  # train/valid/test weights of the token data set, e.g. [98, 2, 0]
    init_from: str  # "random" (the model file's architecture) or "pretrained" (its weights)
    optimizer: OptimizerConfig
    eval: PretrainEval
    checkpoint: CheckpointPolicy
    export_hf: bool
    param_dtype: TrainDtype
    compute_dtype: TrainDtype


def check_pretrain(task: PretrainTask, key: str = "pretrain") -> None:
    check_positive({"steps": task.steps, "seq_length": task.seq_length}, key)
    check_batch(task.global_batch_size, task.micro_batch_size, key)
    check_optimizer(task.optimizer, f"{key}.optimizer")
    if task.init_from not in ("random", "pretrained"):
        raise ConfigError(f"{key}.init_from: {task.init_from!r}; valid: random, pretrained")
    if len(task.split) != 3 or any(w < 0 for w in task.split) or task.split[0] <= 0:
        raise ConfigError(f"{key}.split: {task.split} must be three non-negative weights, train > 0")
    task.checkpoint.check(f"{key}.checkpoint")
