"""env.json: where and with what a run ran, without importing any heavy library."""

from __future__ import annotations

import importlib.metadata
import os
import platform
import socket
import subprocess
import sys
from pathlib import Path

PACKAGES = (
    "crucible", "hydra-core", "omegaconf", "numpy", "torch", "jax", "jaxlib", "flax", "optax",
    "orbax-checkpoint", "transformers", "tokenizers", "peft", "trl", "datasets", "mlx", "mlx-lm",
    "megatron-core", "submitit", "hydra-submitit-launcher", "wandb",
)
_ENV_PREFIXES = ("SLURM_JOB_ID", "SLURM_NODELIST", "SLURM_NTASKS", "CUDA_VISIBLE_DEVICES", "TPU_", "XLA_FLAGS", "JAX_PLATFORMS")


def package_versions() -> dict[str, str]:
    versions = {}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
    return versions


def _run(cmd: list[str], cwd: Path | None = None) -> str | None:
    try:
        out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def git_state(repo: Path) -> dict:
    commit = _run(["git", "rev-parse", "HEAD"], repo)
    dirty = _run(["git", "status", "--porcelain", "--untracked-files=no"], repo)
    return {"commit": commit, "dirty": bool(dirty) if dirty is not None else None}


def accelerators() -> list[str]:
    """GPU names from nvidia-smi / rocm-smi when present; the backend adds what its library sees."""
    from framework.core.hardware import gpu_names

    return gpu_names()


_LAUNCH_TAKEN = False


def launch_seconds() -> float | None:
    """process_age_s() at the first call in this process, None at later ones: the imports and config
    composition before a process's first run (a sweep's later jobs run in the same process)."""
    global _LAUNCH_TAKEN
    if _LAUNCH_TAKEN:
        return None
    _LAUNCH_TAKEN = True
    return process_age_s()


def process_age_s() -> float | None:
    """Seconds since this process started (Linux /proc; None elsewhere): what imports and config took."""
    try:
        start_ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    return max(uptime - start_ticks / os.sysconf("SC_CLK_TCK"), 0.0)


def collect(repo: Path) -> dict:
    return {
        "host": socket.gethostname(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "python": sys.version.split()[0],
        "cpu_count": os.cpu_count(),
        "accelerators": accelerators(),
        "packages": package_versions(),
        "git": git_state(repo),
        "env": {k: v for k, v in os.environ.items() if k.startswith(_ENV_PREFIXES)},
        "argv": sys.argv,
    }
