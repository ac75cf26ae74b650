"""GRPO (group relative policy optimisation) on math word problems: the `grpo:` node of conf/task/grpo.yaml.

Types only, no defaults: the YAML holds every value. Any backend that runs GRPO builds this with
`framework.core.build.build(GRPOTask, cfg.grpo, "grpo")` and checks it with `check_grpo_values`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from framework.core.checkpoint import CheckpointPolicy
from framework.core.dtypes import TrainDtype
from framework.core.errors import ConfigError
from framework.core.ranges import Count, NonNegativeFloat, NonNegativeInt, PositiveFloat, Range
from framework.tasks.common import OptimizerConfig, check_optimizer


@dataclass
class GRPOEvalConfig:
    """Greedy decoding on the test split; accuracy = share of exactly correct answers."""

    every: NonNegativeInt  # evaluate every this many steps and after the last one; 0 = never
    num_examples: NonNegativeInt  # the first num_examples test problems
    max_new_tokens: Count


@dataclass
class GRPOTask:
    steps: Count
    prompts_per_step: Count
    num_generations: Count  # completions sampled per prompt (the group)
    max_prompt_tokens: Count  # longer prompts keep their last max_prompt_tokens tokens
    max_new_tokens: Count
    temperature: PositiveFloat
    top_k: NonNegativeInt  # 0 = off
    top_p: Annotated[float, Range(0, 1, low_open=True)]  # 1.0 = off
    advantage_estimator: str  # a name registered in framework.rl.advantages (grpo | rloo | reinforce)
    scale_rewards: bool  # grpo only: divide by the group std (false = Dr.GRPO)
    clip_low: Annotated[float, Range(0, 1, high_open=True)]  # ratio clipped to [1 - clip_low, 1 + clip_high]
    clip_high: NonNegativeFloat
    beta: NonNegativeFloat  # KL weight; 0 = no reference model and no reference forward pass
    kl_importance_correction: bool
    loss_normalization: Literal["token", "sequence", "fixed"]  # docs/grpo.md: TRL dapo | grpo | dr_grpo
    ppo_epochs: Count  # optimizer updates per batch of rollouts
    # 0: sample, then update, on-policy; L >= 1: L rollout groups sample the next L batches while the update
    # trains on this one, L policy versions stale (backend=maxtext, parallel.rollout.placement=separate; docs/grpo.md)
    rollout_lag: NonNegativeInt
    # sequences per forward/backward (gradients accumulate over the batch), or auto: the largest the
    # backend's memory estimate fits (maxtext: the preflight's simulator)
    micro_batch_size: Count | Literal["auto"]
    logprob_chunk_size: Count  # completion positions per chunk of the vocabulary projection
    rewards: dict[str, float]  # reward function name -> weight (framework.rl.rewards)
    optimizer: OptimizerConfig
    eval: GRPOEvalConfig
    checkpoint: CheckpointPolicy
    export_hf: bool  # write the final policy as an HF directory (safetensors, config, tokenizer)
    param_dtype: TrainDtype
    compute_dtype: TrainDtype
    preflight: bool  # predict step time and memory with the simulator before training

    @property
    def rows_per_step(self) -> int:
        return self.prompts_per_step * self.num_generations


def check_grpo_values(task: GRPOTask, key: str = "grpo") -> None:
    """Divisibility, cross-key rules and registry names the field ranges cannot express; ConfigError names the key."""
    from framework.rl.advantages import check_estimator
    from framework.rl.rewards import check_reward_weights

    # per-key ranges (counts >= 1, temperature > 0, top_p in (0, 1], ...) are declared on the fields above
    check_estimator(task.advantage_estimator, f"{key}.advantage_estimator")
    if task.num_generations < 2 and task.advantage_estimator in ("grpo", "rloo"):
        raise ConfigError(f"{key}.num_generations: {task.num_generations} must be >= 2 for advantage_estimator="
                          f"{task.advantage_estimator} (a group needs two completions to compare)")
    if task.top_k == 1 and task.advantage_estimator in ("grpo", "rloo"):  # every step's grad_norm 0, exit 0
        raise ConfigError(f"{key}.top_k: 1 samples greedily: a group's completions are all the same, so are their "
                          f"rewards, and advantage_estimator={task.advantage_estimator} learns nothing; valid: 0 (off) "
                          f"or >= 2")
    if task.micro_batch_size != "auto" and task.rows_per_step % task.micro_batch_size:
        raise ConfigError(f"{key}.micro_batch_size: {task.micro_batch_size} must divide prompts_per_step x "
                          f"num_generations = {task.rows_per_step}")
    check_optimizer(task.optimizer, f"{key}.optimizer")
    task.checkpoint.check(f"{key}.checkpoint")
    check_reward_weights(task.rewards, f"{key}.rewards")


def check_sequence_fits(task: GRPOTask, max_positions: int, key: str = "grpo") -> None:
    """A prompt and its completion (the rollout's, evaluation's when it runs) fit the model's positions: past them
    a decode of 100000 tokens ran for minutes, deaf to SIGTERM, where a model could not use them."""
    budgets = {f"{key}.max_new_tokens": task.max_new_tokens}
    if task.eval.every > 0 and task.eval.num_examples > 0:
        budgets[f"{key}.eval.max_new_tokens"] = task.eval.max_new_tokens
    for name, new_tokens in budgets.items():
        if task.max_prompt_tokens + new_tokens > max_positions:
            raise ConfigError(f"{name}: {new_tokens} + {key}.max_prompt_tokens {task.max_prompt_tokens} = "
                              f"{task.max_prompt_tokens + new_tokens} tokens exceed the model's "
                              f"{max_positions} positions (model.hf_config.max_position_embeddings); lower them")
