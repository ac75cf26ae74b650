"""Typed views of the maxtext backend's config: the `grpo:` task node and the `data` group.

Types only, no defaults: conf/task/grpo.yaml and conf/data/*.yaml hold every value. `build()` turns
a plain mapping into these dataclasses (nested ones included); `check_grpo_values()` checks what a
type cannot say (ranges, divisibility), each error naming its key.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from typing import Any, Literal, Mapping, Optional, TypeVar

from framework.core.errors import ConfigError

T = TypeVar("T")


@dataclass
class OptimizerConfig:
    """optax AdamW with a warmup + decay schedule and global-norm gradient clipping."""

    learning_rate: float  # peak learning rate, reached after warmup_steps
    b1: float
    b2: float
    eps: float
    weight_decay: float
    warmup_steps: int  # GRPO steps of linear warmup from 0
    schedule: Literal["constant", "cosine", "linear"]  # after warmup, until grpo.steps
    min_lr_ratio: float  # the cosine/linear schedule ends at learning_rate * min_lr_ratio
    max_grad_norm: float  # clip the global gradient norm to this; 0 = no clipping


@dataclass
class EvalConfig:
    """Greedy decoding on the test split; accuracy = share of exactly correct answers."""

    every: int  # evaluate every this many steps and after the last one; 0 = never
    num_examples: int  # the first num_examples test problems
    max_new_tokens: int


@dataclass
class CheckpointConfig:
    """Orbax checkpoints in <run dir>/checkpoints (params, optimizer, step, data order, RNG)."""

    every: int  # save every this many steps and after the last one; 0 = never
    keep: int  # how many recent checkpoints to keep
    resume: bool  # continue from the latest checkpoint in the run dir, if there is one


@dataclass
class GRPOTask:
    steps: int
    prompts_per_step: int
    num_generations: int  # completions sampled per prompt (the group)
    max_prompt_tokens: int  # longer prompts keep their last max_prompt_tokens tokens
    max_new_tokens: int
    temperature: float
    top_k: int  # 0 = off
    top_p: float  # 1.0 = off
    advantage_estimator: Literal["grpo", "rloo", "reinforce"]
    scale_rewards: bool  # grpo only: divide by the group std (false = Dr.GRPO)
    clip_low: float  # ratio clipped to [1 - clip_low, 1 + clip_high]
    clip_high: float
    beta: float  # KL weight; 0 = no reference model and no reference forward pass
    kl_importance_correction: bool
    loss_normalization: Literal["token", "sequence", "fixed"]
    ppo_epochs: int  # optimizer updates per batch of rollouts
    micro_batch_size: int  # sequences per forward/backward; gradients accumulate over the batch
    logprob_chunk_size: int  # completion positions per chunk of the vocabulary projection
    rewards: dict[str, float]  # reward function name -> weight (framework.rl.rewards)
    optimizer: OptimizerConfig
    eval: EvalConfig
    checkpoint: CheckpointConfig
    export_hf: bool  # write the final policy as an HF directory (safetensors, config, tokenizer)
    param_dtype: Literal["float32", "bfloat16"]
    compute_dtype: Literal["float32", "bfloat16"]
    preflight: bool  # predict step time and memory with the simulator before training

    @property
    def rows_per_step(self) -> int:
        return self.prompts_per_step * self.num_generations


@dataclass
class ArithmeticSpec:
    """Settings of framework.data.arithmetic.generate_arithmetic (train and test drawn apart)."""

    num_train: int
    num_test: int
    num_operands: int
    max_value: int
    ops: list[str]
    seed: int


@dataclass
class DataSpec:
    """The `data` group: where the math word problems come from."""

    name: str
    source: Literal["hub", "local", "sample", "synthetic"]
    path: Optional[str]  # hub: dataset id; local: a folder with train.jsonl/test.jsonl; else null
    train_limit: Optional[int]  # use only the first train_limit training problems; null = all
    system_prompt: Optional[str]  # "default" = framework.data.prompts.SYSTEM_PROMPT; null = none
    arithmetic: Optional[ArithmeticSpec]  # source=synthetic only


@dataclass
class GRPOConfig:
    """What MaxTextAdapter.convert_config hands the GRPO trainer."""

    task: GRPOTask
    data: DataSpec
    model_name: str
    model_source: str  # a local HF directory or a hub id
    hardware: dict  # the hardware group (name, accelerator, peak rates, mesh, ...)
    mesh: dict[str, int]  # MaxText-style axes {data, fsdp, tensor, expert}; -1 = remaining devices
    logical_axis_rules: dict  # overrides of sharding.DEFAULT_RULES
    cache_dir: str  # tiny model builds and the JAX compilation cache
    seed: int


def build(cls: type[T], values: Mapping[str, Any], key: str) -> T:
    """`cls(**values)` with nested dataclass fields built too; unknown or missing keys name `key`."""
    hints = typing.get_type_hints(cls)
    fields = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - fields - {"_target_"})
    if unknown:
        raise ConfigError(f"{key}.{unknown[0]}: unknown key; valid: {', '.join(sorted(fields))}")
    missing = sorted(fields - set(values))
    if missing:
        raise ConfigError(f"{key}.{missing[0]}: missing key")
    kwargs = {}
    for name in fields:
        value, nested = values[name], _dataclass_of(hints[name])
        kwargs[name] = build(nested, value, f"{key}.{name}") if nested and isinstance(value, Mapping) else value
    return cls(**kwargs)


def _dataclass_of(tp: Any) -> type | None:
    """The dataclass in `tp` (also inside Optional[...]), or None."""
    candidates = typing.get_args(tp) or (tp,)
    return next((c for c in candidates if dataclasses.is_dataclass(c)), None)


def check_grpo_values(task: GRPOTask) -> None:
    """Ranges and divisibility the types cannot express; ConfigError names the key."""
    positive = {"steps": task.steps, "prompts_per_step": task.prompts_per_step,
                "max_prompt_tokens": task.max_prompt_tokens, "max_new_tokens": task.max_new_tokens,
                "ppo_epochs": task.ppo_epochs, "micro_batch_size": task.micro_batch_size,
                "logprob_chunk_size": task.logprob_chunk_size,
                "eval.max_new_tokens": task.eval.max_new_tokens, "checkpoint.keep": task.checkpoint.keep}
    for name, value in positive.items():
        if value < 1:
            raise ConfigError(f"grpo.{name}: {value} must be >= 1")
    if task.temperature <= 0:
        raise ConfigError(f"grpo.temperature: {task.temperature} must be > 0 (GRPO compares sampled completions)")
    non_negative = {"top_k": task.top_k, "clip_low": task.clip_low,
                    "clip_high": task.clip_high, "beta": task.beta, "eval.every": task.eval.every,
                    "eval.num_examples": task.eval.num_examples, "checkpoint.every": task.checkpoint.every,
                    "optimizer.warmup_steps": task.optimizer.warmup_steps,
                    "optimizer.weight_decay": task.optimizer.weight_decay,
                    "optimizer.max_grad_norm": task.optimizer.max_grad_norm}
    for name, value in non_negative.items():
        if value < 0:
            raise ConfigError(f"grpo.{name}: {value} must be >= 0")
    if task.num_generations < 2 and task.advantage_estimator in ("grpo", "rloo"):
        raise ConfigError(f"grpo.num_generations: {task.num_generations} must be >= 2 for advantage_estimator="
                          f"{task.advantage_estimator} (a group needs two completions to compare)")
    if not 0.0 < task.top_p <= 1.0:
        raise ConfigError(f"grpo.top_p: {task.top_p} must be in (0, 1] (1 = off)")
    if task.clip_low >= 1.0:
        raise ConfigError(f"grpo.clip_low: {task.clip_low} must be < 1 (the ratio is clipped at 1 - clip_low)")
    if task.rows_per_step % task.micro_batch_size:
        raise ConfigError(f"grpo.micro_batch_size: {task.micro_batch_size} must divide prompts_per_step x "
                          f"num_generations = {task.rows_per_step}")
    if task.optimizer.learning_rate <= 0:
        raise ConfigError(f"grpo.optimizer.learning_rate: {task.optimizer.learning_rate} must be > 0")
    if not 0.0 <= task.optimizer.min_lr_ratio <= 1.0:
        raise ConfigError(f"grpo.optimizer.min_lr_ratio: {task.optimizer.min_lr_ratio} must be in [0, 1]")
    from framework.rl.rewards import REWARD_FUNCTIONS

    unknown = sorted(set(task.rewards) - set(REWARD_FUNCTIONS))
    if unknown or not task.rewards:
        raise ConfigError(f"grpo.rewards: {unknown or 'empty'}; give {{name: weight}} with names from "
                          f"{sorted(REWARD_FUNCTIONS)}")
