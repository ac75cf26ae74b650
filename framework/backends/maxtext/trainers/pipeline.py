"""One step off-policy GRPO (`grpo.rollout_lag: 1`, `parallel.rollout.placement: separate`): the rollout and
the update on disjoint device sets, at the same time, one step apart.

Exactly: theta_k are the weights after k updates. Batch B_1 is sampled by theta_0 before step 1 (nothing to
overlap with). During step t the update devices turn theta_{t-1} into theta_t on B_t while the rollout
devices already sample B_{t+1} with the weights they hold, theta_{t-1}; then theta_t is moved to the rollout
devices (RolloutPlacement, the update's layout -> the rollout's mesh). So B_t, t >= 2, was sampled by
theta_{t-2} and trains theta_{t-1}: a staleness of one policy version (0 for B_1), as in verl's
one_step_off_policy recipe. The PPO ratio is taken against the behaviour policy: the sampler returns the
log-prob of each sampled token under softmax(logits / temperature) (`Sampler(behaviour_log_probs=True)`),
and the update uses them as old_log_probs. A step then takes about max(rollout, update) + the weight move.

The sampling runs in one background thread: JAX releases the GIL while the rollout devices compute, and the
main thread dispatches the update to the other devices meanwhile. The order in which data and RNG keys are
drawn does not depend on timing, so a run is deterministic and a checkpoint holds the finished in-flight
batch (`RolloutAhead.in_flight`): a resume continues bit for bit.
"""

from __future__ import annotations

import dataclasses
import time
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, Callable

from framework.core.errors import CheckpointError, ConfigError

IN_FLIGHT = "in_flight"  # the checkpoint's arrays and state of the batch in flight


@dataclasses.dataclass
class Sampled:
    """A finished rollout: what `sample` returned, the policy version that sampled it and its seconds."""

    result: Any
    policy_version: int
    rollout_s: float


class RolloutAhead:
    """`submit(policy, version, *args)` starts `sample(policy, *args)` on the rollout devices in a background
    thread; `take()` waits for it and says how long the caller waited. At most one batch is in flight."""

    def __init__(self, sample: Callable[..., Any]):
        self._sample = sample
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="rollout")
        self._pending: Future | None = None

    def submit(self, policy: Any, version: int, *args: Any) -> None:
        if self._pending is not None:
            raise RuntimeError("rollout pipeline: a batch is already in flight; take() it first")
        self._pending = self._pool.submit(self._timed, policy, version, args)

    def _timed(self, policy: Any, version: int, args: tuple) -> Sampled:
        started = time.perf_counter()
        result = self._sample(policy, *args)
        return Sampled(result, version, time.perf_counter() - started)

    @property
    def busy(self) -> bool:
        """A batch is in flight (finished or not)."""
        return self._pending is not None

    def put_back(self, sampled: Sampled) -> None:
        """A batch restored from a checkpoint becomes the one in flight."""
        future: Future = Future()
        future.set_result(sampled)
        self._pending = future

    def take(self) -> tuple[Sampled, float]:
        """The in-flight batch (waiting for it) and the seconds waited."""
        if self._pending is None:
            raise RuntimeError("rollout pipeline: no batch in flight")
        started = time.perf_counter()
        sampled = self._pending.result()  # re-raises the sampling's exception here
        self._pending = None
        return sampled, time.perf_counter() - started

    def in_flight(self) -> Sampled | None:
        """The batch in flight, finished (for a checkpoint); it stays in flight."""
        if self._pending is None:
            return None
        sampled = self._pending.result()
        self.put_back(sampled)
        return sampled

    def close(self) -> None:
        if self._pending is not None:
            self._pending.exception()  # let the thread finish before the pool goes
        self._pool.shutdown(wait=True)


def check_off_policy(rollout_lag: int, rollout: Any) -> None:
    """grpo.rollout_lag and parallel.rollout.placement go together: lag 1 needs devices of its own to overlap
    on, and separate devices only pay when the phases overlap."""
    if rollout is None:
        if rollout_lag == 1:
            raise ConfigError("grpo.rollout_lag: 1 needs parallel.rollout.placement=separate (parallel.rollout is "
                              "null): the rollout overlaps the update on devices of its own; or use rollout_lag=0")
        return
    if rollout.placement not in ("shared", "separate"):
        raise ConfigError(f"parallel.rollout.placement: '{rollout.placement}' is not valid; use shared or separate")
    if rollout_lag == 1 and rollout.placement != "separate":
        raise ConfigError("grpo.rollout_lag: 1 needs parallel.rollout.placement=separate (parallel.rollout.devices: "
                          "auto, the default, or N): the rollout overlaps the update on devices of its own; or use "
                          "rollout_lag=0")
    if rollout_lag == 0 and rollout.placement == "separate":
        raise ConfigError("parallel.rollout.placement: separate needs grpo.rollout_lag=1 (decoding on devices the "
                          "update leaves idle pays only when the phases overlap); or use placement=shared")


def refuse_lag_change(checkpoint: Any) -> None:
    """A rollout_lag=1 checkpoint holds the batch sampled ahead; its data order and RNG are already past it, so
    resuming it on-policy would skip that batch."""
    if IN_FLIGHT in checkpoint.state:
        raise ConfigError(f"grpo.rollout_lag: 0, but {checkpoint.path} was written by a rollout_lag=1 run with a "
                          f"batch sampled ahead; resume it with grpo.rollout_lag=1 (and its parallel.rollout)")


