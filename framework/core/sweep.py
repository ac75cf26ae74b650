"""Sweep summaries: after a multirun, one row per job in sweep_summary.csv and sweep_summary.md.

Registered as a Hydra callback in conf/config.yaml. It reads each job's summary.json from the sweep
directory, so it works the same for the basic launcher, submitit_local and submitit_slurm. A job
that failed is a row with status "failed"; after every job has run and the summary is written,
run.py exits non-zero (Hydra swallows exceptions raised by callbacks, so the callback records the
failure in FAILED_SWEEPS for framework.cli to report).
"""

from __future__ import annotations

import csv
import logging
from pathlib import Path
from typing import Any

import yaml
from hydra.experimental.callback import Callback
from omegaconf import DictConfig

from framework.core.records import read_summary

log = logging.getLogger(__name__)
FAILED_SWEEPS: list[str] = []  # one message per sweep of this process that had failed jobs
UNDER_WAY: list = []  # (callback, config) of the sweep this process runs: an interrupt writes its table


def _job_dirs(sweep_dir: Path) -> list[Path]:
    dirs = [p.parent.parent for p in sweep_dir.glob("*/.hydra/overrides.yaml")]
    return sorted(dirs, key=lambda p: (len(p.name), p.name))


def _override_dict(job_dir: Path) -> dict[str, str]:
    overrides = yaml.safe_load((job_dir / ".hydra" / "overrides.yaml").read_text(encoding="utf-8")) or []
    return dict(str(o).split("=", 1) for o in overrides if "=" in str(o))


def _stamp(path: Path) -> int | None:
    return path.stat().st_mtime_ns if path.exists() else None


def snapshot(sweep_dir: Path) -> dict[Path, tuple[int | None, int | None]]:
    """Each existing job dir's (overrides.yaml, summary.json) modification times, taken before a sweep starts."""
    return {d: (_stamp(d / ".hydra" / "overrides.yaml"), _stamp(d / "summary.json")) for d in _job_dirs(sweep_dir)}


def collect_rows(sweep_dir: Path, key_metrics: list[str], before: dict | None = None) -> list[dict[str, Any]]:
    """One row per job of this sweep. `before` (snapshot() at the sweep's start): job dirs an earlier sweep left
    that this one did not run are left out, and a summary.json this sweep did not write counts as none."""
    before = before or {}
    rows = []
    for job_dir in _job_dirs(sweep_dir):
        old_overrides, old_summary = before.get(job_dir, (None, None))
        if old_overrides is not None and _stamp(job_dir / ".hydra" / "overrides.yaml") == old_overrides:
            continue  # a stale job dir of an earlier sweep
        stale_summary = old_summary is not None and _stamp(job_dir / "summary.json") == old_summary
        summary = None if stale_summary else read_summary(job_dir)
        row: dict[str, Any] = {"job": job_dir.name, **_override_dict(job_dir)}
        if summary is None:
            row.update(status="failed", error="no summary.json (the job died before finishing)")
        else:
            row["status"] = summary["status"]
            metrics = summary.get("metrics") or {}
            row.update({m: metrics.get(m) for m in key_metrics})
            row["error"] = summary["result"].get("error") or metrics.get("reason") or ""
        rows.append(row)
    return rows


def varied_keys(rows: list[dict], sweep_dir: Path) -> list[str]:
    """The override keys (config keys like parallel.tp) whose values differ between the sweep's jobs."""
    keys: list[str] = []
    jobs = {str(row["job"]) for row in rows}
    for job_dir in (d for d in _job_dirs(sweep_dir) if d.name in jobs):
        keys += [k for k in _override_dict(job_dir) if k not in keys]
    return [k for k in keys if len({str(row.get(k)) for row in rows}) > 1]


def _columns(rows: list[dict]) -> list[str]:
    columns: list[str] = []
    for row in rows:
        columns += [k for k in row if k not in columns]
    return [c for c in columns if c != "error"] + ["error"]


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value).replace("|", "/")


def write_tables(rows: list[dict], sweep_dir: Path) -> tuple[Path, Path]:
    columns = _columns(rows)
    csv_path, md_path = sweep_dir / "sweep_summary.csv", sweep_dir / "sweep_summary.md"
    with csv_path.open("w", newline="", encoding="utf-8") as f:
        writer = csv.DictWriter(f, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(_cell(row.get(c)) for c in columns) + " |" for row in rows]
    md_path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return csv_path, md_path


