"""Time a callable on a torch device: the median over repeats, after warm-up.

CUDA with `graphs=True` (the default for calibration): the calls are captured once into a CUDA
graph (as many calls per graph as fill about `target_ms`, cycling through the argument sets) and
the graph is replayed between CUDA events, so the time is the GPU's alone, without the host's
Python and launch overhead, as a serving engine that replays CUDA graphs sees it. Without graphs,
or when capture fails (an op that synchronises with the host), CUDA events around single eager
calls. CPU: time.perf_counter around single calls, and the fastest of them rather than the
median (on a shared CPU, stalls from other processes and thread wake-ups only ever add time).

Argument sets rotate so that repeated calls do not find their inputs and weights in the L2 cache
when the real model would not (each layer has its own weights); `rotations` says how many sets a
call of a given size needs.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

MAX_CALLS_PER_GRAPH = 64


@dataclass(frozen=True)
class Timing:
    time_us: float  # per call: the median (CUDA) or the fastest (CPU) of the repeats
    spread: float  # (max - min) / median over the repeats
    mode: str  # cuda_graph | cuda_events | cpu


def rotations(bytes_per_call: float, device: str, cache_bytes: float | None = None, limit: int = 32) -> int:
    """Argument sets to cycle through so that their total exceeds twice the last-level cache."""
    if not device.startswith("cuda") or bytes_per_call <= 0:
        return 1
    if cache_bytes is None:
        import torch

        cache_bytes = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", 50 * 2**20)
    return max(1, min(limit, math.ceil(2 * cache_bytes / bytes_per_call)))


def time_call(
    fn: Callable,
    arg_sets: Sequence[tuple],
    device: str,
    warmup: int = 3,
    repeats: int = 10,
    graphs: bool = True,
    target_ms: float = 1.0,
) -> Timing:
    if not device.startswith("cuda"):
        return _cpu(fn, arg_sets, warmup, repeats)
    if graphs:
        try:
            return _cuda_graph(fn, arg_sets, device, warmup, repeats, target_ms)
        except RuntimeError:  # capture refused (a host sync inside fn): time it eagerly instead
            import torch

            torch.cuda.synchronize(device)
    return _cuda_events(fn, arg_sets, device, warmup, repeats)


def _summary(per_call_s: list[float], mode: str) -> Timing:
    typical = min(per_call_s) if mode == "cpu" else statistics.median(per_call_s)
    spread = (max(per_call_s) - min(per_call_s)) / typical if typical > 0 else 0.0
    return Timing(typical * 1e6, spread, mode)


def _cpu(fn: Callable, arg_sets: Sequence[tuple], warmup: int, repeats: int) -> Timing:
    for i in range(warmup):
        fn(*arg_sets[i % len(arg_sets)])
    per_call = []
    for i in range(max(1, repeats)):
        start = time.perf_counter()
        fn(*arg_sets[i % len(arg_sets)])
        per_call.append(time.perf_counter() - start)
    return _summary(per_call, "cpu")


def _cuda_events(fn: Callable, arg_sets: Sequence[tuple], device: str, warmup: int, repeats: int) -> Timing:
    import torch

    for i in range(warmup):
        fn(*arg_sets[i % len(arg_sets)])
    per_call = []
    for i in range(max(1, repeats)):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn(*arg_sets[i % len(arg_sets)])
        end.record()
        end.synchronize()
        per_call.append(start.elapsed_time(end) * 1e-3)
    return _summary(per_call, "cuda_events")


def _cuda_graph(
    fn: Callable, arg_sets: Sequence[tuple], device: str, warmup: int, repeats: int, target_ms: float
) -> Timing:
    import torch

    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):  # warm-up on a side stream, as capture requires
        for i in range(max(1, warmup)):
            fn(*arg_sets[i % len(arg_sets)])
    torch.cuda.current_stream(device).wait_stream(side)
    one_call_s = _cuda_events(fn, arg_sets, device, 0, 1).time_us * 1e-6
    calls = max(len(arg_sets), min(MAX_CALLS_PER_GRAPH, math.ceil(target_ms * 1e-3 / max(one_call_s, 1e-7))))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(calls):
            fn(*arg_sets[i % len(arg_sets)])
    graph.replay()
    per_call = []
    for _ in range(max(1, repeats)):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        per_call.append(start.elapsed_time(end) * 1e-3 / calls)
    del graph
    return _summary(per_call, "cuda_graph")


def cuda_events_seconds(fn: Callable, calls: int) -> float:
    """Seconds per call of `calls` back-to-back calls, between two CUDA events on the current stream."""
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e-3 / calls


def wall_median_s(step: Callable[[], object], warmup: int, repeats: int, sync: Callable[[], object]) -> float:
    """Median wall seconds of `repeats` calls of a whole step (after `warmup`), `sync` (the device's
    synchronize) before and after each: for steps with host work between kernels, not one kernel."""
    times = []
    for index in range(warmup + repeats):
        sync()
        started = time.perf_counter()
        step()
        sync()
        if index >= warmup:
            times.append(time.perf_counter() - started)
    return statistics.median(times)
