"""Measure this machine's kernels and fit an efficiency table (the `calibrate:` node of conf/task/calibrate.yaml)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
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
    check_output(task.output, f"{key}.output")


def check_output(output: Optional[str], key: str) -> None:
    """The table's path, its folder made now: a folder or a place no folder can be made was an OSError (exit 1)
    after every kernel had been timed."""
    if not output:
        return
    valid = "valid: a file path whose folder can be made (null: <run dir>/efficiency_table.json)"
    if Path(output).is_dir():
        raise ConfigError(f"{key}: {output} is a folder; {valid}")
    try:
        Path(output).parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"{key}: cannot make the folder of {output} ({exc.strerror}: {exc.filename}); {valid}"
                          ) from None
