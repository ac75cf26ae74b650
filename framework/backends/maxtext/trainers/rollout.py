"""Rollouts: prompts -> token ids -> sampled completions -> rewards, all arrays grouped per prompt.

Every prompt is left-padded to exactly `max_prompt_tokens` (longer ones keep their last tokens),
so the sampler and the update compile once per run instead of once per prompt length.

The rollout runs in its own layout (`parallel.rollout`, RolloutPlacement): a mesh over the update's
devices on which the weights are resharded each step, as verl's hybrid engine moves an FSDP-trained
policy to tensor-parallel inference.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
from pathlib import Path
from typing import Any, Sequence

import jax
import numpy as np
from jax.sharding import Mesh

from framework.backends.maxtext.sampler import Sampler, SamplingParams
from framework.backends.maxtext.sharding import ROLLOUT_KEY, LogicalRules, build_mesh, param_shardings, resharder
from framework.backends.maxtext.trainers.preflight import reshard_bytes_per_device
from framework.backends.maxtext.trainers.rollout_plan import rollout_weight_bytes
from framework.core.errors import ConfigError
from framework.core.parallel import ParallelConfig
from framework.data.gsm8k import MathExample
from framework.data.prompts import render_prompts
from framework.rl.advantages import compute_advantages
from framework.rl.rewards import compute_rewards, correctness

log = logging.getLogger(__name__)


@dataclasses.dataclass
class Rollouts:
    """N = prompts x samples rows; rows i*n .. i*n+n-1 belong to prompt i."""

    input_ids: np.ndarray  # [N, P + T] int32: left-padded prompt, then completion (pad after EOS)
    attention_mask: np.ndarray  # [N, P + T] int32
    completion_mask: np.ndarray  # [N, T] float32: 1 up to and including EOS
    ended: np.ndarray  # [N] bool: the completion emitted EOS within max_new_tokens
    completions: list[str]
    references: list[str]
    # [N, T] float32: the sampler's log-probs of the completion tokens (grpo.rollout_lag >= 1), else None
    behaviour_log_probs: np.ndarray | None = None

    @property
    def completion_lengths(self) -> np.ndarray:
        return self.completion_mask.sum(axis=1)


class PromptEncoder:
    """Chat-template rendering and tokenisation of math problems, truncated and padded to a fixed length."""

    def __init__(self, tokenizer: Any, system_prompt: str | None, max_prompt_tokens: int):
        self.tokenizer = tokenizer
        self.system_prompt = system_prompt
        self.max_prompt_tokens = max_prompt_tokens

    def encode(self, examples: Sequence[MathExample]) -> tuple[list[list[int]], int]:
        """Token ids per prompt (the last max_prompt_tokens of each) and how many were truncated."""
        texts = render_prompts(self.tokenizer, examples, self.system_prompt)
        ids = self.tokenizer(texts, add_special_tokens=False)["input_ids"]
        truncated = sum(len(row) > self.max_prompt_tokens for row in ids)
        return [row[-self.max_prompt_tokens:] for row in ids], truncated

    def decode(self, completion_ids: np.ndarray, completion_mask: np.ndarray) -> list[str]:
        rows = [row[: int(length)].tolist() for row, length in zip(completion_ids, completion_mask.sum(axis=1))]
        return self.tokenizer.batch_decode(rows, skip_special_tokens=True)


class RolloutPlacement:
    """The rollout's mesh over the update's devices, the policy's shardings on it (the same logical axes and
    rules, so any parameter tree works), and the move of the weights there, cast to the compute dtype the
    sampler decodes in (its own cast is then a no-op)."""

    def __init__(self, layout: ParallelConfig, devices: Sequence[jax.Device], update_mesh: Mesh, boxed_params: Any,
                 rules: LogicalRules, dtype: str):
        self.layout = layout  # resolved
        self.mesh = build_mesh(layout, devices, ROLLOUT_KEY)
        self.same_as_update = self.mesh == update_mesh  # one layout for both phases: nothing to move
        # placement separate: the rollout's own devices, disjoint from the update's (0 when shared)
        self.separate_devices = 0 if set(devices) & set(update_mesh.devices.flat) else len(devices)
        self.update_mesh_shape = dict(update_mesh.shape)
        self.shardings = param_shardings(boxed_params, self.mesh, rules)
        self._move = resharder(update_mesh, self.shardings, dtype)

    def reshard_bytes(self, model: Any, weight_bytes: float) -> float:
        """What each device receives per move of a `model` (ModelConfig) whose master weights take
        `weight_bytes`: the preflight's resharding term."""
        return reshard_bytes_per_device(rollout_weight_bytes(model, weight_bytes), self.update_mesh_shape,
                                        self.mesh.shape, separate=self.separate_devices > 0)

    def move(self, params: Any) -> Any:
        """The params in the rollout layout without waiting for the copy: what reads them (the sampler) is
        ordered after it on the devices."""
        return params if self.same_as_update else self._move(params)

    def policy(self, params: Any) -> tuple[Any, float]:
        """The params in the rollout layout and the seconds the resharding took (blocked until ready)."""
        started = time.perf_counter()
        moved = jax.block_until_ready(self.move(params))
        return moved, 0.0 if self.same_as_update else time.perf_counter() - started


