"""The one lifecycle every run goes through.

    validate config -> adapter.prepare_backend() -> adapter.convert_config() -> patches(setup)
    -> trainer.setup() -> trainer.init() -> patches(before_train) -> trainer.run_train()
    -> patches(after_train) -> trainer.cleanup() (also on error) -> run records

Trainers only implement run_train() (and optionally setup/init/cleanup). The runtime writes the
run directory (framework.core.records) whatever happens.
"""

from __future__ import annotations

import logging
import time
import traceback
from pathlib import Path

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from framework.core import env_info
from framework.core.adapter import BackendAdapter
from framework.core.context import RunContext
from framework.core.distributed import process_rank, world_size
from framework.core.errors import ConfigError, CrucibleError
from framework.core.loggers import MetricLogger
from framework.core.patches import PatchContext, PatchRunner, Phase
from framework.core.records import RunRecords
from framework.core.result import TrainingResult
from framework.core.schema import HardwareConfig, ModelConfig
from framework.core.validation import check_path_exists, check_schema, check_targets, resolve_all, type_error

log = logging.getLogger(__name__)
REPO_ROOT = Path(__file__).resolve().parents[2]


def validate(cfg: DictConfig) -> BackendAdapter:
    """All checks that need no heavy library; returns the instantiated adapter."""
    resolve_all(cfg)
    for key, tp in (("seed", int), ("debug", bool), ("progress", bool)):
        if (reason := type_error(cfg.get(key), tp)) is not None:
            raise ConfigError(f"{key}: {reason}")
    check_schema(cfg, "model", ModelConfig)
    check_schema(cfg, "hardware", HardwareConfig)
    check_path_exists(cfg.model.path, "model.path", "model directory")
    check_path_exists(cfg.hardware.efficiency_table, "hardware.efficiency_table", "efficiency table", base=REPO_ROOT)
    check_targets(cfg)
    adapter = instantiate(cfg.backend.adapter)
    task = cfg.task.name
    if task not in adapter.trainers:
        raise ConfigError(
            f"task={task} does not run on backend={adapter.name}; backend={adapter.name} runs task="
            f"{'|'.join(sorted(adapter.trainers))}"
        )
    return adapter


