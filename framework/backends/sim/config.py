"""Typed view of the `sim:` config node (values live in conf/task/sim.yaml)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal


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

    def layout(self) -> dict:
        return {"tp": self.tp, "dp": self.dp, "ep": self.ep, "pp": self.pp}

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
