"""The one lifecycle every run goes through (every rank runs it; the main rank writes the records).

    resume check (reads only: a refused resume touches no record)
    -> records: config.yaml, overrides.yaml, segments.jsonl, env.json
    -> validate config -> adapter.load_patches()
    -> patches(prepare) -> adapter.prepare_backend()
    -> adapter.convert_config() -> patches(convert)
    -> trainer = trainer_cls(backend_config, RunContext) -> patches(setup) -> trainer.setup() -> trainer.init()
    -> patches(before_train) -> trainer.run_train() -> patches(after_train)
    -> trainer.cleanup() (also on error) -> patches.json, summary.json

Trainers only implement run_train() (and optionally setup/init/cleanup). The runtime writes the
run directory (framework.core.records) whatever happens after the resume check.
"""

from __future__ import annotations

import logging
import time
import traceback
from collections.abc import Mapping
from pathlib import Path

from hydra.errors import InstantiationException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from framework.core import env_info
from framework.core.adapter import BackendAdapter
from framework.core.context import RunContext
from framework.core.distributed import detect
from framework.core.errors import ConfigError, CrucibleError
from framework.core.failure import fail
from framework.core.loggers import MetricLogger
from framework.core.outcome import print_outcome
from framework.core.patches import PatchContext, PatchRunner, Phase
from framework.core.plain import to_plain
from framework.core.paths import REPO_ROOT
from framework.core.ranges import Seed
from framework.core.records import RunRecords
from framework.core.result import TrainingResult
from framework.core.resume import ResumePoint, check_resumable, check_same_kind, run_fingerprint
from framework.core.rundir import RunLock
from framework.core.stopping import RunInterrupted, StopSignals, disk_full, exit_code, signal_name
from framework.core.schema import (HardwareConfig, LoggerConfig, ModelConfig, check_model_architecture, check_patches,
                                   check_task_node)
from framework.core.validation import (check_backend_runs_task, check_model_dir, check_path_exists, check_schema,
                                       check_targets, check_task_settings, resolve_all, type_error)

log = logging.getLogger(__name__)


def validate(cfg: DictConfig) -> BackendAdapter:
    """All checks that need no heavy library; returns the instantiated adapter."""
    resolve_all(cfg)
    for key, tp in (("seed", Seed), ("debug", bool), ("progress", bool)):
        if (reason := type_error(cfg.get(key), tp)) is not None:
            raise ConfigError(f"{key}: {reason}")
    check_schema(cfg, "model", ModelConfig)
    check_schema(cfg, "hardware", HardwareConfig)
    check_schema(cfg, "logger", LoggerConfig)
    check_patches(cfg.get("patches"))
    check_task_node(cfg.task)
    check_model_architecture(cfg.model.hf_config)
    check_path_exists(cfg.model.path, "model.path", "model directory")
    check_model_dir(cfg.model.path)
    tables = cfg.hardware.efficiency_table  # a path, or {software stack: path or null}
    for stack, table in (tables.items() if isinstance(tables, Mapping) else [(None, tables)]):
        key = "hardware.efficiency_table" + (f".{stack}" if stack else "")
        check_path_exists(table, key, "efficiency table", base=REPO_ROOT)
    check_targets(cfg)
    try:
        adapter = instantiate(cfg.backend.adapter)
    except InstantiationException as error:  # an adapter's own check: its one line, not Hydra's wrapping
        if isinstance(error.__cause__, CrucibleError):
            raise error.__cause__ from None
        raise
    check_backend_runs_task(adapter, cfg.backend.name, cfg.task.name)
    check_task_settings(cfg)
    return adapter


