"""The micro-benchmarks for real, with torch and transformers on this CPU (tiny models, seconds):
every IR node maps to transformers' kernels of the node's shapes, measurements carry the
simulator's own FLOPs and bytes, and the fitted table changes the simulator's answers."""

import json
import subprocess
import sys

import pytest
from sims_helpers import REPO, hardware, model_config

from sims import build_graph, predict_op, simulate
from sims.calculator import bind_dims
from sims.calibration.fit import fit_table
from sims.calibration.microbench import (
    QUICK_ATTENTION_GRID,
    QUICK_PREFILL_GRID,
    QUICK_WORKLOADS,
    Plan,
    derive_moe_shuffles,
    measure,
)
from sims.calibration.table import save_table
from sims.calibration.timing import rotations, time_call
from sims.workload import Layout, parse_workload

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

TINY_MOE = {
    "architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 64,
    "intermediate_size": 128, "moe_intermediate_size": 32, "num_experts": 8, "num_experts_per_tok": 2,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
    "vocab_size": 512, "norm_topk_prob": True, "tie_word_embeddings": False,
}
PLAN = Plan(QUICK_WORKLOADS, dtype="fp32", warmup=0, repeats=1, copy_mb=1, attention_grid=QUICK_ATTENTION_GRID,
            prefill_grid=QUICK_PREFILL_GRID)


@pytest.fixture(scope="module")
def dense_measurements():
    return measure(model_config("tiny_qwen3"), hardware("cpu"), PLAN, "cpu")


@pytest.fixture(scope="module")
def moe_measurements():
    return measure(TINY_MOE, hardware("cpu"), PLAN, "cpu")


def workload_of(m: dict) -> dict:
    length = {"context_len": m["kv_len"]} if m["mode"] == "decode" else {"seq_len": m["seq_len"]}
    return {"mode": m["mode"], "batch": m["batch"], "dtype": m["dtype"], **length}


def test_every_compute_node_of_a_dense_model_is_timed(dense_measurements):
    cfg = model_config("tiny_qwen3")
    nodes = {n.name for mode in ("prefill", "decode") for n in build_graph(cfg, mode).nodes if not n.is_comm}
    assert {m["op"] for m in dense_measurements if m.get("op")} == nodes
    assert {"copy", "launch", "launch_mixed"} <= {m["benchmark"] for m in dense_measurements}
    assert all(m["time_us"] > 0 and m["timing"] == "cpu" for m in dense_measurements)


def test_the_torch_fused_stack_times_its_own_kernels_and_tags_its_table():
    cfg = model_config("tiny_qwen3")
    plan = Plan(QUICK_WORKLOADS[:1], dtype="fp32", warmup=0, repeats=1, copy_mb=1, stack="torch_fused",
                benchmarks=("gemm", "norm", "elementwise", "attention"), attention_grid=QUICK_ATTENTION_GRID,
                prefill_grid=QUICK_PREFILL_GRID)
    measured = measure(cfg, hardware("cpu"), plan, "cpu")
    nodes = {n.name for n in build_graph(cfg, "prefill", "torch_fused").nodes if not n.is_comm}
    assert {m["op"] for m in measured if m.get("op")} == nodes - {"embed_tokens"}
    qkv = next(m for m in measured if m.get("op") == "qkv_proj")
    assert (qkv["m"], qkv["n"], qkv["k"]) == (16, (4 + 2 * 2) * 16, 64)
    add = next(m for m in measured if m.get("op") == "input_layernorm_residual_add")
    work = predict_op(cfg, hardware("cpu"), workload_of(add), add["op"], stack="torch_fused")
    assert (add["flops"], add["bytes"]) == (work["flops"], work["bytes"])
    assert fit_table(measured, hardware("cpu"), stack="torch_fused").stack == "torch_fused"


def test_measurements_carry_the_simulators_flops_and_bytes(dense_measurements):
    cfg = model_config("tiny_qwen3")
    for m in (m for m in dense_measurements if m.get("op")):
        work = predict_op(cfg, hardware("cpu"), workload_of(m), m["op"])
        assert (m["flops"], m["bytes"], m["op_class"]) == (work["flops"], work["bytes"], work["op_class"]), m


