"""Shared fixtures: compose configs through Hydra's compose API, run the CLI in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from omegaconf import DictConfig

from framework.core.paths import CONF_DIR, REPO_ROOT


def compose_config(overrides: list[str] = (), return_hydra_config: bool = False) -> DictConfig:
    from framework.core.hardware import register_auto
    from framework.core.validation import register_resolvers

    register_auto()  # hardware=auto and ${backend_name:...}, as run.py registers them
    register_resolvers()
    with initialize_config_dir(config_dir=str(CONF_DIR), version_base="1.3"):
        return compose("config", overrides=list(overrides), return_hydra_config=return_hydra_config)


def run_cli(args: list[str], cwd: Path = REPO_ROOT, env: dict | None = None, timeout: int = 600) -> subprocess.CompletedProcess:
    """`python run.py ARGS` as a user runs it."""
    full_env = {**os.environ, **(env or {})}
    full_env.pop("HYDRA_FULL_ERROR", None)
    return subprocess.run([sys.executable, str(REPO_ROOT / "run.py"), *args], cwd=cwd, env=full_env,
                          capture_output=True, text=True, timeout=timeout)


@pytest.fixture
def compose_cfg():
    return compose_config
