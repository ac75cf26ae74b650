"""Seconds JAX spends compiling (tracing, lowering to MLIR, XLA's compile) in one thread, from jax.monitoring's
duration events: the wait a user feels before a step, logged as `compile_time_s`. Compiles in other threads
(trainers/aot.py's background compiles) are not counted: a step that waits for them logs `aot_wait_s`."""

from __future__ import annotations

import collections
import threading

import jax

_EVENTS = ("/jax/core/compile/jaxpr_trace_duration", "/jax/core/compile/jaxpr_to_mlir_module_duration",
           "/jax/core/compile/backend_compile_duration")
_lock = threading.Lock()
_totals: dict[int, float] = collections.defaultdict(float)  # thread ident -> compile seconds
_listening = [False]


def _record(event: str, duration: float, **_: object) -> None:
    if event in _EVENTS:
        with _lock:
            _totals[threading.get_ident()] += duration


class CompileClock:
    """`take()` -> compile seconds in the creating thread since the previous take (or since the clock was made)."""

    def __init__(self) -> None:
        self._thread = threading.get_ident()
        with _lock:
            if not _listening[0]:  # one process-wide listener, however many clocks
                jax.monitoring.register_event_duration_secs_listener(_record)
                _listening[0] = True
            self._seen = _totals[self._thread]

    def take(self) -> float:
        with _lock:
            total = _totals[self._thread]
            seconds, self._seen = total - self._seen, total
        return seconds
