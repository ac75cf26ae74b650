"""Direct preference optimisation on prompt/chosen/rejected pairs (TRL DPOTrainer on torch; MLX)."""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Annotated, Iterable, Literal, Optional

from framework.core.checkpoint import CheckpointPolicy
from framework.core.dtypes import TrainDtype
from framework.core.errors import ConfigError
from framework.core.ranges import Count, PositiveFloat, Range
from framework.data.records import PreferencePair
from framework.tasks.common import (EvalConfig, LoRAConfig, OptimizerConfig, check_batch, check_lora,
                                    check_optimizer, check_positive)

log = logging.getLogger(__name__)

# framework/rl/preference.py defines each loss (with its TRL name and formula).
DPOLoss = Literal["sigmoid", "ipo", "hinge", "robust"]


@dataclass
class DPOTask:
    steps: Count
    global_batch_size: Count  # preference pairs per optimizer step, all data-parallel ranks together
    micro_batch_size: Count  # pairs per forward/backward on one rank
    max_prompt_length: Count  # prompts keep their last max_prompt_length tokens
    max_completion_length: Count  # chosen/rejected keep their first max_completion_length tokens
    beta: PositiveFloat  # strength of the implicit KL to the reference
    loss_type: DPOLoss
    label_smoothing: Annotated[float, Range(0, 0.5)]  # sigmoid/robust: assumed share of flipped labels (cDPO / robust DPO)
    # base: the starting model (LoRA: adapter disabled; full: a frozen copy); model: reference_model;
    # precomputed: reference log-probs computed once before training from the base model
    reference: Literal["base", "model", "precomputed"]
    reference_model: Optional[str]  # a local HF directory or hub id when reference=model, else null
    finetune: Literal["lora", "full"]
    lora: LoRAConfig
    optimizer: OptimizerConfig
    eval: EvalConfig
    checkpoint: CheckpointPolicy
    export_hf: bool
    param_dtype: TrainDtype
    compute_dtype: TrainDtype


def check_dpo(task: DPOTask, key: str = "dpo") -> None:
    check_positive({"steps": task.steps, "max_prompt_length": task.max_prompt_length,
                    "max_completion_length": task.max_completion_length}, key)
    check_batch(task.global_batch_size, task.micro_batch_size, key)
    check_optimizer(task.optimizer, f"{key}.optimizer")
    if task.beta <= 0:
        raise ConfigError(f"{key}.beta: {task.beta} must be > 0")
    if not 0.0 <= task.label_smoothing < 0.5:
        raise ConfigError(f"{key}.label_smoothing: {task.label_smoothing} must be in [0, 0.5)")
    if task.label_smoothing and task.loss_type not in ("sigmoid", "robust"):
        raise ConfigError(f"{key}.label_smoothing: only loss_type sigmoid or robust use it, not {task.loss_type}")
    if (task.reference == "model") != (task.reference_model is not None):
        raise ConfigError(f"{key}.reference_model: set it exactly when {key}.reference=model (now reference="
                          f"{task.reference}, reference_model={task.reference_model!r})")
    if task.finetune == "lora":
        check_lora(task.lora, f"{key}.lora")
    task.checkpoint.check(f"{key}.checkpoint")


def check_distinct_pairs(pairs: list[PreferencePair], completions: Iterable[tuple[list[int], list[int]]],
                         max_completion_length: int, where: str, key: str = "dpo") -> None:
    """A pair whose chosen and rejected completions are the same tokens has a zero loss gradient: it trains on
    nothing (TRL says nothing). `completions`: each pair's (chosen, rejected) token ids as truncated for training,
    read once (an iterator, so a large data set is not held as Python lists). Every pair identical is one line naming
    the key; some, a warning with the count."""
    total = identical = 0
    for chosen, rejected in completions:
        total += 1
        identical += list(chosen) == list(rejected)
    if not identical:
        return
    same_text = sum(1 for pair in pairs if pair.chosen == pair.rejected)
    why = (f"{key}.max_completion_length: {identical} of {total} training pairs of {where} have the same "
           f"chosen and rejected tokens once cut to {max_completion_length} tokens")
    way_out = f"raise {key}.max_completion_length" + (f" ({same_text} of them have the same chosen and rejected "
                                                       f"text: fix the data)" if same_text else "")
    if identical == total:
        raise ConfigError(f"{why}: the run would train on nothing; {way_out}")
    log.warning("%s; those pairs train on nothing (zero gradient); %s", why, way_out)