class SweepSummaryCallback(Callback):
    def __init__(self) -> None:
        self.before: dict = {}

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        """A sweep into a dir that holds an earlier sweep's jobs: only this sweep's jobs make rows. The launcher's
        settings are checked first: submitit's failures on them are no one-line errors."""
        from omegaconf.errors import InterpolationKeyError, InterpolationToMissingValueError

        from framework.core.errors import ConfigError
        from framework.core.failure import fail
        from framework.core.launcher import check_launcher, check_sweeper, settings
        from framework.core.schema import check_task_node
        from framework.core.validation import import_target

        try:
            sweep_dir = Path(config.hydra.sweep.dir)  # first: `~model.name` or `model.name=???` leaves it unresolved
            if (sweep_dir / "config.yaml").is_file():  # a run's dir: its records and the sweep's tables would mix
                raise ConfigError(f"hydra.sweep.dir: {sweep_dir} holds a run's records (config.yaml), not a sweep's; "
                                  f"valid: a new folder, or a sweep dir (multirun.yaml)")
            check_launcher(settings(config.hydra.launcher, "hydra.launcher"))
            check_sweeper(settings(config.hydra.sweeper, "hydra.sweeper"))
            check_task_node(config.task)  # key_metrics and sweep_plot are read as the sweep ends: a warning there
            if config.task.get("sweep_plot"):
                import_target(config.task.sweep_plot, "task", "sweep_plot")
        # Hydra turns a callback's exception into a warning: exit here, before any job (a missing key or value never
        # resolves later)
        except (ConfigError, InterpolationKeyError, InterpolationToMissingValueError) as exc:
            fail(exc)
        self.before = snapshot(sweep_dir) if sweep_dir.is_dir() else {}
        UNDER_WAY[:] = [(self, config)]

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        UNDER_WAY.clear()
        self.summarise(config, plot=True)

    def summarise(self, config: DictConfig, plot: bool) -> Path | None:
        """The sweep's tables (and plot) of the jobs this sweep ran; the markdown table's path (None: no sweep dir)."""
        sweep_dir = Path(config.hydra.sweep.dir)
        if not sweep_dir.is_dir():
            return None
        key_metrics = list(config.task.get("key_metrics") or [])
        rows = collect_rows(sweep_dir, key_metrics, self.before)
        if not rows and not plot:  # interrupted before any job made its folder: no table of nothing
            return None
        csv_path, md_path = write_tables(rows, sweep_dir)
        plot = plot and config.task.get("sweep_plot")
        if plot:
            from hydra.utils import get_method

            get_method(plot)(rows, sweep_dir / "sweep_plot.png", varied_keys(rows, sweep_dir))
        log.info("sweep summary: %s", md_path)
        failed = [r["job"] for r in rows if r["status"] in ("failed", "interrupted")]
        if failed:
            message = f"{len(failed)} of {len(rows)} jobs failed (jobs {', '.join(failed)}); see {md_path}"
            log.error(message)
            FAILED_SWEEPS.append(message)
        return md_path


def summarise_interrupted() -> Path | None:
    """A sweep stopped by SIGINT/SIGTERM (Hydra never calls on_multirun_end then): the table of the jobs it ran, the
    interrupted one a row `interrupted`, and its path; None where no sweep is under way or no table could be written."""
    if not UNDER_WAY:
        return None
    callback, config = UNDER_WAY.pop()
    try:
        return callback.summarise(config, plot=False)
    except Exception as exc:  # the interrupt's own line comes next: a table that cannot be written is a log line
        log.warning("sweep summary of the interrupted sweep not written: %s", exc)
        return None


def objective_value(objective: Any, result: Any) -> Any:
    """What run.py returns for a job: with the task's `objective` set ({metric, direction}), that metric of
    the run as a float, which a sweeper that optimises (hydra-optuna-sweeper) reads; a job whose input the
    task reports as invalid (a layout that cannot run) or that does not fit in memory scores the worst
    value (-inf when maximising, inf when minimising); a failed job returns None (the sweeper's failure).
    Without an objective: the run's metrics."""
    if not objective:
        return result.metrics
    from framework.core.errors import ConfigError

    direction, metric = objective.get("direction"), objective.get("metric")
    if direction not in ("minimize", "maximize"):
        raise ConfigError(f"task.objective.direction: {direction!r}; valid: minimize, maximize")
    if result.status == "invalid" or (result.success and result.metrics.get("fits") is False):
        return float("-inf") if direction == "maximize" else float("inf")
    if not result.success:
        return None
    def number(value) -> bool:  # `fits` (true/false) is no number to optimise: the valid list never named it
        return isinstance(value, (int, float)) and not isinstance(value, bool)

    if not number(result.metrics.get(metric)):
        numbers = sorted(k for k, v in result.metrics.items() if number(v))
        raise ConfigError(f"task.objective.metric: {metric!r} is not a number the task reports; valid: {', '.join(numbers)}")
    return float(result.metrics[metric])