def test_gemm_measurements_have_the_models_shapes(dense_measurements):
    gemms = {(m["op"], m["tokens"], m["batch"]): (m["m"], m["n"], m["k"]) for m in dense_measurements if "m" in m}
    assert gemms[("q_proj", 16, 1)] == (16, 4 * 16, 64)
    assert gemms[("kv_proj", 16, 1)] == (16, 2 * 2 * 16, 64)
    assert gemms[("mlp_gate_up_proj", 128, 2)] == (128, 2 * 128, 64)
    assert gemms[("lm_head", 128, 2)] == (2, 512, 64)  # the last token of each sequence


def test_each_nodes_kernels_produce_the_nodes_output(dense_measurements):
    """Shapes bound from the workload reach transformers' kernels: outputs match the IR node's size."""
    from sims.calibration.kernels import HFKernels

    kernels = HFKernels(TINY_MOE, "cpu", "fp32")
    for workload in QUICK_WORKLOADS:
        parsed = parse_workload({**workload, "dtype": "fp32"})
        graph = build_graph(TINY_MOE, parsed.mode)
        dims = bind_dims(graph, Layout(), parsed)
        for node in graph.nodes:
            bench = kernels.bench(node, dims)
            if bench is None or node.name in ("router", "kv_cache_write"):  # tuple of three / in place
                continue
            expected = dims["logit_tokens"] * node.outputs[0][-1] if node.name == "lm_head" else None
            if expected is None:
                expected = 1
                for d in node.outputs[0]:
                    expected *= dims[d] if isinstance(d, str) else d
            assert sum(t.numel() for t in flatten(bench.fn(*bench.make_args()))) == expected, node.name


def flatten(output):
    if isinstance(output, (list, tuple)):
        return [t for item in output for t in flatten(item)]
    return [output]


def test_moe_nodes_are_timed_and_the_experts_module_is_split(moe_measurements):
    ops = {m["op"] for m in moe_measurements if m.get("op")}
    assert {"router", "experts_gate_up", "experts_act", "experts_down", "moe_permute", "moe_unpermute"} <= ops
    blocks = [m for m in moe_measurements if m["benchmark"] == "moe_block"]
    assert {b["tokens"] for b in blocks} == {16, 128, 2}
    for block in blocks:
        parts = {m["op"]: m["time_us"] for m in moe_measurements if m.get("op") and m["tokens"] == block["tokens"]}
        inner = parts["experts_gate_up"] + parts["experts_act"] + parts["experts_down"]
        shuffles = parts["moe_permute"] + parts["moe_unpermute"]
        assert shuffles == pytest.approx(max(block["time_us"] - inner, 0.01 * block["time_us"]))


def test_torch_fused_moe_block_and_router_are_the_plain_torch_ones_and_compute_the_moe():
    """The torch_fused block (index_select, grouped GEMMs, weighted index_add_) gives transformers' experts
    module's output for the same routing; its router is linear + top-k + softmax."""
    from sims.calibration.kernels_fused import FusedTorchKernels

    kernels = FusedTorchKernels(TINY_MOE, "cpu", "fp32")
    for weights in (kernels.experts.gate_up_proj, kernels.experts.down_proj):
        weights.data.normal_(0.0, 0.1)
    torch.manual_seed(0)
    block = kernels.moe_block(12)
    x, pair_token, pair_weights, offsets = block.make_args()
    counts = torch.diff(offsets, prepend=offsets.new_zeros(1)).long()
    expert_of_pair = torch.repeat_interleave(torch.arange(8), counts)  # copies are in expert order
    index, weights, slot = torch.zeros(12, 2, dtype=torch.long), torch.zeros(12, 2), [0] * 12
    for p, token in enumerate(pair_token.tolist()):  # back to (token, choice) -> expert, weight
        index[token, slot[token]], weights[token, slot[token]] = expert_of_pair[p], pair_weights[p]
        slot[token] += 1
    assert slot == [2] * 12
    expected = kernels.experts(x, index, weights)
    assert torch.allclose(block.fn(x, pair_token, pair_weights, offsets), expected, atol=1e-5)
    route = kernels.bench(build_graph(TINY_MOE, "prefill").node("router"), {"tokens": 5, "batch": 1, "seq_len": 5})
    probabilities, chosen = route.fn(*route.make_args())
    assert chosen.shape == (5, 2) and torch.allclose(probabilities.sum(-1), torch.ones(5))


