import pytest
from sims_helpers import hardware, model_config

from framework.core.errors import ConfigError
from sims import simulate

DECODE = {"mode": "decode", "batch": 8, "context_len": 1024}
SUMMARY_KEYS = {
    "status",
    "reason",
    "params_total",
    "params_active",
    "latency_s",
    "tokens_per_s_per_device",
    "mfu",
    "memory_per_device_gb",
    "memory_breakdown_gb",
    "fits",
    "memory_over_gb",
    "warning",
    "stack",
    "efficiency_table",
}
ROW_KEYS = {"name", "op_type", "count", "flops", "bytes", "time_s", "bound"}


@pytest.mark.parametrize(
    "model, layout, workload, hw, reason",
    [
        ("qwen3_8b", {"tp": 3}, DECODE, "h100", "tp=3 does not divide num_attention_heads=32"),
        ("qwen3_8b", {"tp": 8, "dp": 2}, DECODE, "h100", "16 devices > 8 available"),
        ("qwen3_8b", {"ep": 2, "dp": 2}, DECODE, "h100", "the model is dense"),
        ("qwen3_30b_a3b", {"tp": 2, "dp": 3, "ep": 3}, DECODE, "h100", "ep=3 does not divide num_experts=128"),
        ("qwen3_30b_a3b", {"tp": 2, "ep": 4}, DECODE, "h100", "ep=4 must divide tp*dp=2"),
        ("qwen2_5_0_5b_instruct", {"tp": 4}, DECODE, "h100", "tp=4 does not divide num_attention_heads=14"),
        ("qwen3_235b_a22b", {"tp": 4, "dp": 2}, {**DECODE, "batch": 3}, "h100", "batch=3 is not divisible"),
        ("qwen3_8b", {"pp": 2}, {**DECODE, "microbatches": 3}, "h100", "dp*microbatches=3"),
        ("qwen3_8b", {}, {**DECODE, "dtype": "fp8"}, "a100", "a100 has no fp8 peak"),
        ("qwen2_5_0_5b_instruct", {"pp": 8}, DECODE, "h100", None),  # valid: 24 layers over 8 stages
        ("qwen3_8b", {}, {**DECODE, "context_len": 40961}, "h100",
         "workload.context_len=40961 is past the model's 40960 positions (max_position_embeddings); valid: at most "
         "40960"),
        ("qwen3_8b", {}, {"mode": "prefill", "batch": 1, "seq_len": 50000}, "h100", "workload.seq_len=50000 is past"),
        ("qwen3_8b", {}, {"mode": "train", "batch": 1, "seq_len": 50000}, "h100", None),  # training may extend them
        ("qwen3_8b", {}, {"mode": "prefill", "batch": 1, "seq_len": 40960}, "h100", None),  # valid: every position
    ],
)
def test_invalid_layouts_are_rows_with_a_reason(model, layout, workload, hw, reason):
    result = simulate(model_config(model), hardware(hw), layout, workload)
    summary = result.summary()
    assert SUMMARY_KEYS <= set(summary)
    if reason is None:
        assert summary["status"] == "ok"
        return
    assert summary["status"] == "invalid"
    assert reason in summary["reason"]
    assert summary["latency_s"] is None and summary["fits"] is None
    assert summary["params_total"] > 0  # still says what the model is
    assert result.breakdown_rows() == []


def test_a_config_without_max_position_embeddings_costs_any_length():
    cfg = {k: v for k, v in model_config("qwen3_8b").items() if k != "max_position_embeddings"}
    assert simulate(cfg, hardware("h100"), {}, {**DECODE, "context_len": 10**6}).status == "ok"


def test_kv_heads_must_divide_or_be_divided_by_tp():
    cfg = {**model_config("qwen3_8b"), "num_key_value_heads": 6, "num_attention_heads": 24}
    result = simulate(cfg, hardware("h100"), {"tp": 4}, DECODE)
    assert result.status == "invalid" and "num_key_value_heads=6" in result.reason


@pytest.mark.parametrize(
    "layout, workload, message",
    [
        ({"tensor": 2}, DECODE, "layout: unknown key(s) tensor"),
        ({"tp": 0}, DECODE, "layout.tp is 0"),
        ({"tp": "2"}, DECODE, "layout.tp is '2'"),
        ({}, {**DECODE, "mode": "serve"}, "workload.mode is 'serve'; valid: prefill, decode, train"),
        ({}, {"mode": "decode", "batch": 4}, "workload.context_len is required"),
        ({}, {"mode": "train", "batch": 4}, "workload.seq_len is required"),
        ({}, {**DECODE, "dtype": "int4"}, "workload.dtype is 'int4'"),
        ({}, {**DECODE, "beams": 4}, "workload: unknown key(s) beams"),
        ({}, {**DECODE, "recompute": "yes"}, "workload.recompute"),
        ({}, {**DECODE, "recompute": True, "recompute_keeps": ["matmul"]}, "workload.recompute_keeps is ['matmul']"),
        ({}, {**DECODE, "recompute_keeps": ["gemm"]}, "workload.recompute_keeps needs recompute: true"),
        ({}, {**DECODE, "logits_chunk": 0}, "workload.logits_chunk is 0"),
    ],
)
def test_bad_input_raises_config_error(layout, workload, message):
    with pytest.raises(ConfigError) as error:
        simulate(model_config("qwen3_8b"), hardware("h100"), layout, workload)
    assert message in str(error.value)


