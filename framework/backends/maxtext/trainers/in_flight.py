"""Batches sampled ahead (grpo.rollout_lag >= 1): one batch sampling in a background thread (RolloutAhead) and
how a checkpoint holds the batches in flight: B_{t+1} under `in_flight` (a lag-1 checkpoint's format), B_{t+i}
under `in_flight_<i>`, the lag under `rollout_lag` when >= 2; a resume takes them instead of re-sampling them
with older weights, which the checkpoint does not hold."""

from __future__ import annotations

import dataclasses
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from typing import Any, Callable

from framework.core.errors import CheckpointError, ConfigError

IN_FLIGHT = "in_flight"  # the checkpoint's arrays and state of the (first) batch in flight
LAG_KEY = "rollout_lag"  # in a checkpoint's state when L >= 2 batches were in flight (absent: lag 1)


@dataclasses.dataclass
class Sampled:
    """A finished rollout: what `sample` returned, the policy version that sampled it and its seconds; `prepared`:
    the host's work on it (OffPolicyRollouts._prepare), done once, whenever the host first had time."""

    result: Any
    policy_version: int
    rollout_s: float
    prepared: tuple | None = None


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

    @property
    def finished(self) -> bool:
        """A batch is in flight and sampled: taking it would not wait."""
        return self._pending is not None and self._pending.done()

    def wait(self, other: Future) -> None:
        """Until the batch in flight is sampled or `other` is done, whichever comes first."""
        if self._pending is not None:
            wait([self._pending, other], return_when=FIRST_COMPLETED)

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


def checkpoint_lag(checkpoint: Any) -> int:
    """The rollout_lag of the run that wrote `checkpoint`, 0 when it holds no batch in flight."""
    if IN_FLIGHT not in checkpoint.state:
        return 0
    return int(checkpoint.state.get(LAG_KEY, 1))


def refuse_lag_change(checkpoint: Any, rollout_lag: int = 0) -> None:
    """A checkpoint with batches in flight holds those sampled ahead; its data order and RNG are already past
    them, so resuming it with another lag would skip or reorder batches."""
    written = checkpoint_lag(checkpoint)
    if written and written != rollout_lag:
        raise ConfigError(f"grpo.rollout_lag: {rollout_lag}, but {checkpoint.path} was written by a rollout_lag="
                          f"{written} run with batches sampled ahead; resume it with grpo.rollout_lag={written} (and "
                          f"its parallel.rollout)")


def in_flight_slots(checkpoint: Any, lag: int) -> list[str]:
    """The slots of the batches in flight a checkpoint at step t must hold: one per batch its data iterator drew past
    B_t, oldest first. That is L, or fewer near the writing run's last step (batches past it are never drawn); the
    checkpoint does not record that run's grpo.steps, but its iterator counts what was drawn, so a resume that raises
    grpo.steps is told apart from a missing slot, which would skip that batch's data: a CheckpointError."""
    from framework.data.prompts import batches_drawn

    ahead = batches_drawn(checkpoint.state["data_iterator"]) - checkpoint.step
    if not 0 <= ahead <= lag:
        raise CheckpointError(f"{checkpoint.path}: its data iterator is {ahead} batches past step {checkpoint.step}; a "
                              f"grpo.rollout_lag={lag} checkpoint holds 0 to {lag} batches in flight")
    expected = [slot_key(index) for index in range(ahead)]
    missing = [slot for slot in expected if slot not in checkpoint.state]
    unexpected = [slot_key(index) for index in range(ahead, lag) if slot_key(index) in checkpoint.state]
    if missing or unexpected:
        raise CheckpointError(f"{checkpoint.path}: the batch in flight {(missing or unexpected)[0]} is "
                              f"{'missing' if missing else 'one its data iterator never drew'} (the iterator is "
                              f"{ahead} batches past step {checkpoint.step}: the checkpoint must hold "
                              f"{', '.join(expected) or 'none'})")
    return expected


def slot_key(index: int) -> str:
    """The checkpoint key of the index-th batch in flight (oldest first)."""
    return IN_FLIGHT if index == 0 else f"{IN_FLIGHT}_{index + 1}"


def restored_batch(path: Any, state: dict, stored: dict, key: str) -> Sampled:
    """One batch in flight from its checkpoint state (checked) and arrays (named `key`/<SampleOutput field>)."""
    import numpy as np

    from framework.backends.maxtext.sampler import SampleOutput

    prefix = key + "/"
    arrays = {name[len(prefix):]: value for name, value in stored.items() if name.startswith(prefix)}
    names = {field.name for field in dataclasses.fields(SampleOutput)}
    if not arrays or not set(arrays) <= names:
        raise CheckpointError(f"{path}: the batch in flight is incomplete ({sorted(arrays)})")
    out = SampleOutput(**{name: np.asarray(value) for name, value in arrays.items()})
    return Sampled((out, state["references"], state["truncated"]), state["policy_version"], state["rollout_s"])
