"""The xla stack's training kernels (benchmarks/xla_backward.py) on the CPU: the forward + backward bench
computes the gradients jax.grad gives, a tiny run times every node the update trains plus the vocabulary
chunk, the accumulation and the optimizer, and the refitted table's backward ratios are what the
simulator then uses for a training step of the xla stack."""

import json
import math

import pytest

from framework.backends.maxtext.benchmarks import xla_backward
from framework.backends.maxtext.benchmarks.xla_calibrate import hardware_named, model_config
from sims import simulate
from sims.builders import build_graph
from sims.calculator import OP_CLASS
from sims.calibration.backward import BackwardRatios
from sims.calibration.table import load_table
from sims.train_work import TRAIN_BACKWARD_FACTOR


def test_forward_backward_bench_returns_the_forward_and_the_vjp_of_every_floating_input():
    import jax
    import jax.numpy as jnp

    from framework.backends.maxtext.benchmarks.xla_kernels import Bench

    def fn(x, ids, w, table):  # ids: integer, not differentiated; table: a shared array
        return jnp.tanh(x @ w) + table[ids].sum()

    x, w = jnp.arange(6.0).reshape(2, 3) / 10, jnp.ones((3, 2)) / 3
    ids, table = jnp.array([1, 0]), jnp.arange(4.0).reshape(2, 2)
    pair = xla_backward.with_backward(Bench(fn, lambda: (x, ids, w), shared=(table,)))
    *args, cotangent = pair.make_args()
    assert cotangent.shape == (2, 2)
    outputs, grads = pair.fn(*args, cotangent, *pair.shared)
    expected = jax.vjp(lambda x, w, t: fn(x, ids, w, t), x, w, table)[1](cotangent)
    assert jnp.allclose(outputs, fn(x, ids, w, table))
    assert len(grads) == 3 and all(jnp.allclose(g, e) for g, e in zip(grads, expected))


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    """The tiny plan, the refit taking the run's own forward records as the forward calibration."""
    out = tmp_path_factory.mktemp("xla_bwd")
    report = xla_backward.main(["--tiny", "--out", str(out)])
    records = json.loads((out / "train_microbench.json").read_text())
    measured = [r for r in records if r.get("pass") != "backward"]
    base = [r for r in measured if r.get("op_class")]
    (out / "refit").mkdir()
    xla_backward.refit(base, measured, hardware_named("cpu", "cpu", True), "test", out / "refit" / "cpu_xla.json")
    return report, records, out


@pytest.mark.slow
def test_tiny_run_times_every_trained_node_forward_and_backward(tiny_run):
    report, records, _ = tiny_run
    (name, conf_name, workloads, _), = xla_backward.TINY["models"]
    graph = build_graph(model_config(conf_name, None), "train", "xla")
    trained = {n.name for n in graph.nodes if not n.is_comm and OP_CLASS[n.op_type] in xla_backward.TRAINED}
    derived = [r for r in records if r.get("pass") == "backward"]
    assert derived == report["derived_backward"]
    for workload in workloads:
        at = {r["op"] for r in derived if (r["batch"], r["seq_len"]) == (workload["batch"], workload["seq_len"])}
        assert trained - {"lm_head"} <= at
    chunk = xla_backward.TINY["chunk"]
    vocab = {(r["op"], r["batch"], r["seq_len"]) for r in derived if r["op"] in ("lm_head", "cross_entropy")}
    assert vocab == {(op, w["batch"], chunk) for op in ("lm_head", "cross_entropy") for w in workloads}
    assert all(r["forward_us"] > 0 and r["time_us"] > 0 for r in derived)
    update = {r["op"]: r for r in records if r["op"] in ("grad_accumulate", "optimizer_step")}
    assert set(update) == {"grad_accumulate", "optimizer_step"} and update["optimizer_step"]["time_us"] > 0
    assert update["grad_accumulate"]["own_op_only"] and "backward_of" not in update["optimizer_step"]


