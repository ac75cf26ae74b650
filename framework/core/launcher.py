"""The sweep launcher's settings (hydra/launcher=local|slurm, hydra-submitit-launcher) and the optuna sweeper's trial
counts, checked as a sweep starts: submitit took a count of 0 for an IndexError, a negative time limit for jobs that
ended without output, and hydra/launcher=slurm where SLURM is absent for a RuntimeError; optuna took n_trials=0 for
`ValueError: No trials are completed yet`."""

from __future__ import annotations

import shutil
from typing import Any, Mapping, Optional

from framework.core.errors import ConfigError
from framework.core.ranges import Count, NonNegativeInt, PositiveFloat

# null: submitit's default (Hydra's own submitit_local leaves cpus, gpus and memory null)
SETTINGS = {key: Optional[annotation] for key, annotation in {
    "nodes": Count, "tasks_per_node": Count, "cpus_per_task": Count, "gpus_per_node": NonNegativeInt,
    "mem_gb": PositiveFloat, "timeout_min": Count, "array_parallelism": Count}.items()}
OPTUNA_SETTINGS = {"n_trials": Count, "n_jobs": Count}  # recipe=sim_search
FROM_HARDWARE = ("gpus_per_node", "tasks_per_node", "cpus_per_task", "mem_gb")  # conf/hardware/*.yaml's launcher


def check_launcher(launcher: Mapping[str, Any]) -> None:
    """A ConfigError naming the hydra.launcher key that submitit would fail on, or SLURM's absence."""
    from framework.core.validation import type_error

    target = str(launcher.get("_target_", ""))
    if "submitit" not in target:  # Hydra's basic launcher runs the jobs in this process
        return
    for key, annotation in SETTINGS.items():
        if key in launcher and (reason := type_error(launcher[key], annotation)):
            origin = f" (set by hardware.launcher.{key} unless given)" if key in FROM_HARDWARE else ""
            raise ConfigError(f"hydra.launcher.{key}: {reason}{origin}")
    if target.endswith("SlurmLauncher") and shutil.which("srun") is None:
        raise ConfigError("hydra/launcher: a SLURM launcher, and no SLURM on this machine (srun is not on PATH); "
                          "submit the sweep from a SLURM login node, or run its jobs here with hydra/launcher=local")


def check_sweeper(sweeper: Mapping[str, Any]) -> None:
    """A ConfigError naming the hydra.sweeper count the optuna sweeper would fail on."""
    from framework.core.validation import type_error

    if "optuna" not in str(sweeper.get("_target_", "")):
        return
    for key, annotation in OPTUNA_SETTINGS.items():
        if key in sweeper and (reason := type_error(sweeper[key], annotation)):
            raise ConfigError(f"hydra.sweeper.{key}: {reason}")