class Runtime:
    def __init__(self, cfg: DictConfig, run_dir: Path, overrides: list[str], multirun: bool = False):
        self.cfg = cfg
        self.run_dir = Path(run_dir)
        self.overrides = overrides
        self.multirun = multirun
        self.rank, self.world_size = process_rank(), world_size()
        self.records = RunRecords(self.run_dir, enabled=self.rank == 0)
        self.patches: PatchRunner | None = None
        self.events: list[str] = []  # the lifecycle steps taken, in order (tests pin it)

    def _step(self, name: str) -> None:
        self.events.append(name)
        log.debug("lifecycle: %s", name)

    def _patch_context(self, adapter: BackendAdapter, version: str | None, phase: Phase, **extra) -> PatchContext:
        return PatchContext(
            backend=adapter.name, backend_version=version, model=self.cfg.model.name,
            hardware=self.cfg.hardware.name, accelerator=self.cfg.hardware.accelerator,
            phase=phase, config=self.cfg, extra=extra,
        )

    def _apply(self, phase: Phase, adapter: BackendAdapter, version: str | None, **extra) -> None:
        self._step(f"patches:{phase.value}")
        self.patches.apply(phase, self._patch_context(adapter, version, phase, **extra))

    def run(self) -> TrainingResult:
        """Run the lifecycle; never raises: failures come back as a failed TrainingResult (see .error)."""
        self.records.clear_traceback()  # a resumed run in the same dir starts without the old failure
        self.records.write_config(self.cfg)
        self.records.write_overrides(self.overrides)
        self.records.write_env(env_info.collect(REPO_ROOT))
        start = time.perf_counter()
        trainer, logger, version = None, None, None
        self.exception: BaseException | None = None
        try:
            adapter = validate(self.cfg)
            self._step("validate")
            adapter.prepare_backend(self.cfg)
            self._step("prepare_backend")
            version = adapter.detect_backend_version()
            backend_config = adapter.convert_config(self.cfg)
            self._step("convert_config")
            adapter.load_patches()
            self.patches = PatchRunner(adapter.name, self.cfg.patches.enable, self.cfg.patches.disable)
            self._apply(Phase.SETUP, adapter, version, backend_config=backend_config)
            trainer_cls = adapter.load_trainer_class(self.cfg.task.name)
            logger = MetricLogger(self.run_dir, OmegaConf.to_container(self.cfg.logger.wandb, resolve=True),
                                  run_name=self.run_dir.name, config=OmegaConf.to_container(self.cfg, resolve=True),
                                  enabled=self.rank == 0)
            context = RunContext(self.run_dir, self.cfg, logger, int(self.cfg.seed), self.multirun,
                                 rank=self.rank, world_size=self.world_size)
            trainer = trainer_cls(backend_config, context)
            trainer.setup()
            self._step("trainer.setup")
            trainer.init()
            self._step("trainer.init")
            self._apply(Phase.BEFORE_TRAIN, adapter, version, backend_config=backend_config, trainer=trainer)
            result = trainer.run_train()
            self._step("trainer.run_train")
            self._apply(Phase.AFTER_TRAIN, adapter, version, backend_config=backend_config, trainer=trainer, result=result)
            logger.summary(result.metrics)
        except Exception as exc:  # the run's failure is recorded, then reported by the caller
            self.exception = exc
            message = str(exc) if isinstance(exc, CrucibleError) else f"{type(exc).__name__}: {exc}"
            result = TrainingResult(success=False, error=message, status="failed")
            self.records.write_traceback(traceback.format_exc())
        finally:
            self._cleanup(trainer, logger)
        result.wall_time_s = result.wall_time_s or round(time.perf_counter() - start, 4)
        self._write_summary(result, version)
        return result

    def _cleanup(self, trainer, logger) -> None:
        if trainer is not None:
            try:
                trainer.cleanup()
                self._step("trainer.cleanup")
            except Exception as exc:  # never hide the original error behind a cleanup error
                log.warning("trainer.cleanup failed: %s", exc)
        if logger is not None:
            logger.close()
        report = self.patches.report() if self.patches else {"backend": None, "counts": {}, "patches": []}
        self.records.write_patches(report)

    def _write_summary(self, result: TrainingResult, backend_version: str | None) -> None:
        summary = {
            "status": result.status,
            "success": result.success,
            "task": self.cfg.task.name,
            "backend": self.cfg.backend.name,
            "backend_version": backend_version,
            "model": self.cfg.model.name,
            "hardware": self.cfg.hardware.name,
            "overrides": self.overrides,
            "metrics": result.metrics,
            "result": result.to_dict(),
        }
        self.records.write_summary(summary)


def run_from_hydra(cfg: DictConfig) -> TrainingResult:
    """The task function behind run.py: one job of a run or of a sweep."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    hydra_cfg = HydraConfig.get()
    multirun = hydra_cfg.mode == RunMode.MULTIRUN
    overrides = OmegaConf.to_container(hydra_cfg.overrides.task, resolve=False)  # may hold literal ${...}
    runtime = Runtime(cfg, Path(hydra_cfg.runtime.output_dir), overrides, multirun)
    result = runtime.run()
    if not multirun and (runtime.exception is not None or result.status == "invalid"):
        from framework.cli import fail

        # one line on stderr, non-zero exit; in a sweep the same job is a failed or invalid row instead
        fail(runtime.exception or ConfigError(result.error or "invalid configuration"), debug=bool(cfg.debug),
             run_dir=runtime.run_dir)
    _print_outcome(runtime.run_dir, result)
    if not result.success:
        log.error("job failed: %s", result.error)
    return result


def _print_outcome(run_dir: Path, result: TrainingResult) -> None:
    scalars = {k: v for k, v in result.metrics.items() if isinstance(v, (int, float, bool))}
    shown = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in list(scalars.items())[:8])
    log.info("%s in %.1fs: %s (run dir: %s)", result.status, result.wall_time_s, shown, run_dir)
