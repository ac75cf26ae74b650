"""GRPO under faults (issue 11): SIGTERM/SIGINT checkpoint at the step boundary and resume; a non-finite loss
stops the run with the last good checkpoint kept."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from framework.core.loggers import read_metrics
from tests.conftest import REPO_ROOT, run_cli

pytest.importorskip("jax")
pytestmark = pytest.mark.slow

RUN = ["recipe=grpo_arithmetic_cpu", "progress=false", "grpo.export_hf=false"]


def checkpoints(run_dir):
    root = run_dir / "checkpoints"
    return sorted(int(p.name.split("_")[1]) for p in root.iterdir() if p.name.startswith("step_")) if root.is_dir() else []


@pytest.mark.parametrize("name,code", [("SIGTERM", 143), ("SIGINT", 130)])
def test_a_signal_checkpoints_at_the_step_boundary_and_the_run_resumes(tmp_path, name, code):
    args = [sys.executable, str(REPO_ROOT / "run.py"), *RUN, "grpo.steps=200", "grpo.checkpoint.every=500",
            f"hydra.run.dir={tmp_path}"]
    proc = subprocess.Popen(args, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 600
    while not read_metrics(tmp_path / "metrics.jsonl"):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-3000:]
        time.sleep(0.2)
    proc.send_signal(getattr(signal, name))
    _, stderr = proc.communicate(timeout=600)
    assert proc.returncode == code, stderr[-3000:]
    errors = [line for line in stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and errors[0].startswith(f"error: interrupted by {name}; ") and "Traceback" not in stderr
    summary = json.loads((tmp_path / "summary.json").read_text())
    stopped = summary["metrics"]["steps_completed"]
    assert summary["status"] == "interrupted" and checkpoints(tmp_path) == [stopped]
    assert [row["step"] for row in read_metrics(tmp_path / "metrics.jsonl")] == list(range(1, stopped + 1))

    resumed = run_cli([*RUN, f"grpo.steps={stopped + 1}", "grpo.checkpoint.every=500", f"hydra.run.dir={tmp_path}"])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["metrics"]["resumed_from_step"] == stopped


def test_a_non_finite_loss_fails_the_run_and_keeps_the_last_good_checkpoint(tmp_path):
    proc = run_cli([*RUN, "grpo.max_new_tokens=8", "grpo.optimizer.learning_rate=1e30",
                    "grpo.optimizer.max_grad_norm=0", "grpo.steps=4", "grpo.checkpoint.every=1",
                    f"hydra.run.dir={tmp_path}"])
    assert proc.returncode == 1, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "(non-finite); stopped before saving it" in errors[0], proc.stderr[-2000:]
    bad_step = int(errors[0].split("step ")[1].split(":")[0])
    assert checkpoints(tmp_path) == list(range(1, bad_step))[-2:]  # keep=2 of the good ones
    assert json.loads((tmp_path / "summary.json").read_text())["status"] == "failed"
    assert all(row["step"] < bad_step for row in read_metrics(tmp_path / "metrics.jsonl"))
