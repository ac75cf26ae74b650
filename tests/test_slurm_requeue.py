"""SLURM preemption on the real local SLURM: submitit's preempt signal (SIGUSR2, as sent `signal_delay_s`
before a time limit) makes a GRPO job checkpoint at its step boundary and requeue itself; the requeued job
resumes in the same job dir and ends bit-identical to its twin job of the same sweep that was not
signalled (same final checkpoint file for file, same deterministic metrics rows) (issue 11). Needs a controller: `eval "$(bash .ci/slurm_up.sh)"`."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time

import pytest

from framework.core.loggers import read_metrics
from tests.conformance import _deterministic, _final_manifest
from tests.conftest import REPO_ROOT
from tests.test_slurm import SLURM_LAUNCHER, slurm_controller  # noqa: F401 - the fixture

pytest.importorskip("jax")
pytestmark = [pytest.mark.slurm, pytest.mark.slow]

STEPS = 400  # long enough to be signalled mid-run


def test_preempted_grpo_job_checkpoints_requeues_and_resumes(slurm_controller, tmp_path):  # noqa: F811
    launcher = [a.replace("mem_gb=1", "mem_gb=6").replace("timeout_min=5", "timeout_min=20") for a in SLURM_LAUNCHER]
    args = [sys.executable, str(REPO_ROOT / "run.py"), "-m", *launcher, "recipe=grpo_arithmetic_cpu",
            f"grpo.steps={STEPS}", "grpo.checkpoint.every=100000", "grpo.export_hf=false", "progress=false",
            "grpo.checkpoint.keep=2,3",  # two jobs that compute the same (keep may change on resume, too)
            f"hydra.sweep.dir={tmp_path}"]
    sweep = subprocess.Popen(args, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    job_dir, deadline = tmp_path / "0", time.monotonic() + 600
    while len(read_metrics(job_dir / "metrics.jsonl")) < 3:
        assert sweep.poll() is None and time.monotonic() < deadline, sweep.communicate()[1][-3000:]
        time.sleep(0.5)
    # submitit keeps one folder per array task ("<array>_<task>") beside its own hidden files
    array_id = next(d.name.split("_")[0] for d in (tmp_path / ".submitit").iterdir() if re.fullmatch(r"\d+_\d+", d.name))
    subprocess.run(["scancel", "--signal=USR2", f"{array_id}_0"], check=True)  # job 1 runs undisturbed
    _, stderr = sweep.communicate(timeout=900)

    segments = [json.loads(line) for line in (job_dir / "segments.jsonl").read_text().splitlines()]
    assert len(segments) == 2, stderr[-3000:]
    resumed_from = segments[1]["resumed_from_step"]
    assert resumed_from and resumed_from >= 3  # the requeued job started from the checkpoint of the signal
    summary = json.loads((job_dir / "summary.json").read_text())
    assert sweep.returncode == 0 and summary["status"] == "ok", stderr[-3000:]
    assert summary["metrics"]["resumed_from_step"] == resumed_from
    assert [row["step"] for row in read_metrics(job_dir / "metrics.jsonl")] == list(range(1, STEPS + 1))
    twin = tmp_path / "1"
    assert len((twin / "segments.jsonl").read_text().splitlines()) == 1
    assert _final_manifest(job_dir) == _final_manifest(twin)
    rows = [[_deterministic(r) for r in read_metrics(d / "metrics.jsonl")] for d in (job_dir, twin)]
    assert rows[0] == rows[1]
