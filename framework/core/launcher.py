"""The sweep launcher's settings (hydra/launcher=local|slurm, hydra-submitit-launcher) and the optuna sweeper's trial
counts, checked as a sweep starts: submitit took a count of 0 for an IndexError, a negative time limit for jobs that
ended without output, and hydra/launcher=slurm where SLURM is absent for a RuntimeError; optuna took n_trials=0 for
`ValueError: No trials are completed yet`."""

from __future__ import annotations

import os
import shutil
import subprocess
from typing import Any, Mapping, Optional

from framework.core.errors import ConfigError
from framework.core.ranges import Count, NonNegativeInt, PositiveFloat

# null: submitit's default (Hydra's own submitit_local leaves cpus, gpus and memory null)
SETTINGS = {key: Optional[annotation] for key, annotation in {
    "nodes": Count, "tasks_per_node": Count, "cpus_per_task": Count, "gpus_per_node": NonNegativeInt,
    "mem_gb": PositiveFloat, "timeout_min": Count, "array_parallelism": Count}.items()}
OPTUNA_SETTINGS = {"n_trials": Count, "n_jobs": Count}  # recipe=sim_search
FROM_HARDWARE = ("gpus_per_node", "tasks_per_node", "cpus_per_task", "mem_gb")  # conf/hardware/*.yaml's launcher


def settings(node: Any, where: str) -> dict[str, Any]:
    """A hydra.launcher / hydra.sweeper node's values, resolved; one whose interpolation names a missing key (a
    hardware file without `launcher:`) was Hydra's warning of two lines and `Interpolation key ... not found`."""
    from omegaconf import OmegaConf
    from omegaconf.errors import InterpolationResolutionError

    values = {}
    for key in node:
        try:
            values[key] = node.get(key)
        except InterpolationResolutionError as exc:
            raw = OmegaConf.to_container(node, resolve=False)[key]
            hint = (f"; the hardware file's launcher: {{{', '.join(FROM_HARDWARE)}}} sets it: add it there, or set "
                    f"{where}.{key}=..." if "hardware.launcher." in str(raw) else f"; set {where}.{key}=...")
            raise ConfigError(f"{where}.{key}: {raw} does not resolve ({exc}){hint}") from None
    return values


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
    if not target.endswith("SlurmLauncher"):
        return
    if shutil.which("srun") is None:
        raise ConfigError("hydra/launcher: a SLURM launcher, and no SLURM on this machine (srun is not on PATH); "
                          "submit the sweep from a SLURM login node, or run its jobs here with hydra/launcher=local")
    partitions = slurm_partitions()
    extra = launcher.get("additional_parameters") or {}
    if partitions is not None and not {"clusters", "cluster", "M"} & set(extra):  # sinfo lists this cluster's only
        partition, where = launcher.get("partition"), "hydra.launcher.partition"
        if partition is None and extra.get("partition") is not None:
            partition, where = extra["partition"], "hydra.launcher.additional_parameters.partition"
        if partition is None and os.environ.get("SBATCH_PARTITION"):  # sbatch takes it where no --partition is given
            partition, where = os.environ["SBATCH_PARTITION"], "SBATCH_PARTITION (environment)"
        check_partition(partition, partitions, where)


def slurm_partitions() -> Optional[list[str]]:
    """The cluster's partitions as sinfo lists them (the default one ends in '*'), None without sinfo. SLURM's
    client without a reachable controller made sbatch fail after the sweep started (submitit's FailedJobError,
    sbatch's lines twice, exit 1)."""
    sinfo = shutil.which("sinfo")
    if sinfo is None:
        return None
    try:
        proc = subprocess.run([sinfo, "--all", "--noheader", "--format=%P"], capture_output=True, text=True,
                              timeout=30)
        problem = ([line for line in proc.stderr.splitlines() if line.strip()] or [f"exit {proc.returncode}"])[-1]
    except subprocess.TimeoutExpired:
        proc, problem = None, "no answer in 30 s"
    if proc is None or proc.returncode:
        raise ConfigError(f"hydra/launcher: a SLURM launcher, and this machine's SLURM reaches no controller (sinfo: "
                          f"{problem}); submit the sweep from a SLURM login node, or run its jobs here with "
                          f"hydra/launcher=local")
    return sorted({line.strip() for line in proc.stdout.splitlines() if line.strip()})


def check_partition(partition: Any, partitions: list[str], where: str = "hydra.launcher.partition") -> None:
    """sbatch refuses a partition the cluster lacks, and a job without one where no partition is the default.
    `where`: the setting that names it (the launcher's, its additional_parameters', or SBATCH_PARTITION)."""
    names = [name.rstrip("*") for name in partitions]
    if partition is None:
        if not any(name.endswith("*") for name in partitions):
            raise ConfigError(f"hydra.launcher.partition: null, and this cluster has no default partition; valid: "
                              f"one of {names}")
        return
    unknown = [name for name in str(partition).split(",") if name.strip() not in names]
    if unknown:
        raise ConfigError(f"{where}: {partition!r}: {', '.join(unknown)} is no partition of this "
                          f"cluster; valid: one of {names} (or a comma-separated list of them)")


def check_sweeper(sweeper: Mapping[str, Any]) -> None:
    """A ConfigError naming the hydra.sweeper count the optuna sweeper would fail on."""
    from framework.core.validation import type_error

    if "optuna" not in str(sweeper.get("_target_", "")):
        return
    for key, annotation in OPTUNA_SETTINGS.items():
        if key in sweeper and (reason := type_error(sweeper[key], annotation)):
            raise ConfigError(f"hydra.sweeper.{key}: {reason}")


def check_unswept_run(sweeper: Any, overrides: list[str], recipe: Optional[str]) -> None:
    """A run without -m of a recipe that sweeps (`recipe=sim_sweep`): one job of the swept keys' config values, the
    sweep silently not run (exit 0), unless the command line gives each swept key its value."""
    params = sweeper.get("params") if sweeper is not None else None
    given = {override.split("=", 1)[0].lstrip("+~") for override in overrides}
    unset = [str(key) for key in (params or {}) if str(key) not in given]
    if unset:
        what = f"recipe={recipe}" if isinstance(recipe, str) else "the config"
        command = f"python run.py -m {what + ' ' if isinstance(recipe, str) else ''}..."
        raise ConfigError(f"{what} sweeps {', '.join(unset)} (hydra.sweeper.params), and this is one run (no -m); "
                          f"valid: -m to run its jobs ({command}), or a value for each of {', '.join(unset)} for one "
                          f"run")
