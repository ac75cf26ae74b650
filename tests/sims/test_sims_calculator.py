"""FLOPs, bytes, times and collectives against hand-computed values."""

import json

import pytest
from sims_helpers import hardware, model_config

from sims import build_graph, simulate
from sims.calculator import (
    Context,
    all_gather_s,
    all_reduce_s,
    all_to_all_s,
    op_cost,
)
from sims.calibration.gemm_interpolate import GemmInterpolator
from sims.calibration.table import GemmMeasurement
from sims.hardware import hardware_spec
from sims.step import estimate_step, pipeline_time_s
from sims.partition import stage_layer_bounds
from sims.workload import parse_layout, parse_workload

H100_BF16 = 989.4e12
H100_HBM = 3.35e12


def table_file(tmp_path, **sections) -> str:
    path = tmp_path / "table.json"
    path.write_text(json.dumps(sections))
    return str(path)


def cost(model, node_name, layout, workload, hw=None):
    workload = parse_workload(workload)
    graph = build_graph(model_config(model), workload.mode)
    ctx = Context.for_step(graph, hardware_spec(hw or hardware("h100")), parse_layout(layout), workload)
    return op_cost(graph.node(node_name), ctx)


def row(result, name):
    rows = result.breakdown_rows() if hasattr(result, "breakdown_rows") else result.rows
    return next(r for r in rows if r["name"] == name)


PREFILL = {"mode": "prefill", "batch": 2, "seq_len": 128}


def test_gemm_flops_and_bytes_by_hand():
    tokens = 2 * 128
    q = cost("qwen3_8b", "q_proj", {}, PREFILL)
    assert q.flops == 2 * tokens * 4096 * 4096
    assert q.bytes == (tokens * 4096 + tokens * 4096) * 2 + 4096 * 4096 * 2
    column = cost("qwen3_8b", "q_proj", {"tp": 4}, PREFILL)  # output split
    assert column.flops == 2 * tokens * 4096 * 4096 / 4
    assert column.bytes == (tokens * 4096 + tokens * 1024) * 2 + 4096 * 1024 * 2
    row_parallel = cost("qwen3_8b", "o_proj", {"tp": 4}, PREFILL)  # input split
    assert row_parallel.bytes == (tokens * 1024 + tokens * 4096) * 2 + 1024 * 4096 * 2


def test_kv_projection_stops_splitting_at_kv_heads():
    tokens = 2 * 128
    kv = cost("qwen3_235b_a22b", "kv_proj", {"tp": 8}, PREFILL)  # 4 kv heads: each on 2 of the 8 ranks
    assert kv.flops == 2 * tokens * 4096 * (2 * 4 * 128) / 4


def test_time_is_roofline_with_class_efficiency_plus_floor(tmp_path):
    table = table_file(tmp_path, op_classes={"gemm": {"compute": 0.5, "memory": 0.25, "floor_us": 3.0}})
    hw = hardware("h100", efficiency_table=table)
    big = cost("qwen3_8b", "q_proj", {}, {"mode": "prefill", "batch": 8, "seq_len": 2048}, hw)
    assert big.bound == "compute"
    assert big.time_s == pytest.approx(big.flops / (H100_BF16 * 0.5) + 3e-6, rel=1e-12)
    small = cost("qwen3_8b", "q_proj", {}, {"mode": "decode", "batch": 1, "context_len": 64}, hw)
    assert small.bound == "memory"
    assert small.time_s == pytest.approx(small.bytes / (H100_HBM * 0.25) + 3e-6, rel=1e-12)
    tiny = cost("qwen2_5_0_5b_instruct", "rotary", {}, {"mode": "decode", "context_len": 8}, hw)
    assert tiny.bound == "floor"  # a few hundred bytes: launch-bound


def test_attention_flops_causal_prefill_and_decode():
    prefill = cost("qwen3_8b", "attention", {}, {"mode": "prefill", "batch": 1, "seq_len": 1024})
    pairs = 1024 * 1025 / 2  # causal: token i sees i+1 keys
    assert prefill.flops == 2 * pairs * 32 * (128 + 128)
    decode = cost("qwen3_8b", "attention", {}, {"mode": "decode", "batch": 4, "context_len": 1000})
    assert decode.flops == 2 * 4 * 1000 * 32 * (128 + 128)
    # q and output for 32 heads, K and V for 8 kv heads over the context (the KV cache read).
    assert decode.bytes == 2 * 4 * (32 * 256 + 1000 * 8 * 256)


def test_mla_decode_attention_reads_the_whole_latent_on_every_tp_rank():
    decode = {"mode": "decode", "batch": 2, "context_len": 4096}
    tp8 = cost("deepseek_v3", "attention", {"tp": 8}, decode)
    heads = 128 / 8
    assert tp8.flops == 2 * 2 * 4096 * heads * (576 + 512)
    assert tp8.bytes == 2 * 2 * (heads * (576 + 512) + 4096 * 576)


