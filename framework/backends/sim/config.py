"""What the sim trainers take: the backend-neutral task (framework/tasks/sim.py, calibrate.py) plus the
model, hardware and parallel layout it is about."""

from __future__ import annotations

from dataclasses import dataclass

from framework.core.parallel import ParallelConfig
from framework.tasks.calibrate import CalibrateTask
from framework.tasks.sim import SimTask


@dataclass
class SimJob:
    task: SimTask
    model_name: str
    hf_config: dict
    hardware: dict
    parallel: ParallelConfig  # the run's `parallel` node, unresolved (-1 kept)


@dataclass
class CalibrateJob:
    task: CalibrateTask
    model_name: str
    hf_config: dict
    hardware: dict
