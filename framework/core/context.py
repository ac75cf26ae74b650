"""RunContext: what the runtime hands a trainer: where to write, how to log, how to show progress."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from omegaconf import DictConfig

from framework.core.loggers import MetricLogger


@dataclass
class RunContext:
    run_dir: Path
    cfg: DictConfig  # the whole composed config (resolved)
    logger: MetricLogger
    seed: int
    multirun: bool = False
    rank: int = 0  # this process among world_size (SLURM tasks, torchrun); only rank 0 writes records
    world_size: int = 1

    fingerprint: dict | None = None  # the settings a resumed run must share (see Runtime.fingerprint)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def checkpoints(self, policy):
        """This run's CheckpointStore (framework.core.checkpoint) under the task's policy."""
        from framework.core.checkpoint import CheckpointStore

        return CheckpointStore(self.run_dir, policy, self.fingerprint, enabled=self.is_main)

    def path(self, name: str) -> Path:
        """A path inside the run directory (parents created)."""
        target = self.run_dir / name
        target.parent.mkdir(parents=True, exist_ok=True)
        return target

    def progress(self, iterable: Iterable | None = None, *, total: int | None = None, desc: str = "", unit: str = "it"):
        """A tqdm progress bar on stderr; every long loop of a trainer goes through one."""
        from tqdm.auto import tqdm

        return tqdm(iterable, total=total, desc=desc, unit=unit, dynamic_ncols=True,
                    disable=not self.cfg.get("progress", True), leave=not self.multirun)