def test_moe_shuffles_split_the_rest_of_the_block_by_bytes():
    point = {"mode": "prefill", "batch": 1, "seq_len": 4, "kv_len": 4, "tokens": 4, "dtype": "bf16"}
    parts = [{"benchmark": op, "op": op, **point, "time_us": t}
             for op, t in (("experts_gate_up", 10.0), ("experts_act", 2.0), ("experts_down", 8.0))]
    block = {"benchmark": "moe_block", **point, "time_us": 50.0, "timing": "cpu",
             "parts": {"moe_permute": {"flops": 0.0, "bytes": 300.0}, "moe_unpermute": {"flops": 8.0, "bytes": 100.0}}}
    derived = {m["op"]: m for m in derive_moe_shuffles(parts + [block])}
    assert derived["moe_permute"]["time_us"] == pytest.approx(30.0 * 0.75)
    assert derived["moe_unpermute"]["time_us"] == pytest.approx(30.0 * 0.25)
    assert derived["moe_unpermute"]["flops"] == 8.0 and derived["moe_unpermute"]["op_class"] == "elementwise"
    faster = derive_moe_shuffles(parts + [{**block, "time_us": 19.0}])  # noise: the block beat its parts
    assert sum(m["time_us"] for m in faster) == pytest.approx(0.19)


def test_the_fitted_table_changes_the_simulators_answers(dense_measurements, tmp_path):
    cpu = hardware("cpu")
    table = fit_table(dense_measurements, cpu)
    assert table.op_measurements and table.gemm_measurements and "rotary" in table.ops
    save_table(table, tmp_path / "cpu.json")
    workload = {"mode": "decode", "batch": 2, "context_len": 64, "dtype": "fp32"}
    default = simulate(model_config("tiny_qwen3"), cpu, {}, workload)
    with_table = {**cpu, "efficiency_table": str(tmp_path / "cpu.json")}
    calibrated = simulate(model_config("tiny_qwen3"), with_table, {}, workload)
    assert calibrated.latency_s != default.latency_s
    # at a measured workload each node's time is its measurement
    rotary = next(m for m in dense_measurements if m.get("op") == "rotary" and m["mode"] == "decode")
    assert next(r for r in calibrated.breakdown_rows() if r["name"] == "rotary")["time_s"] == pytest.approx(
        2 * max(rotary["time_us"], table.ops["rotary"].floor_us) * 1e-6)


def test_decode_attention_is_measured_on_a_grid_and_fitted_as_a_surface(dense_measurements, tmp_path):
    decode = {(m["batch"], m["kv_len"]) for m in dense_measurements if m.get("op") == "attention" and m["mode"] == "decode"}
    assert set(QUICK_ATTENTION_GRID) <= decode
    table = fit_table(dense_measurements, hardware("cpu"))
    on_surface = {(m.batch, m.kv_len) for m in table.op_measurements if m.op == "attention" and m.kv_len}
    assert on_surface == decode
    save_table(table, tmp_path / "cpu.json")
    calibrated = {**hardware("cpu"), "efficiency_table": str(tmp_path / "cpu.json")}
    grid = [m for m in dense_measurements
            if m.get("op") == "attention" and m["mode"] == "decode" and (m["batch"], m["kv_len"]) in QUICK_ATTENTION_GRID]
    corner = next(m for m in grid if (m["batch"], m["kv_len"]) == (2, 48))
    got = predict_op(model_config("tiny_qwen3"), calibrated, workload_of(corner), "attention")
    slowest = max(m["time_us"] for m in grid)  # the largest point, lifted to any slower smaller one
    assert got["time_s"] == pytest.approx(max(slowest, table.op_classes["attention"].floor_us) * 1e-6)


