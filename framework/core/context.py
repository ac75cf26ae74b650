"""RunContext: what the runtime hands a trainer: where to write, how to log, which process this is."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Container, Iterable

from omegaconf import DictConfig

from framework.core.checkpoint import Checkpoint
from framework.core.distributed import DistEnv, detect
from framework.core.loggers import MetricLogger
from framework.core.stopping import StopSignals


@dataclass
class RunContext:
    run_dir: Path
    cfg: DictConfig  # the whole composed config (resolved)
    logger: MetricLogger
    seed: int
    multirun: bool = False
    dist: DistEnv = field(default_factory=detect)  # this process among the job's ranks (torchrun, SLURM, submitit)
    fingerprint: dict | None = None  # the settings a resumed run must share (framework.core.resume)
    signals: StopSignals | None = None  # SIGINT/SIGTERM received (framework.core.stopping)
    resume_absent_ok: Container[str] = frozenset()  # keys the resume check accepts on one side only (OneSidedAllowed)
    resume_from: Checkpoint | None = None  # the checkpoint the resume check verified (segments.jsonl names its step)

    @property
    def stop_requested(self) -> bool:
        """A SIGINT/SIGTERM arrived: a trainer with `handles_stop_requests = True` checkpoints at the next step
        boundary and returns TrainingResult(status="interrupted")."""
        return self.signals is not None and self.signals.requested

    @property
    def is_main(self) -> bool:
        """Only the main rank writes records, checkpoints and exports; every rank trains."""
        return self.dist.is_main

    @property
    def rank(self) -> int:
        return self.dist.rank

    @property
    def local_rank(self) -> int:
        """This process's device index on its node."""
        return self.dist.local_rank

    @property
    def world_size(self) -> int:
        return self.dist.world_size

    def checkpoints(self, policy):
        """This run's CheckpointStore (framework.core.checkpoint) under the task's policy."""
        from framework.core.checkpoint import CheckpointStore

        return CheckpointStore(self.run_dir, policy, self.fingerprint, enabled=self.is_main,
                               absent_ok=self.resume_absent_ok, verified=self.resume_from)

    def path(self, name: str) -> Path:
        """A path inside the run directory (parents created)."""
        target = self.run_dir / name
        target.parent.mkdir(parents=True, exist_ok=True)
        return target

    def progress(self, iterable: Iterable | None = None, *, total: int | None = None, desc: str = "", unit: str = "it"):
        """A tqdm progress bar on stderr; every long loop of a trainer goes through one."""
        from tqdm.auto import tqdm

        return tqdm(iterable, total=total, desc=desc, unit=unit, dynamic_ncols=True,
                    disable=not self.cfg.get("progress", True) or not self.is_main, leave=not self.multirun)
