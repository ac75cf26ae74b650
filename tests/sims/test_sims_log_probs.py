"""A log-prob pass (prefill with workload.loss_len: the GRPO old and reference log-prob passes): the LM head projects
the last loss_len positions of every sequence, not only the last one, and their log-softmax over the vocabulary is
the cross-entropy's forward (a `log_probs` row on the stage with the head); logits_chunk bounds the logits held."""

import pytest
from sims_helpers import hardware, model_config, simulated_alone

from framework.core.errors import ConfigError
from sims import simulate, simulate_many
from sims.cache import clear_caches
from sims.train_work import loss_work

VOCAB = 151936


def prefill(batch=16, **extra):
    return {"mode": "prefill", "batch": batch, "seq_len": 512} | extra


def rows(result):
    return {row["name"]: row for row in result.breakdown_rows()}


def test_the_head_projects_the_completions_positions_and_takes_their_log_softmax():
    cfg, hw = model_config("qwen2_5_0_5b_instruct"), hardware("h100")
    last, probs = (simulate(cfg, hw, {}, prefill(**extra), stack="xla") for extra in ({}, {"loss_len": 256}))
    head_last, head_probs = rows(last)["lm_head"], rows(probs)["lm_head"]
    assert head_probs["flops"] == pytest.approx(256 * head_last["flops"])  # 16 x 256 positions, not 16
    flops, nbytes = loss_work(16 * 256, VOCAB, 1, 2)
    row = rows(probs)["log_probs"]
    assert (row["flops"], row["bytes"]) == (pytest.approx(flops), pytest.approx(nbytes))
    assert "log_probs" not in rows(last)
    others = sum(r["time_s"] for name, r in rows(probs).items() if name not in ("lm_head", "log_probs"))
    assert others == pytest.approx(sum(r["time_s"] for name, r in rows(last).items() if name != "lm_head"))
    assert probs.latency_s > last.latency_s + row["time_s"]


def test_the_log_probs_sit_on_the_last_stage_and_split_over_tp():
    cfg, hw = model_config("qwen2_5_0_5b_instruct"), hardware("h100", devices_per_node=2)
    one = rows(simulate(cfg, hw, {}, prefill(loss_len=256), stack="xla"))["log_probs"]
    split = rows(simulate(cfg, hw, {"tp": 2}, prefill(loss_len=256), stack="xla"))["log_probs"]
    assert split["bytes"] == pytest.approx(one["bytes"] / 2)
    staged = simulate(cfg, hw, {"pp": 2}, prefill(loss_len=256), stack="xla")
    assert "log_probs" in rows(staged)  # the slowest stage's rows: the last one holds the head here


def test_a_chunked_projection_holds_one_chunk_of_logits():
    """The backend maps the head over chunks of logits_chunk positions (trainers/update.py completion_log_probs): the
    pass's largest op is the head's input over every position and its output over one chunk (bf16), beside that
    chunk's fp32 logits; the head's output over all loss_len positions once made a long completion's pass refuse
    runs that fit (0.5B, 2048 new tokens, 128 rows: 94.7 GB on an 80 GB H100)."""
    cfg, hw = model_config("qwen2_5_0_5b_instruct"), hardware("h100")
    def activations(**extra):
        return simulate(cfg, hw, {}, prefill(**extra), stack="xla").memory_breakdown_gb["activations"]

    head_in, chunk_out = 16 * 256 * 896, 16 * 64 * VOCAB  # the head is the largest op here
    assert activations(loss_len=256, logits_chunk=64) == pytest.approx(((head_in + chunk_out) * 2 + chunk_out * 4)
                                                                       / 1e9, rel=1e-6)
    # a long completion: a layer's op stays the largest, the pass adds only its chunk's fp32 logits
    long = {"seq_len": 2304}
    assert activations(loss_len=2048, logits_chunk=64, **long) - activations(**long) == pytest.approx(
        16 * (64 - 1) * VOCAB * 4 / 1e9, rel=1e-6)
    whole, chunked = (simulate(cfg, hw, {}, prefill(loss_len=256, **extra), stack="xla").memory_per_device_gb
                      for extra in ({}, {"logits_chunk": 64}))
    assert whole - chunked == pytest.approx(16 * 256 * VOCAB * (1 - 64 / 256) * (2 + 4) / 1e9, rel=1e-6)


def test_a_decode_with_loss_len_is_refused():
    cfg, hw = model_config("qwen2_5_0_5b_instruct"), hardware("h100")
    with pytest.raises(ConfigError, match="workload.loss_len is for mode train"):
        simulate(cfg, hw, {}, {"mode": "decode", "batch": 8, "context_len": 512, "loss_len": 4}, stack="xla")


def test_log_prob_and_generation_prefills_of_one_sweep_equal_each_alone():
    cfg, hw = model_config("qwen3_8b"), hardware("h100")
    layouts = [{"tp": tp, "dp": 8 // tp} for tp in (1, 2, 4, 8)] * 2
    workloads = [prefill(16, **({"loss_len": 256, "logits_chunk": 64} if i < 4 else {})) for i in range(len(layouts))]
    alone = simulated_alone(cfg, hw, layouts, workloads, stack="xla")
    together = simulate_many(cfg, hw, layouts, workloads, stack="xla")
    for (summary, breakdown), result in zip(alone, together):
        assert result.summary() == summary and result.breakdown_rows() == breakdown
    assert sum("log_probs" in rows(result) for result in together) == 4


def test_one_position_of_log_probs_is_not_the_generation_prefill():
    """loss_len 1 projects as many positions as generation does (the same op costs): only the log_probs row differs,
    so a sweep must not hand one the other's stages."""
    cfg, hw = model_config("qwen2_5_0_5b_instruct"), hardware("h100")
    clear_caches()
    one, plain = simulate_many(cfg, hw, [{}, {}], [prefill(loss_len=1), prefill()], stack="xla")
    assert "log_probs" in rows(one) and "log_probs" not in rows(plain)
    assert one.latency_s == pytest.approx(plain.latency_s + rows(one)["log_probs"]["time_s"])
