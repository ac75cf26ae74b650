"""Measure this machine's kernels and fit an efficiency table (the `calibrate:` node of conf/task/calibrate.yaml)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

from framework.core.errors import ConfigError
from framework.core.ranges import Count, NonNegativeInt


@dataclass
class CalibrateTask:
    benchmarks: list[str]  # kernel kinds to time: see sims.calibration.microbench.BENCHMARKS
    prefill: list[list[int]]  # [batch, seq_len] workloads whose kernels are timed
    decode: list[list[int]]  # [batch, context_len]
    dtype: Literal["bfloat16", "float32"]  # framework.core.dtypes
    device: Literal["auto", "cuda", "cpu"]  # auto: cuda for a gpu hardware file, else cpu
    warmup: NonNegativeInt
    repeats: Count
    cuda_graphs: bool  # time CUDA graph replays (GPU time without host overhead)
    copy_mb: Count  # size of the memory-bandwidth copy
    output: Optional[str]  # the table's path; null: efficiency_table.json in the run directory
    install: bool  # also copy the table to sims/calibration/tables/<hardware name>[_<stack>].json
    stack: Literal["transformers", "torch_fused"]  # whose kernels are timed (sims/stacks.yaml)


def check_calibrate_values(task: CalibrateTask, benchmarks: tuple[str, ...], key: str = "calibrate") -> None:
    """Names from `benchmarks` (the simulator's list), [batch, length] workloads, positive counts."""
    unknown = sorted(set(task.benchmarks) - set(benchmarks))
    if unknown or not task.benchmarks:
        raise ConfigError(f"{key}.benchmarks: {unknown or 'empty'}; valid: {', '.join(benchmarks)}")
    for name in ("prefill", "decode"):
        for point in getattr(task, name):
            if len(point) != 2 or min(point) < 1:
                raise ConfigError(f"{key}.{name}: {point} is not valid; expected [batch, length] of integers >= 1")
    if not task.prefill and not task.decode:
        raise ConfigError(f"{key}.prefill and {key}.decode are both empty; list at least one workload")
    for name in ("warmup", "repeats", "copy_mb"):
        if getattr(task, name) < (0 if name == "warmup" else 1):
            raise ConfigError(f"{key}.{name}: {getattr(task, name)} is too small")