def test_moe_weight_traffic_counts_only_touched_experts():
    one_token = cost("qwen3_30b_a3b", "experts_gate_up", {}, {"mode": "decode", "batch": 1, "context_len": 16})
    pairs = 8  # one token, top-8
    assert one_token.flops == 2 * pairs * 2048 * 1536
    assert one_token.bytes == pytest.approx(pairs * (2048 + 1536) * 2 + 8 * 2048 * 1536 * 2, rel=1e-9)
    many = cost("qwen3_30b_a3b", "experts_gate_up", {}, {"mode": "prefill", "batch": 8, "seq_len": 4096})
    all_weights = 128 * 2048 * 1536 * 2
    assert many.bytes - 8 * 4096 * 8 * (2048 + 1536) * 2 == pytest.approx(all_weights, rel=1e-6)


def test_ep_splits_experts_and_tokens():
    decode = {"mode": "decode", "batch": 64, "context_len": 16}
    ep1 = cost("qwen3_30b_a3b", "experts_down", {"tp": 8}, decode)
    ep8 = cost("qwen3_30b_a3b", "experts_down", {"tp": 8, "ep": 8}, decode)
    assert ep1.flops == ep8.flops == 2 * 64 * 8 * 768 * 2048 / 8


def test_collective_formulas(tmp_path):
    exact = table_file(
        tmp_path,
        links={"intra_node": {"bandwidth": 1.0, "latency_us": 0}, "inter_node": {"bandwidth": 1.0, "latency_us": 0}},
    )
    hw = hardware_spec(hardware("h100", nodes=2, efficiency_table=exact))
    assert all_reduce_s(1e9, 8, hw) == pytest.approx(2 * 7 / 8 * 1e9 / 450e9)
    assert all_reduce_s(1e9, 16, hw) == pytest.approx(2 * 15 / 16 * 1e9 / 50e9)  # spans 2 nodes
    assert all_gather_s(1e9, 4, hw) == pytest.approx(3 / 4 * 1e9 / 450e9)
    assert all_to_all_s(1e9, 8, hw) == pytest.approx(7 / 8 * 1e9 / 450e9)
    assert all_reduce_s(1e9, 1, hw) == 0.0
    default = hardware_spec(hardware("h100"))  # bandwidth 0.75, latency 10 us
    assert all_reduce_s(1e9, 8, default) == pytest.approx(2 * 7 / 8 * 1e9 / (450e9 * 0.75) + 10e-6)


def test_tp_all_reduce_rows(h100):
    cfg = model_config("qwen3_8b")
    tp1 = simulate(cfg, h100, {}, PREFILL)
    assert not [r for r in tp1.breakdown_rows() if r["bound"] == "comm"]
    tp2 = simulate(cfg, h100, {"tp": 2}, PREFILL)
    attn = row(tp2, "attn_all_reduce")
    assert attn["count"] == 36
    message = 2 * 128 * 4096 * 2
    assert attn["time_s"] == pytest.approx(36 * all_reduce_s(message, 2, hardware_spec(h100)))


def test_moe_collectives_follow_expert_parallelism(h100):
    cfg = model_config("qwen3_30b_a3b")
    names = lambda result: {r["name"] for r in result.breakdown_rows()}  # noqa: E731
    tp_only = simulate(cfg, h100, {"tp": 2}, PREFILL)
    assert "moe_all_reduce" in names(tp_only) and "moe_dispatch" not in names(tp_only)
    ep = simulate(cfg, h100, {"tp": 2, "ep": 2}, PREFILL)
    assert {"moe_dispatch", "moe_combine"} <= names(ep) and "moe_all_reduce" not in names(ep)
    sent = 2 * 128 * 8 * 2048 * 2 / 2  # routed copies of this rank's half of the tokens
    assert row(ep, "moe_dispatch")["bytes"] == pytest.approx(48 * sent)
    shared = simulate(model_config("deepseek_v3"), h100, {"tp": 8, "ep": 8}, PREFILL)
    assert "moe_all_reduce" in names(shared)  # the tp-split shared expert still needs it


def test_pipeline_schedule():
    assert pipeline_time_s([2.0] * 4, 8) == pytest.approx((8 + 4 - 1) * 2.0)
    assert pipeline_time_s([1.0, 3.0], 1) == 4.0  # one micro-batch crosses both stages
    assert pipeline_time_s([1.0, 3.0], 5) == 4.0 + 4 * 3.0
    assert stage_layer_bounds(61, 4) == [0, 16, 31, 46, 61]


def test_pipeline_rows_add_up_to_latency(h100):
    result = simulate(
        model_config("qwen3_8b"), h100, {"pp": 4}, {"mode": "train", "batch": 8, "seq_len": 512, "microbatches": 8}
    )
    rows = result.breakdown_rows()
    assert sum(r["time_s"] for r in rows) == pytest.approx(result.latency_s)
    bubble = row(result, "pipeline_bubble")["time_s"]
    busy = result.latency_s - bubble - row(result, "optimizer_step")["time_s"]
    # The slowest stage idles sum(other stages) <= (pp-1) * its own time: at most (pp-1)/(m+pp-1).
    assert 0 < bubble / (bubble + busy) <= 3 / 11


