"""A GRPO run as two processes (two SLURM tasks of one job, jax.distributed over CPU devices) on the real local
SLURM gives the same results as one process with the same mesh (parallel.fsdp=2 over two host devices):
the same deterministic metrics rows and the same final checkpoint, file for file; records written once
(issue 11). Needs a controller: `eval "$(bash .ci/slurm_up.sh)"`."""

from __future__ import annotations

import json

import pytest

from framework.core.loggers import read_metrics
from tests.conformance import _deterministic, _final_manifest
from tests.conftest import run_cli
from tests.test_slurm import SLURM_LAUNCHER, slurm_controller  # noqa: F401 - the fixture

pytest.importorskip("jax")
pytestmark = [pytest.mark.slurm, pytest.mark.slow]

RUN = ["recipe=grpo_arithmetic_cpu", "grpo.steps=3", "grpo.max_new_tokens=8", "grpo.checkpoint.every=3",
       "grpo.export_hf=false", "progress=false"]


def test_two_slurm_tasks_match_one_process(slurm_controller, tmp_path):  # noqa: F811
    launcher = [a.replace("mem_gb=1", "mem_gb=8") for a in SLURM_LAUNCHER] + ["hydra.launcher.tasks_per_node=2"]
    sweep = run_cli(["-m", *launcher, *RUN, f"hydra.sweep.dir={tmp_path}/two"])
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    single = run_cli([*RUN, "parallel.fsdp=2", f"hydra.run.dir={tmp_path}/one"])
    assert single.returncode == 0, single.stderr[-3000:]

    two, one = tmp_path / "two" / "0", tmp_path / "one"
    summary = json.loads((two / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["world_size"] == 2
    assert len((two / "segments.jsonl").read_text().splitlines()) == 1  # only rank 0 writes records
    rows = [[_deterministic(r) for r in read_metrics(d / "metrics.jsonl")] for d in (two, one)]
    assert [r["step"] for r in rows[0]] == [1, 2, 3] and rows[0] == rows[1]
    assert any(r["grad_norm"] > 0 for r in rows[0])  # real updates were compared
    assert _final_manifest(two) == _final_manifest(one)
