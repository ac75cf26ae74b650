"""Typed views of the sim backend's task nodes (values live in conf/task/sim.yaml and calibrate.yaml)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional

from framework.core.errors import ConfigError

REMAINING_DEVICES = -1  # dp: as many data-parallel replicas as the hardware has room for


@dataclass
class SimTask:
    mode: Literal["prefill", "decode", "train"]
    batch: int
    seq_len: int
    context_len: int
    tp: int
    dp: int
    ep: int
    pp: int
    microbatches: int
    recompute: bool
    dtype: Literal["bf16", "fp8", "fp32"]

    def layout(self, devices: int) -> dict:
        """tp, dp, ep, pp; dp = -1 fills the `devices` left over by tp * pp (at least one replica)."""
        dp = self.dp
        if dp == REMAINING_DEVICES:
            dp = max(1, devices // max(1, self.tp * self.pp))
        elif dp < 1:
            valid = "an integer >= 1, or -1 (the remaining devices)"
            raise ConfigError(f"sim.dp: {self.dp} is not valid; expected {valid}")
        return {"tp": self.tp, "dp": dp, "ep": self.ep, "pp": self.pp}

    def workload(self) -> dict:
        return {"mode": self.mode, "batch": self.batch, "seq_len": self.seq_len, "context_len": self.context_len,
                "microbatches": self.microbatches, "recompute": self.recompute, "dtype": self.dtype}


@dataclass
class SimJob:
    """What the sim trainers take: the task plus the model and hardware it is about."""

    task: SimTask
    model_name: str
    hf_config: dict
    hardware: dict


@dataclass
class CalibrateTask:
    benchmarks: list[str]  # kernel kinds to time: see sims.calibration.microbench.BENCHMARKS
    prefill: list[list[int]]  # [batch, seq_len] workloads whose kernels are timed
    decode: list[list[int]]  # [batch, context_len]
    dtype: Literal["bf16", "fp32"]
    device: Literal["auto", "cuda", "cpu"]  # auto: cuda for a gpu hardware file, else cpu
    warmup: int
    repeats: int
    cuda_graphs: bool  # time CUDA graph replays (GPU time without host overhead)
    copy_mb: int  # size of the memory-bandwidth copy
    output: Optional[str]  # the table's path; null: efficiency_table.json in the run directory
    install: bool  # also copy the table to sims/calibration/tables/<hardware name>.json


@dataclass
class CalibrateJob:
    task: CalibrateTask
    model_name: str
    hf_config: dict
    hardware: dict
