"""BaseTrainer: what a backend implements for one task. The runtime owns the lifecycle.

A trainer never applies patches itself and never writes the run records: it gets a RunContext
(run dir, logger, progress bars, seed) and returns a TrainingResult from run_train().
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from framework.core.context import RunContext
from framework.core.result import TrainingResult


class BaseTrainer(ABC):
    # True: the trainer checks self.run.stop_requested at step boundaries (checkpoint, then return a
    # TrainingResult with status "interrupted"); False: a SIGINT/SIGTERM stops it at once.
    handles_stop_requests = False

    def __init__(self, config: Any, run: RunContext):
        self.config = config  # the backend-native config from adapter.convert_config()
        self.run = run

    def setup(self) -> None:
        """Cheap checks and resource discovery (devices, data files). Heavy imports go here or later."""

    def init(self) -> None:
        """Build models, optimizers, data pipelines; restore a checkpoint when resuming."""

    @abstractmethod
    def run_train(self) -> TrainingResult:
        """Do the work and return the result. Log per-step metrics through self.run.logger."""

    def cleanup(self) -> None:
        """Release resources; called by the runtime also when an earlier step raised."""