@pytest.mark.slow
def test_refitted_table_backward_ratios_drive_the_simulated_training_step(tiny_run):
    _, records, out = tiny_run
    table = load_table(out / "refit" / "cpu_xla.json")
    derived = [r for r in records if r.get("pass") == "backward"]
    assert len(table.backward_measurements) == len(derived)
    ratios = BackwardRatios(table.backward_measurements, TRAIN_BACKWARD_FACTOR)
    for r in derived:  # at a measured forward time the ratio is the measured one (one size per op and time)
        same = [d for d in derived if d["op"] == r["op"] and d["forward_us"] == r["forward_us"]]
        if len(same) == 1:
            assert math.isclose(ratios.ratio(r["op"], r["op_class"], r["forward_us"] * 1e-6),
                                r["time_us"] / r["forward_us"])
    hf_config = model_config("tiny_qwen2", None)
    hardware = hardware_named("cpu", "cpu", True)
    workload = {"mode": "train", "batch": 2, "seq_len": 32, "dtype": "fp32"}
    measured = simulate(hf_config, {**hardware, "efficiency_table": str(out / "refit" / "cpu_xla.json")},
                        {"tp": 1}, workload, stack="xla")
    flat = out / "flat.json"  # the same table without its backward measurements: 2x forward
    flat.write_text(json.dumps({k: v for k, v in json.loads((out / "refit" / "cpu_xla.json").read_text()).items()
                                if k != "backward_measurements"}))
    doubled = simulate(hf_config, {**hardware, "efficiency_table": str(flat)}, {"tp": 1}, workload, stack="xla")
    assert measured.status == doubled.status == "ok" and measured.latency_s != doubled.latency_s
    rows = {row["name"]: row for row in measured.breakdown_rows()}
    for name, row in ((n, r) for n, r in rows.items() if n in ("qkv_proj", "attention", "mlp_down_proj")):
        flat_row = next(r for r in doubled.breakdown_rows() if r["name"] == name)
        forward_s = flat_row["time_s"] / (1 + TRAIN_BACKWARD_FACTOR) / row["count"]  # one execution's forward
        ratio = ratios.ratio(name, OP_CLASS[row["op_type"]], forward_s)
        assert ratio != TRAIN_BACKWARD_FACTOR
        assert math.isclose(row["time_s"], row["count"] * forward_s * (1 + ratio), rel_tol=1e-9)


def test_a_vocabulary_head_that_fails_to_build_keeps_the_layers_records_and_each_batch_is_timed_once(monkeypatch):
    # as a layer's kernel (time_pair): one failure logged, the run's other records kept; the head's chunk is
    # [batch, chunk] whatever the sequence length, so two workloads of one batch time it once
    from framework.backends.maxtext.benchmarks.xla_calibrate import timing_session

    calls, lines = [], []

    def chunk_records(kernels, hf_config, hardware, b, *args):
        calls.append(b)
        if len(calls) > 1:
            raise RuntimeError("RESOURCE_EXHAUSTED: out of memory")
        return [{"op": "lm_head", "batch": b}]

    monkeypatch.setattr(xla_backward, "chunk_records", chunk_records)
    _, hardware, timer = timing_session(None, xla_backward.TINY, lines.append)
    workloads = (xla_backward.train(2, 16), xla_backward.train(2, 8), xla_backward.train(1, 16))
    records = xla_backward.measure("tiny", model_config("tiny_qwen2", None), hardware, xla_backward.TINY, workloads,
                                   timer, "cpu", lines.append, math.inf, update=False)
    assert calls == [2, 1]
    assert [r for r in records if r["op"] == "lm_head"] == [{"op": "lm_head", "batch": 2}]
    assert any(r["op"] == "attention" for r in records)
    assert [line for line in lines if "FAILED" in line] == [
        "lm_head/cross_entropy 1x8 FAILED: RuntimeError: RESOURCE_EXHAUSTED: out of memory"]


@pytest.mark.parametrize("spec", ["llama3_2_1b", "llama3_2_1b:", "llama3_2_1b:64,x", "llama3_2_1b:0", "llama3_2_1:64"])
def test_models_is_checked_before_any_timing(spec, capsys):
    # a spec without ':' or with a non-number was a traceback after the session began; a misspelt model failed
    # only once the models before it were timed
    with pytest.raises(SystemExit) as refused:
        xla_backward.main(["--out", "/nonexistent/never", "--models", "qwen3_8b:16", spec])
    assert refused.value.code == 2
    assert f"argument --models: {spec!r}: valid: CONF:B,B, a conf/model name and micro-batches >= 1" in (
        capsys.readouterr().err)


def test_models_names_the_plan():
    parsed = xla_backward._model_batches("llama3_2_1b:64,16")
    assert parsed == ("llama3_2_1b", "llama3_2_1b", (xla_backward.train(64, 512), xla_backward.train(16, 512)), False)
