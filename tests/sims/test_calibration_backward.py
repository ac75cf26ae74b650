"""The `backward` micro-benchmarks and the training-step benchmark for real, with torch on this CPU
(tiny models): every train-graph node gets a backward measurement, the fitted table changes training
predictions, and sims.benchmarks.train_steps --tiny writes its report."""

import json
import subprocess
from dataclasses import replace
import sys

import pytest
from sims_helpers import REPO, hardware, model_config

from sims import build_graph, simulate
from sims.calibration.fit import fit_table
from sims.calibration.microbench import QUICK_TRAIN_WORKLOADS, Plan, measure
from sims.calibration.table import save_table

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

PLAN = Plan((), ("backward",), dtype="fp32", warmup=0, repeats=1, train_workloads=QUICK_TRAIN_WORKLOADS[:1])


@pytest.mark.parametrize("stack", ["torch_fused", "transformers"])
def test_every_train_node_has_a_backward_measurement(stack, tmp_path):
    cfg = model_config("tiny_llama")
    measurements = measure(cfg, hardware("cpu"), replace(PLAN, stack=stack), "cpu")
    backward = {m["op"]: m for m in measurements if m.get("pass") == "backward"}
    nodes = {node.name for node in build_graph(cfg, "train", stack).nodes if not node.is_comm}
    assert set(backward) == nodes | {"cross_entropy"}
    assert all(m["time_us"] > 0 and m["forward_us"] > 0 for m in backward.values())
    update = {m["benchmark"]: m for m in measurements if m["benchmark"] in ("optimizer_step", "grad_accumulate")}
    assert update["optimizer_step"]["params"] == update["grad_accumulate"]["params"] > 0
    table = fit_table(measurements, hardware("cpu"), stack=stack)
    assert {m.op for m in table.backward_measurements} == set(backward)
    path = tmp_path / "table.json"
    save_table(table, path)
    train = {"mode": "train", "batch": 2, "seq_len": 16, "microbatches": 2, "dtype": "fp32"}
    calibrated = simulate(cfg, hardware("cpu", efficiency_table=str(path)), {}, train, stack=stack)
    rows = {r["name"]: r for r in calibrated.breakdown_rows()}
    assert {"cross_entropy", "grad_accumulate", "optimizer_step"} <= set(rows)
    assert calibrated.latency_s > 0


@pytest.mark.slow
def test_train_steps_tiny_writes_measured_and_predicted_steps(tmp_path):
    out = tmp_path / "train"
    subprocess.run([sys.executable, "-m", "sims.benchmarks.train_steps", "--tiny", "--out", str(out)], cwd=REPO,
                   check=True, capture_output=True, timeout=300)
    report = json.loads((out / "train_steps.json").read_text())
    assert report["stacks"] == ["torch_fused", "transformers"]
    assert report["labels"] == ["shipped", "calibrated"]
    for case in report["cases"]:
        assert case["time_us"] > 0 and case["held_out"]
        assert case["predicted_calibrated_us"] > 0 and "cross_entropy" in case["breakdown_ms"]
    assert (out / "train_steps.md").read_text().startswith("| step (held out) |")
    assert json.loads((out / "cpu_torch_fused_train.json").read_text())["backward_measurements"]
    again = tmp_path / "again"
    subprocess.run([sys.executable, "-m", "sims.benchmarks.train_steps", "--refit", str(out), "--out", str(again)],
                   cwd=REPO, check=True, capture_output=True, timeout=300)
    refit = json.loads((again / "train_steps.json").read_text())
    assert [c["predicted_calibrated_us"] for c in refit["cases"]] == pytest.approx(
        [c["predicted_calibrated_us"] for c in report["cases"]])


@pytest.mark.parametrize("stack", ["torch_fused", "transformers"])
def test_a_bench_whose_weights_sit_in_a_closure_still_times_their_gradients(stack):
    """qk_norm's weights are no argument of its callable: the backward must still produce their gradients
    (as the router's and the grouped GEMMs' weights, passed the same way)."""
    from sims.calibration.kernels import HFKernels
    from sims.calibration.kernels_backward import with_backward
    from sims.calibration.kernels_fused import FusedTorchKernels

    kernels = (FusedTorchKernels if stack == "torch_fused" else HFKernels)(model_config("tiny_qwen3"), "cpu", "fp32")
    node = next(n for n in build_graph(model_config("tiny_qwen3"), "train", stack).nodes if n.name == "qk_norm")
    bench = kernels.bench(node, {"batch": 2, "seq_len": 8, "tokens": 16, "kv_len": 8, "logit_tokens": 16})
    assert bench.params
    args, leaves, grads = with_backward(bench).make_args()
    gradients = with_backward(bench).fn(args, leaves, grads)
    assert all(g is not None for g in gradients[-len(bench.params):])
