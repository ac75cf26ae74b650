"""Resume: 4 steps in one go == 2 steps, then a resume in the same run dir for 2 more (bit for bit).

Also: a damaged or mismatched checkpoint stops the run with one CheckpointError line.
"""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from framework.core.loggers import read_metrics
from tests.conftest import run_cli

pytest.importorskip("jax")
pytestmark = pytest.mark.slow

# The learning recipe with longer completions (more rewarded samples, so real gradients), weight
# decay, and a warmup that spans the resume point: the optimizer step count must be restored too.
RUN = ["recipe=grpo_arithmetic_cpu", "grpo.max_new_tokens=8", "grpo.optimizer.warmup_steps=4",
       "grpo.optimizer.weight_decay=0.1", "grpo.checkpoint.every=2", "grpo.export_hf=true", "progress=false"]
TIMING = ("time_s",)


def run(run_dir, *overrides):
    return run_cli([*RUN, *overrides, f"hydra.run.dir={run_dir}"])


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("resume")
    straight, resumed = root / "straight", root / "resumed"
    for proc in (run(straight, "grpo.steps=4"), run(resumed, "grpo.steps=2"), run(resumed, "grpo.steps=4")):
        assert proc.returncode == 0, proc.stderr[-3000:]
    return straight, resumed


def deterministic(row: dict) -> dict:
    return {k: v for k, v in row.items() if not k.endswith(TIMING) and not k.endswith("_per_s")}


def test_resumed_run_logs_the_same_metrics_step_by_step(runs):
    straight, resumed = (read_metrics(d / "metrics.jsonl") for d in runs)
    assert [r["step"] for r in straight] == [r["step"] for r in resumed] == [1, 2, 3, 4]
    for a, b in zip(straight, resumed):
        assert deterministic(a) == deterministic(b), a["step"]
    # the comparison means something: after the resume the policy still moves, with the warmed-up rate
    assert all(r["grad_norm"] > 0 for r in straight[2:])
    assert straight[2]["learning_rate"] == pytest.approx(0.75e-2)


def test_resumed_run_ends_with_the_same_params(runs):
    from safetensors.numpy import load_file

    straight, resumed = (load_file(d / "hf_export" / "model.safetensors") for d in runs)
    assert straight.keys() == resumed.keys()
    for name in straight:
        np.testing.assert_array_equal(straight[name], resumed[name], err_msg=name)


def test_resume_is_recorded_and_checkpoints_rotate(runs):
    _, resumed = runs
    summary = json.loads((resumed / "summary.json").read_text())
    assert summary["metrics"]["resumed_from_step"] == 2
    assert summary["result"]["artifacts"]["last_checkpoint"] == str(resumed / "checkpoints" / "step_4")
    assert sorted(p.name for p in (resumed / "checkpoints").iterdir()) == ["step_2", "step_4"]
    segments = [json.loads(line) for line in (resumed / "segments.jsonl").read_text().splitlines()]
    assert [(s["resumed_from_step"], s["overrides"][-1]) for s in segments] == [
        (None, "grpo.steps=2"), (2, "grpo.steps=4")]


def one_error_line(proc) -> str:
    assert proc.returncode == 2, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return errors[0]


def test_a_flipped_bit_falls_back_to_the_previous_checkpoint(runs, tmp_path):
    """A changed byte in the latest checkpoint's arrays is caught by the manifest's checksum: the run
    resumes from the checkpoint before it, with a warning, and logs the same metrics as the straight run."""
    run_dir = tmp_path / "flipped"
    shutil.copytree(runs[1], run_dir)
    data = run_dir / "checkpoints" / "step_4" / "state.safetensors"
    raw = bytearray(data.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    data.write_bytes(bytes(raw))
    proc = run(run_dir, "grpo.steps=4")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert f"skipping damaged checkpoint: {data}: checksum mismatch" in proc.stderr
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["metrics"]["resumed_from_step"] == 2
    straight, again = (read_metrics(d / "metrics.jsonl") for d in (runs[0], run_dir))
    assert [deterministic(r) for r in straight] == [deterministic(r) for r in again]


def test_a_changed_setting_is_refused_before_any_record_is_touched(runs, tmp_path):
    run_dir = tmp_path / "other_model"
    shutil.copytree(runs[1], run_dir)
    before = {name: (run_dir / name).read_bytes() for name in ("config.yaml", "summary.json", "metrics.jsonl")}
    line = one_error_line(run(run_dir, "grpo.steps=6", "model.hf_config.intermediate_size=96"))
    assert "saved by a different setup: model.hf_config.intermediate_size (saved 128, now 96)" in line
    assert before == {name: (run_dir / name).read_bytes() for name in before}


def test_a_fresh_start_never_overwrites_checkpoints(runs, tmp_path):
    run_dir = tmp_path / "no_resume"
    shutil.copytree(runs[1], run_dir)
    line = one_error_line(run(run_dir, "grpo.steps=6", "grpo.checkpoint.resume=false"))
    assert "holds checkpoints (latest: step 4) and grpo.checkpoint.resume=false" in line
    assert "grpo.checkpoint.resume=true, or start in a new run dir" in line


def test_resume_conformance_kill_9(tmp_path):
    """kill -9 right after the step-2 checkpoint is published, rerun: the same final checkpoint, byte for byte."""
    from tests.conformance import check_kill_resume

    check_kill_resume(tmp_path, ["recipe=grpo_arithmetic_cpu", "grpo.steps=4", "grpo.checkpoint.every=2",
                                 "grpo.max_new_tokens=2"], kill_after_checkpoint=2)