def test_training_is_forward_plus_twice_backward_plus_recompute():
    """Without backward measurements (test_sims_training.py has the measured ratios)."""
    h100 = hardware("h100", efficiency_table=None)
    cfg, layout = model_config("qwen3_8b"), {"tp": 2}
    train = {"mode": "train", "batch": 2, "seq_len": 128}
    forward = simulate(cfg, h100, layout, PREFILL)
    plain = simulate(cfg, h100, layout, train)
    recompute = simulate(cfg, h100, layout, {**train, "recompute": True})
    assert row(plain, "q_proj")["time_s"] == pytest.approx(3 * row(forward, "q_proj")["time_s"])
    assert row(recompute, "q_proj")["time_s"] == pytest.approx(4 * row(forward, "q_proj")["time_s"])
    assert row(plain, "attn_all_reduce")["time_s"] == pytest.approx(2 * row(forward, "attn_all_reduce")["time_s"])
    assert row(recompute, "q_proj")["flops"] == pytest.approx(4 * row(forward, "q_proj")["flops"])
    # Layers that keep their GEMMs' outputs recompute only the rest (JAX's dots_with_no_batch_dims_saveable).
    keeps = simulate(cfg, h100, layout, {**train, "recompute": True, "recompute_keeps": ["gemm"]})
    assert row(keeps, "q_proj")["time_s"] == pytest.approx(3 * row(forward, "q_proj")["time_s"])
    assert row(keeps, "attention")["time_s"] == pytest.approx(row(recompute, "attention")["time_s"])
    assert plain.latency_s < keeps.latency_s < recompute.latency_s


def test_model_flops_are_six_n_d_for_training():
    cfg = model_config("qwen3_8b")
    workload = parse_workload({"mode": "train", "batch": 1, "seq_len": 1})
    step = estimate_step(build_graph(cfg, "train"), hardware_spec(hardware("h100")), parse_layout({}), workload)
    non_embedding = 8_190_735_360 - 151936 * 4096
    assert step.model_flops == pytest.approx(6 * non_embedding, rel=1e-3)


def test_gemm_measurements_replace_the_roofline(tmp_path):
    decode = {"mode": "decode", "batch": 16, "context_len": 128}
    table = table_file(tmp_path, gemm_measurements=[{"m": 16, "n": 4096, "k": 4096, "dtype": "bf16", "time_us": 77.0}])
    measured = cost("qwen3_8b", "q_proj", {}, decode, hardware("h100", efficiency_table=table))
    assert measured.time_s == pytest.approx(77e-6)


def test_gemm_interpolation_is_exact_at_measurements_and_smooth_between():
    def roofline(m, n, k, dtype):
        return 2.0 * m * n * k / 1e15

    points = (GemmMeasurement(64, 1024, 1024, "bf16", 2.0), GemmMeasurement(4096, 1024, 1024, "bf16", 20.0))
    interpolator = GemmInterpolator(points, roofline)
    assert interpolator.time_s(64, 1024, 1024, "bf16") == pytest.approx(2e-6)
    assert interpolator.time_s(4096, 1024, 1024, "bf16") == pytest.approx(20e-6)
    fractions = [roofline(p.m, p.n, p.k, "bf16") / (p.time_us * 1e-6) for p in points]
    middle = interpolator.time_s(512, 1024, 1024, "bf16")  # equidistant in log2(m): the mean fraction
    assert middle == pytest.approx(roofline(512, 1024, 1024, "bf16") / (sum(fractions) / 2))
    assert interpolator.time_s(64, 1024, 1024, "fp8") is None


def test_data_parallel_groups_that_cross_nodes_use_the_inter_node_link(tmp_path):
    exact = table_file(
        tmp_path,
        links={"intra_node": {"bandwidth": 1.0, "latency_us": 0}, "inter_node": {"bandwidth": 1.0, "latency_us": 0}},
    )
    hw = hardware_spec(hardware("h100", nodes=2, efficiency_table=exact))
    # dp=2 with tp=8: the two replicas of a shard are 8 ranks apart, on different nodes.
    assert all_reduce_s(1e9, 2, hw, span=16) == pytest.approx(1e9 / 50e9)
    assert all_reduce_s(1e9, 2, hw) == pytest.approx(1e9 / 450e9)
    cfg, train = model_config("qwen3_8b"), {"mode": "train", "batch": 2, "seq_len": 256}
    result = simulate(cfg, hardware("h100", nodes=2, efficiency_table=exact), {"tp": 8, "dp": 2}, train)
    replicated = 4096 + 36 * (2 * 4096 + 2 * 128)  # RMSNorm weights are not split by tp
    local = (8_190_735_360 - replicated) / 8 + replicated
    assert row(result, "dp_grad_sync")["time_s"] == pytest.approx(local * 4 / 50e9, rel=1e-9)


def test_logits_are_gathered_for_sampling_but_not_in_training(h100):
    cfg = model_config("qwen3_8b")
    names = lambda r: {x["name"] for x in r.breakdown_rows()}  # noqa: E731
    assert "logits_all_gather" in names(simulate(cfg, h100, {"tp": 2}, PREFILL))
    assert "logits_all_gather" not in names(simulate(cfg, h100, {"tp": 2}, {**PREFILL, "mode": "train"}))
