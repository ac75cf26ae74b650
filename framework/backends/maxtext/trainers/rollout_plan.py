"""The rollout's plan for the memory it decodes in: its tensor-parallel size when `parallel.rollout.tp` is null (the
smallest that fits its weights and KV cache beside what the update keeps there), and whether the sampler keeps each
prompt's K/V once for its samples on a rollout mesh (prompt_decision). The trainer, the layout search
(layout_search.py) and the layouts benchmark ask the same functions; the preflight (preflight.py) predicts the step
they plan.
"""

from __future__ import annotations

import logging
import math
from typing import Any, Callable, Mapping

from framework.backends.maxtext.models.prefix_cache import cache_per_shard, prefix_decision, prompt_shards
from framework.backends.maxtext.sharding import abstract_mesh
from framework.backends.maxtext.trainers.preflight import MEMORY_HEADROOM
from framework.core.dtypes import BYTES
from framework.core.errors import ConfigError
from framework.tasks.grpo import GRPOTask

log = logging.getLogger(__name__)


def pick_rollout_tp(rollout_weight_bytes: float, kv_bytes_per_token: float, resident_bytes: float, task: GRPOTask,
                    devices: int, memory_gb: float, heads: tuple[int, ...] = (),
                    cache_share: Callable[[int], float] | None = None) -> int:
    """The rollout's tensor-parallel size when `parallel.rollout.tp` is null: the smallest divisor of `devices`
    (the devices the rollout's fixed axes leave) that divides every head count in `heads` (the rules would
    replicate heads a tp does not divide), whose replicas (devices / tp) split the prompts evenly, and whose
    share of the rollout's weights (`rollout_weight_bytes`: the policy cast to the compute dtype)
    and of the KV cache fits beside the training state that stays on the device (`resident_bytes`); the
    largest such tp when none fits (the preflight's memory check then speaks). `cache_share(tp)`: the KV-cache
    entries per layer and KV head one batch shard holds at that tp, before tp splits the heads (default rows x
    (prompt + new tokens) over devices / tp shards; rollout_tp_for: as the sampler shards its cache)."""
    candidates = [tp for tp in range(1, devices + 1)
                  if devices % tp == 0 and task.prompts_per_step % (devices // tp) == 0
                  and all(count % tp == 0 for count in heads)] or [1]
    budget = memory_gb * 1e9 * MEMORY_HEADROOM - resident_bytes
    tokens = task.rows_per_step * (task.max_prompt_tokens + task.max_new_tokens)
    cache_share = cache_share or (lambda tp: tokens / (devices // tp))
    for tp in candidates:
        if rollout_weight_bytes / tp + kv_bytes_per_token * cache_share(tp) / tp <= budget:
            return tp
    return candidates[-1]


def prompt_decision(model: Any, task: GRPOTask, mesh: Any, rules: Any) -> tuple[bool, str]:
    """Whether the rollout's sampler keeps each prompt's K/V once for its samples on the rollout `mesh` (an abstract
    one will do), and why: prefix_cache.prefix_decision at the step's shapes over the mesh's prompt shards, as the
    sampler asks at trace time (the trainer logs it, the layout search and grpo_layouts predict with it)."""
    samples = task.rows_per_step // task.prompts_per_step
    return prefix_decision(model, task.prompts_per_step, samples, task.max_prompt_tokens, task.max_new_tokens,
                           prompt_shards(task.prompts_per_step, samples, mesh, rules))


def prompt_sharing(model: Any, task: GRPOTask, mesh: Any, rules: Any) -> dict[str, Any]:
    """prompt_decision logged with why; the summary's scalars."""
    shared, why = prompt_decision(model, task, mesh, rules)
    log.info("shared prefix: %s (%s)", "on" if shared else "off", why)
    return {"shared_prefix": shared, "shared_prefix_reason": why}


def rollout_weight_bytes(model: Any, weight_bytes: float) -> float:
    """The rollout's copy of the weights: the policy cast to the compute dtype (RolloutPlacement, the sampler)."""
    return weight_bytes * BYTES[model.dtype] / BYTES[model.param_dtype]


def rollout_tp_for(model: Any, weight_bytes: float, update_mesh: Mapping[str, int], task: GRPOTask,
                   memory_gb: float, devices: int | None = None, separate: bool = False,
                   meshes: Callable[[int], Mapping[str, int]] | None = None, rules: Any = None) -> int:
    """pick_rollout_tp for a model (a ModelConfig: heads, layers, KV heads, head_dim, dtypes) whose weights take
    `weight_bytes`, trained on `update_mesh`: its shards of the params, AdamW moments and reference stay
    (not with `separate`: parallel.rollout.placement=separate decodes on devices that hold no training state).
    `devices`: what the rollout's fixed axes leave for tp (default: every device of the update); with `separate`
    the rollout's weights count twice (two copies there while the next ones move in). `meshes(tp)`: the rollout
    mesh's axis sizes with that tp (sharding.rollout_meshes; default: data x tensor over `devices`), whose batch
    shards the cache splits over as the sampler asks (prefix_cache.prompt_shards under the logical axis `rules`)."""
    shards = update_mesh["fsdp"] * update_mesh["expert"] * update_mesh["tensor"]
    resident = 0.0 if separate else weight_bytes * (3 + int(task.beta > 0)) / shards
    # separate: the next weights arrive while the old copy still decodes (off_policy_memory)
    rollout_weights = rollout_weight_bytes(model, weight_bytes) * (2 if separate else 1)
    kv_per_token = 2 * model.num_layers * model.num_kv_heads * model.head_dim * BYTES[model.dtype]
    devices = devices or update_mesh["data"] * shards
    meshes = meshes or (lambda tp: {"data": devices // tp, "fsdp": 1, "expert": 1, "tensor": tp})

    def cache_share(tp: int) -> float:
        try:
            mesh = abstract_mesh(meshes(tp))
        except ConfigError:  # the layout's other axes cannot take this tp: never fits
            return math.inf
        return cache_per_shard(model, task.prompts_per_step, task.rows_per_step // task.prompts_per_step,
                               task.max_prompt_tokens, task.max_new_tokens, mesh, rules)

    return pick_rollout_tp(rollout_weights, kv_per_token, resident, task, devices, memory_gb,
                           heads=(model.num_heads, model.num_kv_heads), cache_share=cache_share)
