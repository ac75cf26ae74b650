"""The command line itself: help lists every group option and which backend runs which task without
composing (fast); --cfg job composes."""

from __future__ import annotations

import time

from tests.conftest import CONF_DIR, run_cli


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF_DIR / group).glob("*.yaml"))


def test_help_lists_every_group_and_option_and_the_backends_tasks():
    started = time.perf_counter()
    proc = run_cli(["--help"])
    elapsed = time.perf_counter() - started
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    for group in ("backend", "task", "model", "hardware", "data", "logger", "recipe"):
        line = next(l for l in lines if l.strip().startswith(group + " "))
        expected = (["auto"] if group == "hardware" else []) + options(group)
        assert line.split(None, 1)[1].split(", ") == expected
    assert "hydra/launcher=basic, submitit_local, submitit_slurm" in proc.stdout
    backends = lines[lines.index("backends and the tasks they run:") + 1:]
    assert backends[0].split() == ["maxtext", "task=grpo"] and backends[1].split() == ["sim", "task=calibrate|sim"]
    assert elapsed < 3  # the interpreter's start included; no heavy library is imported


def test_cfg_job_prints_the_composed_config():
    proc = run_cli(["--cfg", "job", "model=qwen3_8b", "sim.tp=4"])
    assert proc.returncode == 0, proc.stderr
    assert "hub_id: Qwen/Qwen3-8B" in proc.stdout and "tp: 4" in proc.stdout
