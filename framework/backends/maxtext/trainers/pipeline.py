"""Off-policy GRPO (`grpo.rollout_lag: L` >= 1, `parallel.rollout.placement: separate`): the rollout and the
update on disjoint device sets, at the same time, L steps apart; the rollout devices split into L groups that
each sample one whole batch at a time with their own copy of the weights.

Exactly: theta_k are the weights after k updates; group g = (t - 1) mod L samples batch B_t. B_1 .. B_L are
sampled by theta_0 at the start, one per group, at once. During step t the update devices turn theta_{t-1} into
theta_t on B_t while group (t - 1) mod L, freed by B_t, already samples B_{t+L} with the weights it holds; then
theta_t is moved only to group t mod L, the group that submits next (RolloutPlacement, the update's layout ->
that group's mesh). So B_t, t > L, was sampled by theta_{t-L-1} and trains theta_{t-1}: a staleness of L policy
versions; B_1 .. B_L have staleness 0 .. L-1. With L = 1 (one group) this is verl's one_step_off_policy recipe:
B_t, t >= 2, sampled by theta_{t-2}. The PPO ratio is taken against the behaviour policy: the sampler returns the
log-prob of each sampled token under softmax(logits / temperature) (`Sampler(behaviour_log_probs=True)`), and
the update uses them as old_log_probs. A step then takes about max((weight move + rollout of one
batch) / L, update): the host does not wait for the move, and L groups pay when one batch's rollout (bounded by
the decode steps' latency) outlasts the update.

Each group samples in a background thread of its own: JAX releases the GIL while the devices compute, and
the main thread dispatches the update to the other devices meanwhile. The order in which data and RNG keys
are drawn (B_1, B_2, ... on the calling thread) does not depend on timing, so a run is deterministic and a
checkpoint holds the finished batches in flight (`RolloutAhead.in_flight`): a resume continues bit for bit.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable

from framework.backends.maxtext.trainers.in_flight import (LAG_KEY, RolloutAhead, Sampled, in_flight_slots,
                                                           refuse_lag_change, restored_batch, slot_key)
from framework.core.errors import CheckpointError, ConfigError



def check_off_policy(rollout_lag: int, rollout: Any) -> None:
    """grpo.rollout_lag and parallel.rollout.placement go together: a lag needs devices of its own to overlap
    on, and separate devices only pay when the phases overlap; L groups need a device count L divides."""
    if rollout_lag < 0:
        raise ConfigError(f"grpo.rollout_lag: {rollout_lag} is not valid; use 0 (on-policy) or L >= 1 (L rollout "
                          f"groups, L steps off-policy)")
    if rollout is None:
        if rollout_lag >= 1:
            raise ConfigError(f"grpo.rollout_lag: {rollout_lag} needs parallel.rollout.placement=separate "
                              "(parallel.rollout is null): the rollout overlaps the update on devices of its own; "
                              "or use rollout_lag=0")
        return
    if rollout.placement not in ("shared", "separate"):
        raise ConfigError(f"parallel.rollout.placement: '{rollout.placement}' is not valid; use shared or separate")
    if rollout_lag >= 1 and rollout.placement != "separate":
        raise ConfigError(f"grpo.rollout_lag: {rollout_lag} needs parallel.rollout.placement=separate "
                          "(parallel.rollout.devices: auto, the default, or N): the rollout overlaps the update on "
                          "devices of its own; or use rollout_lag=0")
    if rollout_lag == 0 and rollout.placement == "separate":
        raise ConfigError("parallel.rollout.placement: separate needs grpo.rollout_lag=1 or more (decoding on devices the "
                          "update leaves idle pays only when the phases overlap); or use placement=shared")
    if rollout_lag >= 1 and (rollout.devices is None or isinstance(rollout.devices, int) and (
            rollout.devices < rollout_lag or rollout.devices % rollout_lag)):
        raise ConfigError(f"parallel.rollout.devices: {rollout.devices} does not split into the grpo.rollout_lag="
                          f"{rollout_lag} rollout groups; use auto or a multiple of {rollout_lag} ({rollout_lag}, "
                          f"{2 * rollout_lag}, ..) below the device count (the rest train)")


def split_devices(devices: list, rollout: Any) -> tuple[list, list]:
    """(rollout devices, update devices): with placement separate the first parallel.rollout.devices decode and
    the rest train; shared: all of them do both."""
    count = rollout.check_placement(len(devices)) if rollout is not None else 0
    if not count:
        return list(devices), list(devices)
    return list(devices[:count]), list(devices[count:])


def group_devices(rollout_devices: list, rollout_lag: int) -> list[list]:
    """The rollout devices in grpo.rollout_lag groups of consecutive devices (lag 0: one group, shared)."""
    groups = max(rollout_lag, 1)
    if len(rollout_devices) % groups:
        raise ConfigError(f"parallel.rollout.devices: {len(rollout_devices)} does not split into the grpo.rollout_lag="
                          f"{rollout_lag} rollout groups; use a multiple of {groups}")
    size = len(rollout_devices) // groups
    return [list(rollout_devices[i * size:(i + 1) * size]) for i in range(groups)]


class OffPolicyRollouts:
    """The trainer's side of grpo.rollout_lag=L (the module doc), one sampler and placement per rollout group:
    `take(step, ...)` gives the batch step `step` trains on; `start_next`, called as soon as the update's first
    program is dispatched (PolicyUpdate.start's `dispatched`), starts sampling B_{step+L}; `during_update` (prefetch),
    called while the update computes, does the host's work on the next batch (decoding, `score`) if it is sampled
    by then; `after_update` starts moving the new weights to the group that submits next, without waiting (the
    sampler's program runs after the copy on the devices; a thread times it, the next after_update reports it).
    `watch` times the update's arrays on another thread, so host work inside the update's window (start_next,
    prefetch) does not count as update time (but for the few ms the thread may wait for the GIL after the arrays
    are ready while the host scores). Prompts are encoded, completions
    decoded and scored on the calling thread: the tokenizer is not shared with the sampling threads, and
    math-verify's timeouts (signal.alarm) work only in the main thread."""

    def __init__(self, samplers: list, encoder: Any, placements: list, sampling: Any,
                 score: Callable[[Any], Any] | None = None):
        self.samplers, self.encoder, self.placements, self.sampling = samplers, encoder, placements, sampling
        self.score = score or (lambda rollouts: None)
        self.lag = len(placements)
        self.groups = [RolloutAhead(functools.partial(self._sample, sampler)) for sampler in samplers]
        self.policies: list | None = None  # per group, the weights it samples its next batch with
        self.versions: list[int] = []  # per group, the version k of its theta_k
        self.next_step = 0  # the batch the next take returns: the oldest in flight
        self._move_timer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="weight-move")
        self._update_timer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="update-wait")
        self._move: Future | None = None  # the seconds of the weight move started by the last after_update

    def _group(self, batch: int) -> int:
        return (batch - 1) % self.lag

    def _sample(self, sampler: Any, policy: Any, prompts: list, rng: Any, references: list[str],
                truncated: int) -> tuple:
        from framework.backends.maxtext.trainers.rollout import to_host

        return to_host(sampler.generate(policy, prompts, rng, self.sampling)), references, truncated

    def _submit(self, batch: int, draw: Callable[[], tuple]) -> None:
        from framework.backends.maxtext.trainers.rollout import references

        group = self._group(batch)
        examples, rng = draw()  # data and key in the calling thread's order: deterministic
        prompts, truncated = self.encoder.encode(examples)
        self.groups[group].submit(self.policies[group], self.versions[group], prompts, rng,
                                  references(examples, self.sampling.num_samples), truncated)

    def take(self, step: int, params: Any, draw: Callable[[], tuple], last_step: int) -> tuple[Any, int, Any, dict]:
        """(Rollouts of B_step, truncated prompts, their `score`, timing rows). When B_step was not sampled yet (the
        rollout is the longer side) B_{step+L} starts sampling at once; otherwise `start_next`, after the update's
        first dispatch, starts it: a sampling thread starting beside that dispatch holds the GIL from it."""
        if self.policies is None:  # the first step of this process: every group holds theta_{step-1}, the params
            self.policies = [placement.policy(params)[0] for placement in self.placements]
            self.versions = [step - 1] * self.lag
        for batch in range(step, min(step + self.lag, last_step + 1)):  # B_1 .. B_L: nothing sampled ahead yet
            if not self.groups[self._group(batch)].busy:
                self._submit(batch, draw)
        group = self.groups[self._group(step)]
        rollout_bound = not group.finished
        sampled, wait_s = group.take()
        if rollout_bound:
            self.start_next(step, draw, last_step)
        self.next_step = step + 1
        prefetched = sampled.prepared is not None
        rollouts, truncated, scored, host_s = sampled.prepared or self._prepare(sampled)
        return rollouts, truncated, scored, {
            "rollout_time_s": sampled.rollout_s, "rollout_wait_time_s": wait_s,
            "reward_time_s": 0.0 if prefetched else host_s, "prefetch_time_s": host_s if prefetched else 0.0,
            "staleness": float(step - 1 - sampled.policy_version)}

    def start_next(self, step: int, draw: Callable[[], tuple], last_step: int) -> None:
        """B_{step+L} to the group B_step freed, unless past the last step or started already. The trainer calls it
        every step, once the update's first program is dispatched; a take that finds it not started starts it (the
        draws keep their order, but the group then samples with the weights it holds by then: staleness L - 1)."""
        batch = step + self.lag
        if batch <= last_step and not self.groups[self._group(batch)].busy:
            self._submit(batch, draw)

    def during_update(self, step: int, params: Any, last_step: int, started: float) -> Future:
        """The host's part while update `step` computes on the devices (`params`, its new weights, dispatched at
        `started`; B_{step+L} started at its first program's dispatch: `start_next`): B_{step+1} is decoded and
        scored if it lands before the update ends. Returns the update's seconds from dispatch to ready (`watch`)."""
        updated = self.watch(params, started)
        self.prefetch(step + 1, last_step, updated)
        return updated

    def watch(self, tree: Any, started: float) -> Future:
        """The seconds from `started` until the arrays of `tree` are ready (the update's, timed beside the host's
        other work), on a thread of its own."""
        return self._update_timer.submit(_seconds_until_ready, tree, started)

    def prefetch(self, step: int, last_step: int, until: Future | None = None) -> None:
        """The host's work on B_step (it stays in flight, for a checkpoint) as soon as it is sampled, unless `until`
        (the update's `watch`) is done first: the host has no time to spare then."""
        group = self.groups[self._group(step)]
        if step > last_step or not group.busy:
            return
        if until is not None:
            group.wait(until)
        if group.finished:
            sampled = group.in_flight()
            sampled.prepared = sampled.prepared or self._prepare(sampled)

    def _prepare(self, sampled: Sampled) -> tuple[Any, int, Any, float]:
        """(Rollouts, truncated prompts, their score, the seconds of decoding and scoring) of a finished batch."""
        from framework.backends.maxtext.trainers.rollout import assemble

        started = time.perf_counter()
        out, refs, truncated = sampled.result
        rollouts = assemble(out, self.encoder, self.samplers[0].eos_token_ids, refs)
        scored = self.score(rollouts)
        return rollouts, truncated, scored, time.perf_counter() - started

    def after_update(self, step: int, params: Any, last_step: int) -> dict[str, float]:
        """Start moving theta_step to group step mod L, which samples B_{step+L+1} (no move when that batch is past
        the last step: a resume rebuilds every group's weights from the checkpoint's). Returns the seconds of the
        move started by the previous call, which ran beside this update (done by now: it waits only if not)."""
        move, self._move = self._move, None
        reshard_s = move.result() if move is not None else 0.0
        if step + self.lag < last_step:
            group = step % self.lag
            started = time.perf_counter()
            self.policies[group] = self.placements[group].move(params)
            self.versions[group] = step
            self._move = self._move_timer.submit(_seconds_until_ready, self.policies[group], started)
        return {"reshard_time_s": reshard_s}

    def settle(self) -> None:
        """Wait until the batches in flight are sampled (they stay in flight): evaluation then decodes alone on the
        rollout devices, without a second KV cache and weight copy beside the sampling's."""
        for group in self.groups:
            group.in_flight()

    def _in_flight(self) -> list[Sampled]:
        """The finished batches in flight, oldest first (B_{next_step}, B_{next_step+1}, ...)."""
        batches = [self.groups[self._group(self.next_step + i)].in_flight() for i in range(self.lag)]
        return [sampled for sampled in batches if sampled is not None]

    def checkpoint_part(self) -> tuple[dict, dict]:
        """(arrays, state) of the batches in flight, finished first: a resume takes them instead of re-sampling
        them with older weights, which the checkpoint does not hold. The first is under IN_FLIGHT (a lag-1
        checkpoint's format), the i-th after it under in_flight_{i+1}, and the lag under LAG_KEY when >= 2."""
        arrays, state = {}, {}
        for index, sampled in enumerate(self._in_flight()):
            out, refs, truncated = sampled.result
            key = slot_key(index)
            arrays[key] = {field.name: getattr(out, field.name) for field in dataclasses.fields(out)
                           if getattr(out, field.name) is not None}
            state[key] = {"references": refs, "truncated": truncated, "policy_version": sampled.policy_version,
                          "rollout_s": sampled.rollout_s}
        if state and self.lag > 1:
            state[LAG_KEY] = self.lag
        return arrays, state

    def restore(self, checkpoint: Any, state_file: str) -> None:
        """The checkpoint's batches in flight back in flight, each in its group (none in flight: nothing); one that
        its data iterator drew but it lacks is a CheckpointError (in_flight_slots)."""
        from safetensors.numpy import load_file

        refuse_lag_change(checkpoint, self.lag)
        slots = in_flight_slots(checkpoint, self.lag)
        for slot in slots:
            if not {"references", "truncated", "policy_version", "rollout_s"} <= set(checkpoint.state[slot]):
                raise CheckpointError(f"{checkpoint.path}: the batch in flight is incomplete "
                                      f"({sorted(checkpoint.state[slot])})")
        stored = load_file(str(checkpoint.file(state_file))) if slots else {}
        for index, slot in enumerate(slots):
            self.groups[self._group(checkpoint.step + 1 + index)].put_back(
                restored_batch(checkpoint.path, checkpoint.state[slot], stored, slot))
        self.next_step = checkpoint.step + 1

    def close(self) -> None:
        move, self._move = self._move, None
        try:
            for group in self.groups:
                group.close()
            if move is not None:  # a move that failed says so here, once
                move.result()
        finally:
            self._move_timer.shutdown(wait=True)
            self._update_timer.shutdown(wait=True)


def _seconds_until_ready(tree: Any, started: float) -> float:
    import jax

    jax.block_until_ready(tree)
    return time.perf_counter() - started
