"""Trainers of the simulator backend. `run_train` here means: evaluate the configuration."""

from __future__ import annotations

import time

from framework.backends.sim.config import SimJob
from framework.core.result import TrainingResult
from framework.core.trainer import BaseTrainer


class SimTrainer(BaseTrainer):
    config: SimJob

    def run_train(self) -> TrainingResult:
        from sims.api import simulate
        from sims.report import write_breakdown

        job = self.config
        start = time.perf_counter()
        result = simulate(job.hf_config, job.hardware, job.task.layout(), job.task.workload())
        summary = result.summary()
        self.run.logger.log(summary, step=0)
        artifacts = {}
        if summary["status"] == "ok":
            csv_path, md_path = self.run.path("op_breakdown.csv"), self.run.path("op_breakdown.md")
            write_breakdown(result.breakdown_rows(), csv_path, md_path)
            artifacts = {"op_breakdown_csv": str(csv_path), "op_breakdown_md": str(md_path)}
        return TrainingResult(
            success=True, metrics=summary, wall_time_s=time.perf_counter() - start, samples=1,
            artifacts=artifacts, status=summary["status"], error=summary.get("reason") or None,
        )
