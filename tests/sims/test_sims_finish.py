"""sims/finish.py: a sweep's step times, memory and results (simulate_many) on arrays per pipeline split, or one
configuration at a time for a small split, against simulate called for each layout alone."""

import itertools

import pytest
from sims_helpers import hardware, model_config, simulated_alone

import sims.finish
from sims import simulate_many

# pp 1, 2 and 4 (two and four stages whose memory decides the reported stage), dp 1 and 2, MoE layouts with ep
LAYOUTS = [{"tp": tp, "dp": dp, "ep": ep, "pp": pp}
           for tp, dp, ep, pp in itertools.product((1, 4), (1, 2), (1, 2), (1, 2, 4))]
# every branch of the finish: update rows (zero, fsdp), recompute, a chunked and a partial loss, a shared-prefix
# decode, a scanned pass and log-prob passes (one over float32 master weights, one whose chunked lm_head output is its
# largest activation), fp8 and fp32, and batches whose memory does and does not fit
WORKLOADS = [
    {"mode": "prefill", "seq_len": 2048, "batch": 8},
    {"mode": "prefill", "seq_len": 1024, "batch": 512, "dtype": "fp32"},
    {"mode": "prefill", "seq_len": 1024, "batch": 16, "scanned": True},
    {"mode": "prefill", "seq_len": 1024, "batch": 16, "scanned": True, "loss_len": 200, "logits_chunk": 64,
     "param_dtype": "fp32"},  # a log-prob pass over float32 master weights
    {"mode": "prefill", "seq_len": 1024, "batch": 16, "loss_len": 200, "logits_chunk": 64},
    {"mode": "prefill", "seq_len": 1024, "batch": 16, "loss_len": 1024, "logits_chunk": 32},  # lm_head the largest op
    {"mode": "decode", "context_len": 4096, "batch": 64, "dtype": "fp8"},
    {"mode": "decode", "seq_len": 3000, "context_len": 4096, "batch": 64, "shared_prefix": 8},
    {"mode": "decode", "context_len": 32768, "batch": 1024},
    {"mode": "train", "seq_len": 2048, "batch": 16, "microbatches": 4},
    {"mode": "train", "seq_len": 2048, "batch": 16, "microbatches": 2, "zero": True, "dtype": "fp8"},
    {"mode": "train", "seq_len": 4096, "batch": 64, "microbatches": 8, "recompute": True, "logits_chunk": 512},
    {"mode": "train", "seq_len": 1024, "batch": 8, "microbatches": 2, "shard_weights": True, "zero": True},
    {"mode": "train", "seq_len": 2048, "batch": 32, "microbatches": 4, "loss_len": 512},
]


@pytest.mark.parametrize("model, stack, table", (
    ("qwen3_8b", "transformers", "sims/calibration/tables/h100.json"),
    ("qwen3_30b_a3b", "xla", None),  # scanned passes and updates
    ("deepseek_v3", "megatron_local", None),  # host waits
))
@pytest.mark.parametrize("arrays_from", (1, 10**9), ids=("arrays", "one_at_a_time"))
def test_a_sweep_finished_together_equals_each_layout_simulated_alone(model, stack, table, arrays_from, monkeypatch):
    """Every summary field and per-op row, bit for bit, whichever way each split is finished: every split on arrays
    (from one configuration) or every one a configuration at a time; fitting and not fitting layouts among them."""
    monkeypatch.setattr(sims.finish, "ARRAYS_FROM", arrays_from)
    cfg, hw = model_config(model), hardware("h100", efficiency_table=table, nodes=2)
    shapes = [w for w in WORKLOADS if stack == "xla" or "scanned" not in w]  # only xla has a scanned forward
    layouts, workloads = zip(*itertools.product(LAYOUTS, shapes))
    alone = simulated_alone(cfg, hw, layouts, workloads, stack=stack)
    together = simulate_many(cfg, hw, layouts, workloads, stack=stack)
    for (summary, rows), result, layout, workload in zip(alone, together, layouts, workloads):
        assert result.summary() == summary, (layout, workload)
        assert result.breakdown_rows() == rows, (layout, workload)
    fits = [summary["fits"] for summary, _ in alone if summary["status"] == "ok"]
    assert True in fits and False in fits
    pipelines = {result.layout.pp for result in together if result.status == "ok" and result.fits is False}
    assert pipelines == {1, 2, 4}


def test_a_compensated_sum_finishes_one_configuration_at_a_time(monkeypatch):
    """Where sum() is not the arrays' in-order sum (Python 3.12 on), no split takes the arrays."""
    monkeypatch.setattr(sims.finish, "PLAIN_SUM", False)
    monkeypatch.setattr(sims.finish, "ARRAYS_FROM", 1)
    monkeypatch.setattr(sims.finish, "_finish_split", lambda *args: pytest.fail("arrays taken"))
    cfg, hw = model_config("qwen3_30b_a3b"), hardware("h100")
    layouts, workloads = zip(*itertools.product(LAYOUTS, WORKLOADS[:1] + WORKLOADS[7:8]))
    together = simulate_many(cfg, hw, layouts, workloads)
    alone = simulated_alone(cfg, hw, layouts, workloads)
    assert [result.summary() for result in together] == [summary for summary, _ in alone]


def test_the_plain_sum_probe_reads_this_interpreter():
    """PLAIN_SUM is True exactly when sum() adds floats in order from 0 (what the arrays reproduce)."""
    values = [1e16, 1.0, -1e16, 3.0, 1e-3]
    in_order = 0
    for value in values:
        in_order += value
    assert sims.finish.PLAIN_SUM == (sum(values) == in_order)
