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

ROLLOUT_LAGS = (0, 1)
PLACEMENTS = ("shared", "separate")


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


def split_devices(devices: list, rollout_devices: int, key: str = "parallel.rollout.devices") -> tuple[list, list]:
    """(rollout devices, update devices): the first `rollout_devices` decode, the rest train."""
    from framework.core.errors import ConfigError

    if not 1 <= rollout_devices < len(devices):
        raise ConfigError(f"{key}: {rollout_devices} is not valid with {len(devices)} devices; use 1 .. "
                          f"{len(devices) - 1} (the rest train)")
    return list(devices[:rollout_devices]), list(devices[rollout_devices:])


def ratio_metrics(metrics: dict[str, float], staleness: int, wait_s: float, rollout_s: float) -> dict[str, float]:
    """The off-policy step's own rows: the batch's staleness (policy versions between the sampler and the
    weights it trains), how long the update waited for it and how long its sampling took."""
    return {"staleness": float(staleness), "rollout_wait_s": wait_s, "rollout_time_s": rollout_s,
            "ratio_abs_deviation": metrics.get("ratio_abs_deviation", 0.0)}
