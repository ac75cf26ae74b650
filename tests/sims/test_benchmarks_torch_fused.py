"""The torch_fused accuracy script for real on this CPU: calibrate + whole steps at tp=1, the same
under torchrun at tp=2 (gloo), and a refit that reproduces the predictions."""

import json
import os
import subprocess
import sys

import pytest
from sims_helpers import REPO

pytest.importorskip("torch")
pytest.importorskip("transformers")


def run(*args):
    done = subprocess.run([sys.executable, *args], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]


def test_tp1_calibrates_measures_and_refits(tmp_path):
    run("-m", "sims.benchmarks.torch_fused", "--tiny", "--out", str(tmp_path / "a"))
    report = json.loads((tmp_path / "a" / "accuracy_tp1.json").read_text())
    table = json.loads((tmp_path / "a" / "cpu_torch_fused.json").read_text())
    assert report["stack"] == table["stack"] == "torch_fused" and table["gemm_measurements"]
    assert "input_layernorm_residual_add" in {m["op"] for m in table["op_measurements"]}
    assert {c["workload"]["mode"] for c in report["cases"]} == {"prefill", "decode"}
    assert all(c["time_us"] > 0 and "error_default" in c and "error_calibrated" in c for c in report["cases"])
    run("-m", "sims.benchmarks.torch_fused", "--refit", str(tmp_path / "a"), "--out", str(tmp_path / "b"))
    again = json.loads((tmp_path / "b" / "accuracy_tp1.json").read_text())
    for before, after in zip(report["cases"], again["cases"]):
        assert after["predicted_calibrated_us"] == pytest.approx(before["predicted_calibrated_us"])
        assert after["predicted_default_us"] == pytest.approx(before["predicted_default_us"])


@pytest.mark.slow
def test_tp2_under_torchrun(tmp_path):
    run("-m", "torch.distributed.run", "--nproc_per_node", "2", "-m", "sims.benchmarks.torch_fused", "--tiny",
        "--out", str(tmp_path))
    report = json.loads((tmp_path / "accuracy_tp2.json").read_text())
    assert {c["tp"] for c in report["cases"]} == {2} and all(c["time_us"] > 0 for c in report["cases"])
    assert "calibrated" not in report["summary"]  # no table given, none fitted at tp > 1


@pytest.mark.slow
@pytest.mark.parametrize("ranks", [1, 2])
def test_expert_parallel_block_matches_a_per_token_reference(ranks):
    env = {**os.environ, "PYTHONPATH": str(REPO)}  # a script's own folder comes first on sys.path, not the repo
    done = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(ranks),
                           "tests/sims/moe_ep_check.py"], cwd=REPO, capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0 and "moe ep check ok" in done.stdout, done.stderr[-3000:]


@pytest.mark.slow
def test_moe_ep2_under_torchrun(tmp_path):
    run("-m", "torch.distributed.run", "--nproc_per_node", "2", "-m", "sims.benchmarks.torch_fused", "--tiny",
        "--moe", "--out", str(tmp_path))
    report = json.loads((tmp_path / "accuracy_ep2.json").read_text())
    assert {(c["tp"], c["ep"]) for c in report["cases"]} == {(1, 2)} and all(c["time_us"] > 0 for c in report["cases"])
