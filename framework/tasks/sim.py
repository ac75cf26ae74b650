"""The simulator's task: predict time and memory per device of one step (the `sim:` node of conf/task/sim.yaml).

The parallel layout is not here: the simulator reads the run's top-level `parallel` node, like every
backend, so a sweep over `parallel.tp=1,2,4,8` predicts the layouts the real runs would use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from framework.core.dtypes import SHORT
from framework.core.ranges import Count


@dataclass
class SimTask:
    mode: Literal["prefill", "decode", "train"]
    batch: Count  # sequences per step of each data-parallel replica (dp x fsdp of them)
    seq_len: Count  # prompt length (prefill), sequence length (train)
    context_len: Count  # tokens already in the KV cache (decode; the simulator takes at least 1)
    microbatches: Count  # pipeline micro-batches per replica (train)
    recompute: bool  # activation recompute (train)
    dtype: Literal["bfloat16", "float8", "float32"]  # framework.core.dtypes
    stack: Literal["transformers", "torch_fused", "megatron_local", "xla"]  # the software stack that runs (sims/stacks.yaml)
    shared_prefix: Count = 1  # decode: rows per prompt that hold its seq_len tokens once (sims/shared_prefix.py)

    def workload(self, replicas: int, zero: bool) -> dict:
        """The simulator's workload for `replicas` data-parallel replicas (its batch counts them all)."""
        return {"mode": self.mode, "batch": self.batch * replicas, "seq_len": self.seq_len,
                "context_len": self.context_len, "microbatches": self.microbatches, "recompute": self.recompute,
                "dtype": SHORT[self.dtype], "zero": zero and self.mode == "train",
                "shared_prefix": self.shared_prefix}

    def batch_problem(self) -> str | None:
        """Why a replica's sim.batch rows do not split as the simulator needs (sims.workload.layout_problem's rule on
        the whole batch, sim.batch x replicas, named in this task's keys), or None."""
        for key, why in (("microbatches", "each replica runs its rows as that many micro-batches"),
                         ("shared_prefix", "each replica holds whole groups of rows sharing a prompt")):
            if self.batch % getattr(self, key):
                size = getattr(self, key)
                return f"sim.batch={self.batch} with sim.{key}={size}; valid: a multiple of {size} ({why})"
        return None
