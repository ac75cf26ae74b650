"""Memory per device against hand-computed values. GB = 1e9 bytes."""

import pytest
from sims_helpers import hardware, model_config

from sims import param_counts, simulate

QWEN3_235B = 235_093_634_560


def memory(model, layout, workload, hw="h100"):
    return simulate(model_config(model), hardware(hw), layout, workload)


def test_qwen3_235b_bf16_does_not_fit_one_h100_and_the_shortfall_is_right():
    result = memory("qwen3_235b_a22b", {}, {"mode": "decode", "batch": 1, "context_len": 1})
    assert param_counts(model_config("qwen3_235b_a22b"))["total"] == QWEN3_235B
    assert result.memory_breakdown_gb["weights"] == pytest.approx(QWEN3_235B * 2 / 1e9, rel=1e-12)
    assert result.memory_breakdown_gb["kv_cache"] == pytest.approx(94 * 2 * 4 * 128 * 2 / 1e9)  # one token
    assert not result.fits
    # 470.19 GB of weights on an 80 GB device; KV cache and activations of one token add ~1 MB.
    assert result.memory_over_gb == pytest.approx(470.187 - 80, abs=0.01)
    assert result.summary()["fits"] is False and "80 GB available" in result.reason


def qwen3_235b_params_per_device_tp8_ep8() -> int:
    h, vocab, layers = 4096, 151936, 94
    per_layer = (
        2 * h  # input + post-attention RMSNorm (replicated)
        + h * 64 * 128 // 8  # q_proj, 64 heads split 8 ways
        + h * 2 * 4 * 128 // 4  # k and v: 4 kv heads, each kept by 2 of the 8 ranks
        + 2 * 128  # q_norm, k_norm
        + 64 * 128 * h // 8  # o_proj
        + h * 128  # router (replicated)
        + 128 * 3 * h * 1536 // 8  # 16 whole experts per device
    )
    return layers * per_layer + 2 * vocab * h // 8 + h


def test_qwen3_235b_decode_on_8_h100_with_tp8_ep8_by_hand():
    decode = {"mode": "decode", "batch": 8, "context_len": 4096}
    result = memory("qwen3_235b_a22b", {"tp": 8, "ep": 8}, decode)
    weights = qwen3_235b_params_per_device_tp8_ep8() * 2 / 1e9
    kv = 8 * 4096 * 94 * (2 * 128) * 2 / 1e9  # one of the 4 kv heads (k and v, 128 wide) per rank
    assert result.memory_breakdown_gb["weights"] == pytest.approx(weights, rel=1e-12)
    assert result.memory_breakdown_gb["kv_cache"] == pytest.approx(kv, rel=1e-12)
    assert weights == pytest.approx(58.96, abs=0.01) and kv == pytest.approx(1.577, abs=0.001)
    assert result.fits  # ~60.5 GB of 80
    longer = memory("qwen3_235b_a22b", {"tp": 8, "ep": 8}, {"mode": "decode", "batch": 64, "context_len": 8192})
    kv_long = 64 * 8192 * 94 * (2 * 128) * 2 / 1e9  # 25.2 GB
    assert not longer.fits
    assert longer.memory_over_gb == pytest.approx(weights + kv_long - 80, abs=0.05)  # + a few MB of activations


def test_more_tp_means_less_weight_memory_per_device():
    decode = {"mode": "decode", "batch": 8, "context_len": 2048}
    weights = [memory("qwen3_8b", {"tp": tp}, decode).memory_breakdown_gb["weights"] for tp in (1, 2, 4, 8)]
    assert weights == sorted(weights, reverse=True) and len(set(weights)) == 4
    totals = [memory("qwen3_8b", {"tp": tp}, decode).memory_per_device_gb for tp in (1, 2, 4, 8)]
    assert totals == sorted(totals, reverse=True)


def test_more_ep_means_less_expert_memory_per_device():
    decode = {"mode": "decode", "batch": 8, "context_len": 2048}
    weights = [
        memory("qwen3_30b_a3b", {"dp": 8, "ep": ep}, decode).memory_breakdown_gb["weights"] for ep in (1, 2, 4, 8)
    ]
    assert weights == sorted(weights, reverse=True) and len(set(weights)) == 4


