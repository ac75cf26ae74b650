"""Parameter counts against published figures and against closed-form counts written out here.

Published figures (model cards / papers): Qwen3-30B-A3B 30.5B total, 3.3B activated; Qwen3-235B-A22B
235B / 22B; DeepSeek-V3 671B / 37B; Qwen3-8B 8.2B; Llama-3.1-8B 8.03B; Qwen2.5-7B 7.61B;
Qwen2.5-0.5B 0.49B.

DeepSeek-V3: the 671B is the main model only. DeepSeek's README_WEIGHTS: "685B = 671B main model +
14B multi-token-prediction (MTP) module" (the checkpoint's MTP layer also stores its own copy of the
embedding and head). Our count: 671.03B main + 11.61B unique MTP weights + 2 x 0.93B copies = 684.5B.
"""

from math import floor

import pytest
from sims_helpers import model_config

from sims import param_counts

PUBLISHED_TOTAL = {
    "qwen3_30b_a3b": 30.5e9,
    "qwen3_235b_a22b": 235e9,
    "deepseek_v3": 671e9,
    "qwen3_8b": 8.2e9,
    "llama3_1_8b": 8.03e9,
    "qwen2_5_7b": 7.61e9,
    "qwen2_5_0_5b_instruct": 0.49e9,
    "qwen2_5_1_5b_instruct": 1.54e9,  # model card: 1.54B (1.31B non-embedding)
}


@pytest.mark.parametrize("name", PUBLISHED_TOTAL)
def test_total_matches_published_within_1_percent(name):
    assert param_counts(model_config(name))["total"] == pytest.approx(PUBLISHED_TOTAL[name], rel=0.01)


@pytest.mark.parametrize("name", ["qwen3_8b", "llama3_1_8b", "qwen2_5_7b", "qwen2_5_0_5b_instruct"])
def test_dense_models_activate_everything(name):
    counts = param_counts(model_config(name))
    assert counts["active"] == counts["total"]


def test_qwen3_235b_active_within_1_percent():
    assert param_counts(model_config("qwen3_235b_a22b"))["active"] == pytest.approx(22e9, rel=0.01)


def test_truncated_active_figures():
    """Two model cards print the activated count truncated, not rounded: 3,353,032,704 appears as
    "3.3B" and 37,552,297,472 as "37B" (1.6% and 1.5% above the printed digits). Check the printed
    digits are exactly the truncation of our count; the exact counts are checked below."""
    assert floor(param_counts(model_config("qwen3_30b_a3b"))["active"] / 1e8) / 10 == 3.3
    assert floor(param_counts(model_config("deepseek_v3"))["active"] / 1e9) == 37


def test_deepseek_v3_671b_excludes_the_mtp_module():
    counts = param_counts(model_config("deepseek_v3"))
    assert counts["mtp"] == pytest.approx(11.5e9, rel=0.01)  # README_WEIGHTS: "11.5B unique parameters"
    checkpoint = counts["total"] + counts["mtp"] + 2 * counts["embedding"]  # MTP stores embed + head copies
    assert checkpoint == pytest.approx(685e9, rel=0.01)


def dense_closed_form(h, layers, heads, kv_heads, head_dim, inter, vocab, tied, qkv_bias=False, qk_norm=False):
    attention = h * heads * head_dim + 2 * h * kv_heads * head_dim + heads * head_dim * h
    attention += (heads + 2 * kv_heads) * head_dim if qkv_bias else 0
    attention += 2 * head_dim if qk_norm else 0
    layer = attention + 3 * h * inter + 2 * h  # gate, up, down + two RMSNorms
    return layers * layer + vocab * h * (1 if tied else 2) + h  # + final norm


def qwen3_moe_closed_form(h, layers, heads, kv_heads, head_dim, experts, top_k, expert_inter, vocab):
    attention = h * heads * head_dim + 2 * h * kv_heads * head_dim + heads * head_dim * h + 2 * head_dim
    expert = 3 * h * expert_inter
    common = layers * (attention + h * experts + 2 * h) + 2 * vocab * h + h
    return common + layers * experts * expert, common + layers * top_k * expert


def test_exact_counts_match_closed_forms():
    assert param_counts(model_config("qwen3_8b"))["total"] == dense_closed_form(
        4096, 36, 32, 8, 128, 12288, 151936, False, qk_norm=True
    )
    assert param_counts(model_config("llama3_1_8b"))["total"] == dense_closed_form(
        4096, 32, 32, 8, 128, 14336, 128256, False
    )
    assert param_counts(model_config("qwen2_5_7b"))["total"] == dense_closed_form(
        3584, 28, 28, 4, 128, 18944, 152064, False, qkv_bias=True
    )
    assert param_counts(model_config("qwen2_5_0_5b_instruct"))["total"] == dense_closed_form(
        896, 24, 14, 2, 64, 4864, 151936, True, qkv_bias=True
    )
    for name, shape in {
        "qwen3_30b_a3b": (2048, 48, 32, 4, 128, 128, 8, 768, 151936),
        "qwen3_235b_a22b": (4096, 94, 64, 4, 128, 128, 8, 1536, 151936),
    }.items():
        counts = param_counts(model_config(name))
        assert (counts["total"], counts["active"]) == qwen3_moe_closed_form(*shape)


def test_deepseek_v3_exact_counts():
    h, heads, vocab, expert = 7168, 128, 129280, 3 * 7168 * 2048
    mla = (
        h * (1536 + 576)  # q_a + kv_a (latent 512 + rope key 64)
        + 1536
        + 512  # q_a / kv_a RMSNorms
        + 1536 * heads * 192  # q_b
        + 512 * heads * 256  # kv_b: k_nope 128 + v 128 per head
        + heads * 128 * h  # o_proj
    )
    norms = 2 * h
    dense_layer = mla + norms + 3 * h * 18432
    moe_common = mla + norms + h * 256 + 256 + expert  # router + bias + shared expert
    embed_and_head = 2 * vocab * h + h
    counts = param_counts(model_config("deepseek_v3"))
    assert counts["total"] == 3 * dense_layer + 58 * (moe_common + 256 * expert) + embed_and_head
    assert counts["active"] == 3 * dense_layer + 58 * (moe_common + 8 * expert) + embed_and_head
    assert counts["mtp"] == moe_common + 256 * expert + 2 * h * h + 3 * h
