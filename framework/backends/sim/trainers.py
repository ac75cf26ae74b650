"""Trainers of the simulator backend. `run_train` means: evaluate the configuration (sim), or
measure this machine's kernels and write an efficiency table (calibrate)."""

from __future__ import annotations

import datetime
import json
import shutil
import time
from pathlib import Path

from framework.backends.sim.config import CalibrateJob, SimJob
from framework.core.dtypes import SHORT
from framework.core.errors import ConfigError
from framework.core.paths import REPO_ROOT
from framework.core.result import TrainingResult
from framework.core.trainer import BaseTrainer
from framework.tasks.calibrate import check_calibrate_values

INSTALLED_TABLES = REPO_ROOT / "sims" / "calibration" / "tables"


class SimTrainer(BaseTrainer):
    config: SimJob

    def run_train(self) -> TrainingResult:
        from sims.report import write_breakdown

        job = self.config
        start = time.perf_counter()
        summary, rows = simulate_job(job)
        self.run.logger.log(summary, step=0)
        artifacts = {}
        if summary["status"] == "ok":
            csv_path, md_path = self.run.path("op_breakdown.csv"), self.run.path("op_breakdown.md")
            write_breakdown(rows, csv_path, md_path)
            artifacts = {"op_breakdown_csv": str(csv_path), "op_breakdown_md": str(md_path)}
        return TrainingResult(
            success=True, metrics=summary, wall_time_s=time.perf_counter() - start, samples=1,
            artifacts=artifacts, status=summary["status"], error=summary.get("reason") or None,
            warnings=[w for w in summary.get("warning", "").split("; ") if w],
        )


def simulate_job(job: SimJob) -> tuple[dict, list[dict]]:
    """The simulator's summary and per-op rows for the job's layout; a layout that cannot split the hardware's devices
    is an `invalid` summary (a row of a sweep), like one that cannot run the model."""
    from sims.api import simulate
    from sims.workload import layout_from_parallel, parse_workload, positions_problem

    devices = job.hardware["devices_per_node"] * job.hardware["nodes"]
    try:
        layout, zero = layout_from_parallel(job.parallel.as_dict(), devices)  # no rollout phase here
    except ConfigError as exc:
        return {"status": "invalid", "reason": str(exc), "fits": None}, []
    workload = job.task.workload(layout["dp"], zero)
    # errors and reasons name the sim.* keys typed (the simulator's: workload.*, and the whole batch)
    parsed = parse_workload(workload, node="sim")
    problem = positions_problem(parsed, job.hf_config.get("max_position_embeddings"), node="sim")
    if problem or (problem := job.task.batch_problem()):
        return {"status": "invalid", "reason": problem, "fits": None}, []
    result = simulate(job.hf_config, job.hardware, layout, workload, stack=job.task.stack)
    return {**result.summary(), **{f"layout_{axis}": size for axis, size in layout.items()}}, result.breakdown_rows()


class CalibrateTrainer(BaseTrainer):
    """Times the selected model's kernels on this machine (sims.calibration.microbench) and fits
    the efficiency table a hardware file's `efficiency_table` can point to."""

    config: CalibrateJob

    def setup(self) -> None:
        from sims.calibration.microbench import BENCHMARKS

        check_calibrate_values(self.config.task, tuple(BENCHMARKS))
        self.device = self._device()

    def _device(self) -> str:
        import torch

        asked = self.config.task.device
        wanted = asked if asked != "auto" else "cuda" if self.config.hardware["accelerator"] == "gpu" else "cpu"
        if wanted == "cuda" and not torch.cuda.is_available():  # bad input (exit 2), as a GPU file elsewhere is
            if asked == "cuda":
                raise ConfigError("calibrate.device: cuda, and this machine has no CUDA device; valid: cpu, or auto "
                                  "(cuda for a gpu hardware file, else cpu)")
            raise ConfigError(f"calibrate on hardware={self.config.hardware['name']} needs a CUDA device and this "
                              f"machine has none; run it on that machine, or use hardware=cpu to calibrate this CPU")
        return wanted

    def run_train(self) -> TrainingResult:
        from sims.calibration.fit import fit_table
        from sims.calibration.microbench import Plan, measure
        from sims.calibration.table import save_table

        job, task = self.config, self.config.task
        start = time.perf_counter()
        workloads = [{"mode": "prefill", "batch": b, "seq_len": s} for b, s in task.prefill]
        workloads += [{"mode": "decode", "batch": b, "context_len": c} for b, c in task.decode]
        plan = Plan(tuple(workloads), tuple(task.benchmarks), SHORT[task.dtype], task.warmup, task.repeats,
                    task.cuda_graphs, task.copy_mb, stack=task.stack)

        def progress(items, total, desc):
            return self.run.progress(items, total=total, desc=desc, unit="kernel")

        def log(index: int, record: dict) -> None:
            fields = ("benchmark", "op_class", "mode", "batch", "tokens", "time_us", "timing")
            self.run.logger.log({k: record[k] for k in fields if k in record}, step=index)

        measurements = measure(job.hf_config, job.hardware, plan, self.device, progress, log)
        measurements_path = self.run.path("measurements.json")
        measurements_path.write_text(json.dumps(measurements, indent=1))
        source = (f"task=calibrate model={job.model_name} on {self._device_name()} ({task.dtype}, "
                  f"{'CUDA graphs' if task.cuda_graphs and self.device == 'cuda' else 'eager'}), "
                  f"{datetime.date.today().isoformat()}")
        table = fit_table(measurements, job.hardware, source=source, stack=task.stack)
        table_path = Path(task.output) if task.output else self.run.path("efficiency_table.json")
        table_path.parent.mkdir(parents=True, exist_ok=True)
        save_table(table, table_path)
        artifacts = {"efficiency_table": str(table_path), "measurements": str(measurements_path)}
        if task.install:
            suffix = "" if task.stack == "transformers" else f"_{task.stack}"
            installed = INSTALLED_TABLES / f"{job.hardware['name']}{suffix}.json"
            installed.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(table_path, installed)
            artifacts["installed_table"] = str(installed)
        metrics = {**summary_metrics(measurements, job.hardware, self.device), "table": str(table_path)}
        return TrainingResult(success=True, metrics=metrics, wall_time_s=time.perf_counter() - start,
                              samples=len(measurements), artifacts=artifacts)

    def _device_name(self) -> str:
        import platform

        import torch

        return torch.cuda.get_device_name() if self.device == "cuda" else (platform.processor() or "CPU")


def summary_metrics(measurements: list[dict], hardware: dict, device: str) -> dict:
    """Headline numbers of a calibration: what the device reached and how well the table fits."""
    named = {m["benchmark"]: m for m in measurements}
    copy, launch = named.get("copy"), named.get("launch")
    gemms = [m for m in measurements if m.get("op_class") == "gemm" and "m" in m]
    peak = hardware["peak_tflops"].get(measurements[0]["dtype"]) if measurements else None
    best_tflops = max((m["flops"] / m["time_us"] * 1e-6 for m in gemms), default=None)
    return {
        "device": device,
        "measurements": len(measurements),
        "launch_floor_us": launch["time_us"] if launch else None,
        "copy_tb_s": copy["bytes"] / copy["time_us"] * 1e-6 if copy else None,
        "gemm_best_tflops": best_tflops,
        "gemm_best_fraction_of_peak": best_tflops / peak if best_tflops and peak else None,
    }
