"""Greedy evaluation on held-out problems (the GSM8K test split): accuracy and format."""

from __future__ import annotations

from typing import Any, Sequence

import jax
import numpy as np

from framework.backends.maxtext.sampler import Sampler, SamplingParams
from framework.backends.maxtext.trainers.rollout import PromptEncoder, generate
from framework.data.gsm8k import MathExample
from framework.rl.rewards import correctness, format_reward


def evaluate(sampler: Sampler, encoder: PromptEncoder, params: Any, examples: Sequence[MathExample],
             max_new_tokens: int, batch_size: int) -> dict[str, float]:
    """Greedy completions for every example, in batches of one fixed size (one compiled program)."""
    sampling = SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0, num_samples=1)
    completions, lengths = [], []
    for start in range(0, len(examples), batch_size):
        chunk = list(examples[start:start + batch_size])
        padded = chunk + [chunk[-1]] * (batch_size - len(chunk))  # repeat the last one to keep the shape
        rollouts, _ = generate(sampler, encoder, params, padded, jax.random.key(0), sampling)
        completions += rollouts.completions[:len(chunk)]
        lengths += rollouts.completion_lengths[:len(chunk)].tolist()
    references = [example.reference for example in examples]
    return {
        "eval_accuracy": float(np.mean([correctness(c, r) for c, r in zip(completions, references)])),
        "eval_format": float(np.mean([format_reward(c, r) for c, r in zip(completions, references)])),
        "eval_completion_length": float(np.mean(lengths)),
    }
