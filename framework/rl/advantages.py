"""Advantage estimators for group-sampled RL (GRPO and friends): pure numpy, backend-neutral.

Add one with `@register_advantage("name")` (as verl's core_algos.py does); a task selects it by
name (`grpo.advantage_estimator`), and an unknown name is a ConfigError listing the registered ones.

Rewards come in shape [num_prompts * num_generations], grouped contiguously by prompt: the
`num_generations` completions of prompt 0 first, then those of prompt 1, and so on. Each
estimator returns float32 advantages of the same shape, one per completion.

- `grpo`: (r - group mean) / (group std + eps), the std being the sample std (Bessel-corrected,
  as TRL computes it). `scale_by_std=False` gives Dr.GRPO's unscaled r - group mean.
- `rloo`: r_i minus the mean of the *other* completions of its group (leave-one-out baseline),
  which equals n / (n - 1) * (r_i - group mean).
- `reinforce`: r - a plain mean baseline, without std scaling; `baseline="batch"` (default) uses
  the mean over the whole batch, `baseline="group"` the mean of the prompt's group (the latter is
  the same as `grpo` with `scale_by_std=False`).
"""

from __future__ import annotations

import inspect
from typing import Callable

import numpy as np

from framework.core.errors import ConfigError

DEFAULT_EPS = 1e-4  # TRL's value: keeps the scale bounded when every completion in a group ties
REINFORCE_BASELINES = ("batch", "group")


def group_rewards(rewards, num_generations: int, min_group_size: int = 1) -> np.ndarray:
    """Reshape [P * n] rewards to [P, n], checking that they divide into groups."""
    rewards = np.asarray(rewards, dtype=np.float64)
    if rewards.ndim != 1 or num_generations < min_group_size or rewards.size % num_generations:
        raise ConfigError(
            f"num_generations={num_generations}: rewards of shape {rewards.shape} must be 1-D with a length "
            f"divisible by num_generations, and num_generations >= {min_group_size}"
        )
    return rewards.reshape(-1, num_generations)


ADVANTAGE_ESTIMATORS: dict[str, Callable[..., np.ndarray]] = {}


def register_advantage(name: str) -> Callable[[Callable[..., np.ndarray]], Callable[..., np.ndarray]]:
    """Register `fn(rewards [P*n], num_generations, **options) -> advantages [P*n] float32` as `name`."""

    def register(fn: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
        if name in ADVANTAGE_ESTIMATORS:
            raise ValueError(f"advantage estimator {name!r} is registered twice")
        ADVANTAGE_ESTIMATORS[name] = fn
        return fn

    return register


def check_estimator(name: str, key: str) -> None:
    if name not in ADVANTAGE_ESTIMATORS:
        raise ConfigError(f"{key}: unknown advantage estimator {name!r}; valid: {', '.join(sorted(ADVANTAGE_ESTIMATORS))}")


@register_advantage("grpo")
def grpo_advantages(rewards, num_generations: int, scale_by_std: bool = True, eps: float = DEFAULT_EPS) -> np.ndarray:
    """rewards [P*n] -> (r - group mean) / (group std + eps) [P*n]; scale_by_std=False: Dr.GRPO's r - mean."""
    grouped = group_rewards(rewards, num_generations, min_group_size=2)
    advantages = grouped - grouped.mean(axis=1, keepdims=True)
    if scale_by_std:
        advantages = advantages / (grouped.std(axis=1, ddof=1, keepdims=True) + eps)
    return advantages.reshape(-1).astype(np.float32)


@register_advantage("rloo")
def rloo_advantages(rewards, num_generations: int) -> np.ndarray:
    """rewards [P*n] -> r_i - mean of the other n-1 rewards of its group [P*n]."""
    grouped = group_rewards(rewards, num_generations, min_group_size=2)
    others_mean = (grouped.sum(axis=1, keepdims=True) - grouped) / (num_generations - 1)
    return (grouped - others_mean).reshape(-1).astype(np.float32)


@register_advantage("reinforce")
def reinforce_advantages(rewards, num_generations: int, baseline: str = "batch") -> np.ndarray:
    """rewards [P*n] -> r - mean baseline (of the batch or of the group) [P*n], no std scaling."""
    grouped = group_rewards(rewards, num_generations)
    if baseline not in REINFORCE_BASELINES:
        raise ConfigError(f"reinforce baseline='{baseline}' is unknown; valid: {list(REINFORCE_BASELINES)}")
    baseline_value = grouped.mean() if baseline == "batch" else grouped.mean(axis=1, keepdims=True)
    return (grouped - baseline_value).reshape(-1).astype(np.float32)




def compute_advantages(rewards, num_generations: int, estimator: str = "grpo", **options) -> np.ndarray:
    """Advantages [P * n] from rewards [P * n] with the named estimator and its options."""
    check_estimator(estimator, "advantage_estimator")
    function = ADVANTAGE_ESTIMATORS[estimator]
    valid_options = list(inspect.signature(function).parameters)[2:]
    unknown = [name for name in options if name not in valid_options]
    if unknown:
        raise ConfigError(f"advantage options {unknown} do not apply to '{estimator}'; valid: {valid_options}")
    return function(rewards, num_generations, **options)
