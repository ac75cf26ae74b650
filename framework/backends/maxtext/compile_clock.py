"""Seconds JAX spends compiling in this process (tracing, lowering to MLIR, XLA's compile), from
jax.monitoring's duration events: the wait a user feels before the first step, logged as `compile_s`."""

from __future__ import annotations

import threading

import jax

_EVENTS = ("/jax/core/compile/jaxpr_trace_duration", "/jax/core/compile/jaxpr_to_mlir_module_duration",
           "/jax/core/compile/backend_compile_duration")
_lock = threading.Lock()
_total = [0.0]
_listening = [False]


def _record(event: str, duration: float, **_: object) -> None:
    if event in _EVENTS:
        with _lock:
            _total[0] += duration


class CompileClock:
    """`take()` -> compile seconds since the previous take (or since the clock was made)."""

    def __init__(self) -> None:
        with _lock:
            if not _listening[0]:  # one process-wide listener, however many clocks
                jax.monitoring.register_event_duration_secs_listener(_record)
                _listening[0] = True
            self._seen = _total[0]

    def take(self) -> float:
        with _lock:
            seconds, self._seen = _total[0] - self._seen, _total[0]
        return seconds