def test_prefill_attention_is_measured_on_a_grid_and_fitted_as_a_surface(dense_measurements, tmp_path):
    prefill = {(m["batch"], m["seq_len"]) for m in dense_measurements if m.get("op") == "attention" and m["mode"] == "prefill"}
    assert set(QUICK_PREFILL_GRID) <= prefill
    table = fit_table(dense_measurements, hardware("cpu"))
    assert {(m.batch, m.seq_len) for m in table.op_measurements if m.op == "attention" and m.seq_len} == prefill
    save_table(table, tmp_path / "cpu.json")
    calibrated = {**hardware("cpu"), "efficiency_table": str(tmp_path / "cpu.json")}
    grid = [m for m in dense_measurements if m.get("op") == "attention" and m["mode"] == "prefill"
            and (m["batch"], m["seq_len"]) in QUICK_PREFILL_GRID]
    corner = max(grid, key=lambda m: (m["batch"], m["seq_len"]))
    got = predict_op(model_config("tiny_qwen3"), calibrated, workload_of(corner), "attention")
    slowest = max(m["time_us"] for m in grid)  # the largest point, lifted to any slower smaller one
    assert got["time_s"] == pytest.approx(max(slowest, table.op_classes["attention"].floor_us) * 1e-6)


def test_fp8_gemms_are_timed_and_serve_fp8_workloads(tmp_path):
    cfg, h100 = model_config("tiny_qwen3"), hardware("h100")  # a card with an fp8 peak; timed on this CPU
    plan = Plan(QUICK_WORKLOADS[:1], dtype="fp32", warmup=0, repeats=1, benchmarks=("gemm",), fp8_gemms=True)
    measured = measure(cfg, h100, plan, "cpu")
    fp8 = {m["op"]: m for m in measured if m["dtype"] == "fp8"}
    assert set(fp8) == {"q_proj", "kv_proj", "o_proj", "mlp_gate_up_proj", "mlp_down_proj", "lm_head"}
    workload = {"mode": "prefill", "batch": 1, "seq_len": 16, "dtype": "fp8"}
    assert fp8["q_proj"]["bytes"] == predict_op(cfg, h100, workload, "q_proj")["bytes"]
    table = fit_table([fp8["q_proj"]], h100)  # one fp8 shape: the query at that shape is exact
    assert {g.dtype for g in fit_table(measured, h100).gemm_measurements} == {"fp32", "fp8"}
    save_table(table, tmp_path / "t.json")
    calibrated = {**h100, "efficiency_table": str(tmp_path / "t.json")}
    got = predict_op(cfg, calibrated, workload, "q_proj")["time_s"]
    assert got == pytest.approx(max(fp8["q_proj"]["time_us"], table.op_classes["gemm"].floor_us) * 1e-6)


def test_cpu_timing_and_rotation():
    timing = time_call(lambda x: x + 1, [(torch.ones(4),)], "cpu", warmup=1, repeats=3)
    assert timing.mode == "cpu" and timing.time_us > 0
    assert rotations(1e3, "cpu") == 1
    assert rotations(10 * 2**20, "cuda", cache_bytes=50 * 2**20) == 10
    assert rotations(1e3, "cuda", cache_bytes=50 * 2**20) == 32  # capped


def test_accuracy_benchmark_runs_tiny_and_refits_to_the_same_answers(tmp_path):
    run = [sys.executable, "-m", "sims.benchmarks.accuracy", "--tiny", "--repeats", "1"]
    measured = subprocess.run([*run, "--out", str(tmp_path / "a")], cwd=REPO, capture_output=True, text=True)
    assert measured.returncode == 0, measured.stderr[-2000:]
    report = json.loads((tmp_path / "a" / "accuracy.json").read_text())
    cases = report["cases"]
    assert len(cases) >= 20 and all("error_calibrated" in c for c in cases), report["summary"]["failed"]
    assert {c["kind"] for c in cases} == {"gemm", "attention", "moe_block", "model"}
    assert report["summary"]["calibrated"]["all"]["cases"] == sum(c["held_out"] for c in cases)
    refit = subprocess.run([*run, "--refit", str(tmp_path / "a"), "--out", str(tmp_path / "b")], cwd=REPO,
                           capture_output=True, text=True)
    assert refit.returncode == 0, refit.stderr[-2000:]
    again = json.loads((tmp_path / "b" / "accuracy.json").read_text())["cases"]
    assert [c["predicted_calibrated_us"] for c in again] == pytest.approx([c["predicted_calibrated_us"] for c in cases])