def group_placements(layout: ParallelConfig, groups: list[list], update_mesh: Mesh, boxed_params: Any,
                     rules: LogicalRules, dtype: str) -> list[RolloutPlacement]:
    """A RolloutPlacement in `layout` on each rollout group's devices (grpo.rollout_lag=L: L groups, each
    with its own copy of the weights; else one), logged."""
    placements = [RolloutPlacement(layout, group, update_mesh, boxed_params, rules, dtype) for group in groups]
    log.info("grpo: rollout mesh %s%s%s", dict(placements[0].mesh.shape),
             f" in each of {len(groups)} rollout groups {[[d.id for d in g] for g in groups]}" if len(groups) > 1
             else "", " (the update's)" if placements[0].same_as_update else ", weights resharded to it each step")
    return placements


def generate(sampler: Sampler, encoder: PromptEncoder, params: Any, examples: Sequence[MathExample],
             rng: jax.Array, sampling: SamplingParams) -> tuple[Rollouts, int]:
    """Sample `sampling.num_samples` completions per problem; also returns the truncated prompt count."""
    prompts, truncated = encoder.encode(examples)
    out = to_host(sampler.generate(params, prompts, rng, sampling))
    return assemble(out, encoder, sampler.eos_token_ids, references(examples, sampling.num_samples)), truncated


def references(examples: Sequence[MathExample], num_samples: int) -> list[str]:
    """Each problem's reference answer once per sampled row (rows grouped per prompt)."""
    return [example.reference for example in examples for _ in range(num_samples)]


def assemble(out: Any, encoder: PromptEncoder, eos_token_ids: Sequence[int], references: list[str]) -> Rollouts:
    """Rollouts from the sampler's host output (sampler.SampleOutput of numpy arrays)."""
    completion_mask = np.asarray(out.completion_mask, np.float32)
    log_probs = out.completion_log_probs
    return Rollouts(
        input_ids=np.concatenate([out.prompt_ids, out.completion_ids], axis=1).astype(np.int32),
        attention_mask=np.concatenate([out.prompt_mask, out.completion_mask], axis=1).astype(np.int32),
        completion_mask=completion_mask,
        ended=np.isin(out.completion_ids, eos_token_ids).any(axis=1),
        completions=encoder.decode(np.asarray(out.completion_ids), completion_mask),
        references=references,
        behaviour_log_probs=None if log_probs is None else np.asarray(log_probs, np.float32),
    )


def eos_token_ids(tokenizer: Any, model_dir: Any) -> list[int]:
    """The tokenizer's EOS plus generation_config.json's (Qwen ends turns with <|im_end|> or <|endoftext|>), read
    as GenerationConfig.from_pretrained reads the field, without importing transformers."""
    ids = {tokenizer.eos_token_id}
    path = Path(model_dir) / "generation_config.json"
    try:
        configured = json.loads(path.read_text()).get("eos_token_id") if path.is_file() else None
    except (ValueError, AttributeError) as error:
        raise ConfigError(f"{path}: not a JSON object ({error})") from None
    configured = configured if isinstance(configured, list) else [configured]
    if not all(i is None or (isinstance(i, int) and not isinstance(i, bool) and i >= 0) for i in configured):
        raise ConfigError(f"{path}: eos_token_id {configured!r} must be a token id or a list of token ids")
    return sorted(i for i in ids | set(configured) if i is not None)


def to_host(tree: Any) -> Any:
    """Device arrays -> numpy. With several processes (multi-host TPU/GPU) each gathers the global arrays."""
    if jax.process_count() == 1:
        return jax.device_get(tree)
    from jax.experimental import multihost_utils

    return multihost_utils.process_allgather(tree, tiled=True)


def score(rollouts: Rollouts, weights: dict[str, float]) -> tuple[np.ndarray, dict[str, float]]:
    """Weighted rewards [N] and their metrics: mean/std of the total and of each reward, accuracy."""
    total, per_function = compute_rewards(rollouts.completions, rollouts.references, weights)
    correct = per_function.get("correctness")
    if correct is None:
        correct = np.array([correctness(c, r) for c, r in zip(rollouts.completions, rollouts.references)])
    metrics = {"reward_mean": float(total.mean()), "reward_std": float(total.std()),
               "accuracy": float((correct == 1.0).mean())}
    for name, values in per_function.items():
        metrics[f"reward_{name}_mean"] = float(values.mean())
        metrics[f"reward_{name}_std"] = float(values.std())
    return total, metrics


def advantages(rewards: np.ndarray, task: Any) -> np.ndarray:
    """The advantages [N] of rewards [N] by the task's (a GRPOTask's) estimator; grpo's scaled as it says."""
    options = {"scale_by_std": task.scale_rewards} if task.advantage_estimator == "grpo" else {}
    return compute_advantages(rewards, task.num_generations, task.advantage_estimator, **options)


def completion_metrics(rollouts: Rollouts) -> dict[str, float]:
    lengths = rollouts.completion_lengths
    return {"completion_length": float(lengths.mean()), "completion_length_max": float(lengths.max()),
            "truncated_fraction": float(1.0 - rollouts.ended.mean())}


def zero_std_group_fraction(rewards: np.ndarray, num_generations: int) -> float:
    """Share of prompts whose completions all got the same reward: no learning signal from them."""
    grouped = rewards.reshape(-1, num_generations)
    return float((grouped.max(axis=1) == grouped.min(axis=1)).mean())