def test_pipeline_stages_hold_their_layers_and_a_tied_head_is_copied():
    decode = {"mode": "decode", "batch": 1, "context_len": 16}
    total = param_counts(model_config("qwen2_5_0_5b_instruct"))["total"]
    embedding = 151936 * 896
    per_layer = (total - embedding - 896) / 24
    one_stage = memory("qwen2_5_0_5b_instruct", {}, decode)
    assert one_stage.memory_breakdown_gb["weights"] == pytest.approx(total * 2 / 1e9)  # tied head stored once
    two_stages = memory("qwen2_5_0_5b_instruct", {"pp": 2}, decode)
    # Last stage: 12 layers + final norm + its own copy of the tied embedding as lm_head.
    last_stage = 12 * per_layer + 896 + embedding
    assert two_stages.memory_breakdown_gb["weights"] == pytest.approx(last_stage * 2 / 1e9)


def test_mla_kv_cache_is_the_latent_and_not_split_by_tp():
    decode = {"mode": "decode", "batch": 16, "context_len": 4096}
    latent = 16 * 4096 * 61 * 576 * 2 / 1e9
    for layout in ({"tp": 1}, {"tp": 8, "ep": 8}):
        result = memory("deepseek_v3", layout, decode, hw="h200")
        assert result.memory_breakdown_gb["kv_cache"] == pytest.approx(latent)


def test_fp8_inference_halves_gemm_weights():
    decode = {"mode": "decode", "batch": 1, "context_len": 16}
    bf16 = memory("deepseek_v3", {"tp": 8, "ep": 8}, decode, hw="h200").memory_breakdown_gb["weights"]
    fp8 = memory("deepseek_v3", {"tp": 8, "ep": 8}, {**decode, "dtype": "fp8"}, hw="h200")
    assert 0.5 * bf16 < fp8.memory_breakdown_gb["weights"] < 0.51 * bf16  # embedding and norms stay bf16
    assert fp8.fits  # ~85 GB of 141 on H200


def test_training_state_bytes_per_parameter():
    params = param_counts(model_config("llama3_1_8b"))["total"]
    train = {"mode": "train", "batch": 8, "seq_len": 4096}
    plain = memory("llama3_1_8b", {"dp": 8}, train).memory_breakdown_gb
    assert plain["weights"] == pytest.approx(params * 2 / 1e9)
    assert plain["gradients"] == pytest.approx(params * 4 / 1e9)  # fp32 main grads
    assert plain["optimizer"] == pytest.approx(params * 12 / 1e9)  # fp32 master + Adam m, v
    sharded = memory("llama3_1_8b", {"dp": 8}, {**train, "zero": True}).memory_breakdown_gb
    assert sharded["optimizer"] == pytest.approx(params * 12 / 8 / 1e9)


def test_recompute_keeps_only_layer_inputs():
    train = {"mode": "train", "batch": 8, "seq_len": 4096}
    full = memory("llama3_1_8b", {"dp": 8}, train).memory_breakdown_gb["activations"]
    recompute = memory("llama3_1_8b", {"dp": 8}, {**train, "recompute": True}).memory_breakdown_gb["activations"]
    checkpoints = 32 * 4096 * 4096 * 2 / 1e9  # one bf16 hidden state per layer and token
    logits = 4096 * 128256 * 4 / 1e9
    assert checkpoints + logits < recompute < full / 4


def test_a_recomputed_layer_keeps_the_outputs_of_the_op_types_asked_for():
    """recompute_keeps [gemm]: each layer also keeps q, k, v, o, gate and up outputs (not down's: it only
    feeds the residual sum, the next layer's kept input). Llama-3.1-8B, one 4096-token sequence per device."""
    train = {"mode": "train", "batch": 8, "seq_len": 4096, "recompute": True}
    inputs_only = memory("llama3_1_8b", {"dp": 8}, train).memory_breakdown_gb["activations"]
    keeps = memory("llama3_1_8b", {"dp": 8}, {**train, "recompute_keeps": ["gemm"]}).memory_breakdown_gb["activations"]
    per_token_and_layer = 4096 + 2 * 8 * 128 + 4096 + 2 * 14336  # q, k + v, o, gate + up
    assert keeps - inputs_only == pytest.approx(32 * 4096 * per_token_and_layer * 2 / 1e9)


def test_a_chunked_loss_holds_one_chunk_of_logits():
    train = {"mode": "train", "batch": 8, "seq_len": 4096}
    whole = memory("llama3_1_8b", {"dp": 8}, train).memory_breakdown_gb["activations"]
    chunked = memory("llama3_1_8b", {"dp": 8}, {**train, "logits_chunk": 512}).memory_breakdown_gb["activations"]
    assert whole - chunked == pytest.approx((4096 - 512) * 128256 * 4 / 1e9)