class Runtime:
    def __init__(self, cfg: DictConfig, run_dir: Path, overrides: list[str], multirun: bool = False,
                 hardware_note: str | None = None):
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.overrides = overrides
        self.multirun = multirun
        self.hardware_note = hardware_note  # what hardware=auto chose, when it did
        self.dist = detect()
        self.records = RunRecords(self.run_dir, enabled=self.dist.is_main)
        self.patches: PatchRunner | None = None
        self.versions: dict[str, str | None] = {}
        self.exception: BaseException | None = None
        self.signals = StopSignals()  # SIGINT/SIGTERM while the run lives (framework/core/stopping.py)
        self.startup_s: dict[str, float | None] = {}  # seconds before step 1, by phase (_lifecycle)
        self.resume: ResumePoint | None = None  # where the run resumes (run()'s resume check); None: fresh

    def _apply(self, phase: Phase, adapter: BackendAdapter, **attributes) -> None:
        ctx = PatchContext(backend=adapter.name, versions=self.versions, model=self.cfg.model.name,
                           hardware=self.cfg.hardware.name, accelerator=self.cfg.hardware.accelerator,
                           phase=phase, config=self.cfg, **attributes)
        self.patches.apply(phase, ctx)

    def run(self) -> TrainingResult:
        """Run the lifecycle; never raises: failures come back as a failed TrainingResult (see .error)."""
        start = time.perf_counter()
        lock = RunLock(self.run_dir)
        try:  # before any record is touched: a refused run leaves config.yaml and summary.json as they were
            if self.dist.is_main:
                lock.acquire()  # one live writer per run dir
            if not self.multirun:  # a sweep's job dirs are the sweep's (a second sweep into its dir reuses them)
                check_same_kind(self.run_dir, self.cfg)
            self.resume = check_resumable(self.run_dir, self.cfg, self.overrides)
        except CrucibleError as exc:
            lock.release()
            self.exception = exc
            return TrainingResult(success=False, error=str(exc), status="refused")
        if self.resume and self.dist.is_main:
            for line in self.resume.warnings():  # keys a release added or removed since the checkpoint
                log.warning("%s", line)
        try:
            return self._run_locked(start)
        finally:
            lock.release()

    def _run_locked(self, start: float) -> TrainingResult:
        self.trainer, self.logger, self.backend_config = None, None, None
        logging.raiseExceptions = False  # a full disk under run.log: no "--- Logging error ---" per line
        self.signals.install()
        try:
            self._write_start_records()
            result = self._lifecycle()
        except RunInterrupted as exc:
            result = self._interrupted(exc.signum)
        except Exception as exc:  # the run's failure is recorded, then reported by the caller
            self.exception = disk_full(exc, self.run_dir) or exc
            message = str(self.exception) if isinstance(self.exception, CrucibleError) else f"{type(exc).__name__}: {exc}"
            result = TrainingResult(success=False, error=message, status="failed")
            self._best_effort(self.records.write_traceback, traceback.format_exc())
        finally:
            self.signals.cooperative = True  # from here a signal only records itself: the records get written
            self._cleanup()
        if result.status == "interrupted" and self.signals.signum:
            self.exception = RunInterrupted(self.signals.signum)
        result.wall_time_s = result.wall_time_s or round(time.perf_counter() - start, 4)
        self._best_effort(self._write_summary, result)
        if self.signals.requeue_requested:  # SLURM preemption / time limit under submitit: requeue this job
            log.warning("requeueing the job (%s); it resumes in %s", self.signals.name, self.run_dir)
            self.signals.requeue()
        self.signals.restore()
        return result

    def _interrupted(self, signum: int) -> TrainingResult:
        """A signal that stopped the run at once (the trainer does not handle stop requests, or a second signal)."""
        self.signals.signum = signum
        return TrainingResult(success=False, status="interrupted", error=f"stopped by {self.signals.name}")

    def _best_effort(self, write, *args) -> None:
        """A record written after a failure; a full disk must not replace the failure's one line."""
        try:
            write(*args)
        except OSError as exc:  # the run fails with this as its one line, unless it failed already
            log.debug("could not write a record in %s: %s", self.run_dir, exc)
            if self.exception is None:
                self.exception = disk_full(exc, self.run_dir) or exc

    def _write_start_records(self) -> None:
        self.records.clear_traceback()  # a resumed run in the same dir starts without the old failure
        self.records.write_config(self.cfg)
        self.records.write_overrides(self.overrides)
        resume = self.resume
        self.records.append_segment(self.overrides, resume.step if resume else None,
                                    resume.new_keys if resume else {}, resume.removed_keys if resume else {})
        self.env = env_info.collect(REPO_ROOT)
        self.env["distributed"] = vars(self.dist)
        self.records.write_env(self.env)

    def _lifecycle(self):
        launched = env_info.launch_seconds()  # imports and config; None for a sweep's later jobs
        mark = time.perf_counter()
        adapter = validate(self.cfg)
        self.versions = adapter.detect_versions()
        self.env["backend"] = {"name": adapter.name, "libraries": self.versions}
        self.records.write_env(self.env)
        adapter.load_patches()
        patches = check_patches(self.cfg.get("patches"))  # refused in validate() already when wrong
        self.patches = PatchRunner(adapter.name, patches.enable, patches.disable)
        self._apply(Phase.PREPARE, adapter)
        adapter.prepare_backend(self.cfg)
        self.backend_config = backend_config = adapter.convert_config(self.cfg)
        if self.hardware_note:  # said once the input is known good: bad input stays one line
            log.info("%s", self.hardware_note)
        self._apply(Phase.CONVERT, adapter, backend_config=backend_config)
        trainer_cls = adapter.load_trainer_class(self.cfg.task.name)
        wandb = OmegaConf.to_container(self.cfg.logger.wandb, resolve=True)
        self.logger = logger = MetricLogger(self.run_dir, wandb, run_name=self.run_dir.name,
                                            config=OmegaConf.to_container(self.cfg, resolve=True),
                                            enabled=self.dist.is_main)
        context = RunContext(self.run_dir, self.cfg, logger, int(self.cfg.seed), self.multirun, dist=self.dist,
                             fingerprint=run_fingerprint(self.cfg), signals=self.signals,
                             resume_absent_ok=self.resume.absent_ok if self.resume else frozenset(),
                             resume_from=self.resume.checkpoint if self.resume else None)
        self.trainer = trainer = trainer_cls(backend_config, context)
        self.signals.cooperative = bool(getattr(trainer, "handles_stop_requests", False))
        self._apply(Phase.SETUP, adapter, backend_config=backend_config)
        prepared = time.perf_counter()
        trainer.setup()
        set_up = time.perf_counter()
        trainer.init()
        self.startup_s = {"launch": launched, "prepare": prepared - mark, "setup": set_up - prepared,
                          "init": time.perf_counter() - set_up}
        # debug, not info: a bad input found later stays one line on stderr (summary.json has the figures)
        log.debug("startup: %s", ", ".join(f"{k} {v:.1f} s" for k, v in self.startup_s.items() if v is not None))
        self._apply(Phase.BEFORE_TRAIN, adapter, backend_config=backend_config, trainer=trainer)
        result = trainer.run_train()
        self._apply(Phase.AFTER_TRAIN, adapter, backend_config=backend_config, trainer=trainer, result=result)
        logger.summary(result.metrics)
        return result

    def _cleanup(self) -> None:
        # a backend config may hold background work (a model build); its trainer stops it, else it stops here
        owner = self.trainer if self.trainer is not None else self.backend_config
        stop = getattr(owner, "cleanup", None) or getattr(owner, "close", None)
        if stop is not None:
            try:
                stop()
            except Exception as exc:  # never hide the original error behind a cleanup error
                log.warning("cleanup failed: %s", exc)
        if self.logger is not None:
            self._best_effort(self.logger.close)
        report = self.patches.report() if self.patches else {"backend": None, "counts": {}, "patches": []}
        self._best_effort(self.records.write_patches, report)

    def summary(self, result: TrainingResult) -> dict:
        libraries = list(self.versions)
        key_metrics = to_plain(self.cfg.task.get("key_metrics"))
        return {
            "status": result.status,
            "success": result.success,
            "task": self.cfg.task.name,
            "backend": self.cfg.backend.name,
            "backend_version": self.versions.get(libraries[0]) if libraries else None,
            "versions": self.versions,
            "model": self.cfg.model.name,
            "hardware": self.cfg.hardware.name,
            "hardware_auto": self.hardware_note,
            "world_size": self.dist.world_size,
            "overrides": self.overrides,
            "warnings": [*(self.resume.warnings() if self.resume else []), *result.warnings],
            "startup_s": self.startup_s,  # launch (imports, config), prepare, trainer setup, init: before step 1
            "metrics": result.metrics,
            "key_metrics": key_metrics if isinstance(key_metrics, list) else [],  # a bad one: validate() said so
            "run_dir": str(self.run_dir),
            "result": result.to_dict(),
        }

    def _write_summary(self, result: TrainingResult) -> None:
        self.records.write_summary(self.summary(result))