def test_bad_hardware_raises_config_error():
    broken = {k: v for k, v in hardware("h100").items() if k != "hbm_tb_s"}
    with pytest.raises(ConfigError, match="missing hbm_tb_s"):
        simulate(model_config("qwen3_8b"), broken, {}, DECODE)
    with pytest.raises(ConfigError, match="efficiency_table"):
        simulate(model_config("qwen3_8b"), hardware("h100", efficiency_table="no/such/table.json"), {}, DECODE)


@pytest.mark.parametrize("mode", ["prefill", "decode", "train"])
@pytest.mark.parametrize("model", ["qwen3_8b", "qwen3_30b_a3b", "deepseek_v3", "qwen2_5_0_5b_instruct"])
def test_summary_and_rows_are_consistent(model, mode):
    workload = {"mode": mode, "batch": 8, "seq_len": 512, "context_len": 512, "microbatches": 2}
    layout = {"tp": 2, "ep": 2, "pp": 2} if model in ("qwen3_30b_a3b", "deepseek_v3") else {"tp": 2, "pp": 2}
    result = simulate(model_config(model), hardware("h200"), layout, workload)
    summary = result.summary()
    assert summary["status"] == "ok"
    rows = result.breakdown_rows()
    assert all(ROW_KEYS <= set(r) for r in rows)
    assert {r["bound"] for r in rows} <= {"compute", "memory", "floor", "comm", "idle"}
    assert sum(r["time_s"] for r in rows) == pytest.approx(summary["latency_s"])
    new_tokens = 8 * (1 if mode == "decode" else 512)
    assert summary["devices"] == 4
    assert summary["tokens_per_s_per_device"] == pytest.approx(new_tokens / summary["latency_s"] / 4)
    assert 0 < summary["mfu"] < 1
    assert summary["memory_per_device_gb"] == pytest.approx(sum(summary["memory_breakdown_gb"].values()))


def test_decode_throughput_grows_with_batch_while_memory_bound(h100):
    cfg = model_config("qwen3_8b")
    rates = [simulate(cfg, h100, {}, {**DECODE, "batch": b}).tokens_per_s_per_device for b in (1, 4, 16, 64)]
    assert rates == sorted(rates) and rates[-1] > 10 * rates[0]


def test_expected_expert_traffic_is_the_same_for_tp_and_ep_splits(h100):
    """One token touches 8 of 128 experts. Split tp=8, each device reads 1/8 of those 8; split ep=8,
    a device holds 16 experts and expects 16 * 8/128 = 1 of them touched, read whole: same bytes."""
    cfg = model_config("qwen3_30b_a3b")
    one = {"mode": "decode", "batch": 1, "context_len": 1024}
    tp = simulate(cfg, h100, {"tp": 8}, one)
    ep = simulate(cfg, h100, {"tp": 8, "ep": 8}, one)
    expert_bytes = lambda r: sum(x["bytes"] for x in r.breakdown_rows() if x["op_type"] == "moe_gemm")  # noqa: E731
    weights_only = 48 * 8 * 3 * 2048 * 768 * 2 / 8
    assert expert_bytes(tp) == pytest.approx(expert_bytes(ep), rel=1e-9)
    assert expert_bytes(tp) == pytest.approx(weights_only, rel=0.01)  # + a few KB of activations


def test_omegaconf_containers_are_accepted_as_composed_by_hydra():
    from omegaconf import OmegaConf

    cfg, hw = model_config("deepseek_v3"), hardware("h100")
    plain = simulate(cfg, hw, {"tp": 8, "ep": 8}, DECODE).summary()
    composed = simulate(OmegaConf.create(cfg), OmegaConf.create(hw), OmegaConf.create({"tp": 8, "ep": 8}), DECODE)
    assert composed.summary() == plain


def test_non_data_config_values_are_a_config_error():
    with pytest.raises(ConfigError, match="hf_config must hold only"):
        simulate({**model_config("qwen3_8b"), "rope_theta": object()}, hardware("h100"), {}, DECODE)


def test_a_layout_that_does_not_fit_says_so_in_a_warning():
    big = simulate(model_config("qwen3_235b_a22b"), hardware("h100"), {"tp": 2}, DECODE).summary()
    assert big["status"] == "ok" and big["fits"] is False and big["memory_over_gb"] > 0
    assert big["warning"].startswith("does not fit: needs ") and "80 GB available" in big["warning"]
    small = simulate(model_config("qwen3_8b"), hardware("h100"), {}, DECODE).summary()
    assert small["fits"] is True and small["warning"] == ""


def test_a_stack_without_its_table_warns_that_it_is_uncalibrated():
    h100 = hardware("h100")
    transformers_only = {**h100, "efficiency_table": h100["efficiency_table"]["transformers"]}
    summary = simulate(model_config("qwen3_8b"), transformers_only, {}, DECODE, stack="torch_fused").summary()
    assert summary["warning"] == "no torch_fused efficiency table for h100: uncalibrated built-in factors"
