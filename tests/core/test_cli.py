"""The command line itself: help lists every group option without composing; --cfg job composes."""

from __future__ import annotations

from framework.core.validation import list_options
from tests.conftest import CONF_DIR, run_cli


def test_help_lists_every_group_and_option():
    proc = run_cli(["--help"])
    assert proc.returncode == 0, proc.stderr
    for group in ("backend", "task", "model", "hardware", "data", "logger", "recipe"):
        line = next(l for l in proc.stdout.splitlines() if l.strip().startswith(group + " "))
        assert line.split(None, 1)[1].split(", ") == list_options(CONF_DIR, group)
    assert "hydra/launcher=basic, submitit_local, submitit_slurm" in proc.stdout


def test_cfg_job_prints_the_composed_config():
    proc = run_cli(["--cfg", "job", "model=qwen3_8b", "parallel.tp=4"])
    assert proc.returncode == 0, proc.stderr
    assert "hub_id: Qwen/Qwen3-8B" in proc.stdout and "tp: 4" in proc.stdout
