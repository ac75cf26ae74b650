"""Supervised fine-tuning on chat data (TRL SFTTrainer on torch, mlx-lm on MLX)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Literal

from framework.core.checkpoint import CheckpointPolicy
from framework.core.dtypes import TrainDtype
from framework.core.errors import ConfigError
from framework.core.ranges import Count
from framework.tasks.common import (EvalConfig, LoRAConfig, OptimizerConfig, check_batch, check_lora,
                                    check_optimizer, check_positive)

log = logging.getLogger(__name__)


@dataclass
class SFTTask:
    steps: Count  # optimizer steps
    global_batch_size: Count  # sequences per optimizer step, all data-parallel ranks together
    micro_batch_size: Count  # sequences per forward/backward on one rank; the rest is accumulation
    max_seq_length: Count  # longer examples are truncated (TRL max_length)
    packing: bool  # pack several examples into one sequence of max_seq_length
    completion_only_loss: bool  # loss on the assistant turns only (TRL assistant_only_loss)
    finetune: Literal["lora", "full"]
    lora: LoRAConfig
    optimizer: OptimizerConfig
    eval: EvalConfig
    checkpoint: CheckpointPolicy
    export_hf: bool  # merged HF safetensors directory in <run dir>/hf_export (and the adapter alone)
    param_dtype: TrainDtype  # weights held in
    compute_dtype: TrainDtype  # matmuls in (autocast / mixed precision)


def check_sft(task: SFTTask, key: str = "sft") -> None:
    check_positive({"steps": task.steps, "max_seq_length": task.max_seq_length}, key)
    check_batch(task.global_batch_size, task.micro_batch_size, key)
    check_optimizer(task.optimizer, f"{key}.optimizer")
    if task.finetune == "lora":
        check_lora(task.lora, f"{key}.lora")
    if task.eval.every < 0 or task.eval.num_examples < 0:
        raise ConfigError(f"{key}.eval: every and num_examples must be >= 0")
    task.checkpoint.check(f"{key}.checkpoint")


def check_learnable_rows(learnable: int, rows: int, max_seq_length: int, key: str = "sft") -> None:
    """Rows whose prompt alone fills max_seq_length keep no completion token and teach nothing (TRL drops them, mlx
    trains on them with loss 0): none left is one line naming the key, some, a warning with the count."""
    if learnable == 0:
        raise ConfigError(f"{key}.max_seq_length: {max_seq_length} tokens leave no training record a completion token "
                          f"(all {rows} prompts fill it); raise it or set {key}.completion_only_loss=false")
    if learnable < rows:
        log.warning("%s.max_seq_length: %d tokens leave %d of %d training records no completion token; they teach "
                    "nothing", key, max_seq_length, rows - learnable, rows)