def split_devices(devices: list, rollout: Any) -> tuple[list, list]:
    """(rollout devices, update devices): with placement separate the first parallel.rollout.devices decode and
    the rest train; shared: all of them do both."""
    count = rollout.check_placement(len(devices)) if rollout is not None else 0
    if not count:
        return list(devices), list(devices)
    return list(devices[:count]), list(devices[count:])


class OffPolicyRollouts:
    """The trainer's side of grpo.rollout_lag=1 (the module doc): `take(step, ...)` gives the batch step
    `step` trains on and starts sampling the next; `after_update` moves the new weights to the rollout
    devices. Prompts are encoded and completions decoded on the calling thread (the tokenizer is not
    shared with the sampling thread)."""

    def __init__(self, sampler: Any, encoder: Any, placement: Any, sampling: Any):
        self.sampler, self.encoder, self.placement, self.sampling = sampler, encoder, placement, sampling
        self.ahead = RolloutAhead(self._sample)
        self.policy = None  # the weights on the rollout devices: theta_{step-1} during `step`

    def _sample(self, policy: Any, prompts: list, rng: Any, references: list[str], truncated: int) -> tuple:
        from framework.backends.maxtext.trainers.rollout import to_host

        return to_host(self.sampler.generate(policy, prompts, rng, self.sampling)), references, truncated

    def _submit(self, version: int, draw: Callable[[], tuple]) -> None:
        from framework.backends.maxtext.trainers.rollout import references

        examples, rng = draw()  # data and key in the calling thread's order: deterministic
        prompts, truncated = self.encoder.encode(examples)
        self.ahead.submit(self.policy, version, prompts, rng, references(examples, self.sampling.num_samples),
                          truncated)

    def take(self, step: int, params: Any, draw: Callable[[], tuple], last_step: int) -> tuple[Any, int, dict]:
        """(Rollouts of B_step, truncated prompts, timing rows); B_{step+1} starts sampling unless step is the last."""
        from framework.backends.maxtext.trainers.rollout import assemble

        if self.policy is None:  # the first step of this process: theta_{step-1} is the update's params
            self.policy, _ = self.placement.policy(params)
        if not self.ahead.busy:  # B_1: nothing sampled ahead yet
            self._submit(step - 1, draw)
        sampled, wait_s = self.ahead.take()
        if step < last_step:
            self._submit(step - 1, draw)
        out, refs, truncated = sampled.result
        rollouts = assemble(out, self.encoder, self.sampler.eos_token_ids, refs)
        return rollouts, truncated, {"rollout_time_s": sampled.rollout_s, "rollout_wait_time_s": wait_s,
                                     "staleness": float(step - 1 - sampled.policy_version)}

    def after_update(self, step: int, params: Any, last_step: int) -> dict[str, float]:
        """theta_step to the rollout devices for B_{step+2} (none after the last step)."""
        if step == last_step:
            return {"reshard_time_s": 0.0}
        self.policy, reshard_s = self.placement.policy(params)
        return {"reshard_time_s": reshard_s}

    def settle(self) -> None:
        """Wait until the batch in flight is sampled (it stays in flight): evaluation then decodes alone on the
        rollout devices, without a second KV cache and weight copy beside the sampling's."""
        self.ahead.in_flight()

    def checkpoint_part(self) -> tuple[dict, dict]:
        """(arrays, state) of the batch in flight, finished first: a resume takes it instead of re-sampling
        it with theta_{step-1}, which the checkpoint does not hold."""
        sampled = self.ahead.in_flight()
        if sampled is None:
            return {}, {}
        out, refs, truncated = sampled.result
        arrays = {field.name: getattr(out, field.name) for field in dataclasses.fields(out)
                  if getattr(out, field.name) is not None}
        return {IN_FLIGHT: arrays}, {IN_FLIGHT: {"references": refs, "truncated": truncated,
                                                 "policy_version": sampled.policy_version,
                                                 "rollout_s": sampled.rollout_s}}

    def restore(self, checkpoint: Any, state_file: str) -> None:
        """The checkpoint's batch in flight back in flight (a checkpoint without one: nothing)."""
        import numpy as np
        from safetensors.numpy import load_file

        from framework.backends.maxtext.sampler import SampleOutput

        state = checkpoint.state.get(IN_FLIGHT)
        if state is None:
            return
        if not {"references", "truncated", "policy_version", "rollout_s"} <= set(state):
            raise CheckpointError(f"{checkpoint.path}: the batch in flight is incomplete ({sorted(state)})")
        prefix = IN_FLIGHT + "/"
        arrays = {name[len(prefix):]: value for name, value in load_file(str(checkpoint.file(state_file))).items()
                  if name.startswith(prefix)}
        names = {field.name for field in dataclasses.fields(SampleOutput)}
        if not arrays or not set(arrays) <= names:
            raise CheckpointError(f"{checkpoint.path}: the batch in flight is incomplete ({sorted(arrays)})")
        out = SampleOutput(**{name: np.asarray(value) for name, value in arrays.items()})
        self.ahead.put_back(Sampled((out, state["references"], state["truncated"]), state["policy_version"],
                                    state["rollout_s"]))

    def close(self) -> None:
        self.ahead.close()