def run_from_hydra(cfg: DictConfig) -> TrainingResult:
    """The task function behind run.py: one job of a run or of a sweep."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    from framework.core.hardware import detect as detect_hardware
    from framework.core.launcher import check_unswept_run

    hydra_cfg = HydraConfig.get()
    multirun = hydra_cfg.mode == RunMode.MULTIRUN
    overrides = OmegaConf.to_container(hydra_cfg.overrides.task, resolve=False)  # may hold literal ${...}
    if not multirun:
        try:
            check_unswept_run(hydra_cfg.sweeper, overrides, hydra_cfg.runtime.choices.get("recipe"))
        except ConfigError as exc:
            fail(exc, debug=cfg.get("debug") is True or None)
    auto = hydra_cfg.runtime.choices.get("hardware") == "auto"
    runtime = Runtime(cfg, Path(hydra_cfg.runtime.output_dir), overrides, multirun,
                      hardware_note=detect_hardware().describe() if auto else None)
    result = runtime.run()
    if isinstance(runtime.exception, RunInterrupted):
        stop_after_signal(runtime, result, multirun)
    if not multirun and (runtime.exception is not None or result.status == "invalid"):
        # one line on stderr and a non-zero exit; in a sweep the same job is a failed or invalid row instead
        fail(runtime.exception or ConfigError(result.error or "invalid configuration"),
             debug=cfg.get("debug") is True or None, run_dir=runtime.run_dir)  # None: CRUCIBLE_DEBUG decides
    if runtime.dist.is_main:
        print_outcome(runtime.summary(result), block=not multirun)
    if not result.success:
        log.error("job failed: %s", result.error)
    return result


def stop_after_signal(runtime: Runtime, result: TrainingResult, multirun: bool) -> None:
    """SIGINT/SIGTERM: the closing block, one line on stderr, exit 128 + the signal (a sweep stops too)."""
    import sys

    from framework.core.sweep import summarise_interrupted

    signum = runtime.exception.signum
    if runtime.dist.is_main:
        print_outcome(runtime.summary(result), block=not multirun)
    saved = result.artifacts.get("last_checkpoint")
    then = (f"{saved} holds the last checkpoint; rerun the same command with hydra.run.dir={runtime.run_dir} to "
            f"resume" if saved else f"records in {runtime.run_dir}")
    if multirun and (table := summarise_interrupted()) is not None:
        then += f"; the sweep's jobs so far: {table}"
    sys.stderr.write(f"error: interrupted by {signal_name(signum)}; {then}\n")
    sys.stderr.flush()
    sys.exit(exit_code(signum))
