"""A forward pass on fsdp-sharded weights (sims/sharded_forward.py): every decode step and every prefill all-gathers
each decoder layer's GEMM weights and the LM head in the compute dtype over the dp group, in calls combined up to the
stack's combine_bytes, by hand on an exact table."""

import json

import pytest
from sims_helpers import EXACT, hardware, model_config, stack_override

from framework.core.errors import ConfigError
from sims import simulate
from sims.comm import collective_s
from sims.hardware import hardware_spec
from sims.sharded_forward import combined_calls

SHARDED = {"zero": True, "shard_weights": True}
XLA_GPU = {"combine_bytes": 30 * 2**20, "measured": "test"}  # XLA's default all-gather combine threshold


def qwen_0_5b_layer(tp: int = 1) -> float:
    """Elements of one Qwen2.5-0.5B decoder layer's GEMM weights, by hand: q/k/v (with their biases), o, gate, up
    and down, the tp-split weights tp ways."""
    hidden, qkv, mlp = 896, 896 + 2 * 128, 4864
    return (hidden * qkv + qkv + hidden * hidden + 3 * hidden * mlp) / tp


def qwen_0_5b_gathered(tp: int = 1) -> float:
    """What one forward pass gathers: 24 layers and the tied LM head (the embedding's storage)."""
    return 24 * qwen_0_5b_layer(tp) + 896 * 151936 / tp


@pytest.fixture
def with_calls(tmp_path, monkeypatch):
    yield from stack_override(tmp_path, monkeypatch, "xla", "sharded_forward")


def run(tmp_path, layout, workload, name, devices=2, model="qwen2_5_0_5b_instruct"):
    table = tmp_path / f"{name}.json"  # a table of its own: nothing costed under another stacks.yaml is reused
    table.write_text(json.dumps(EXACT))
    hw = hardware("h100", devices_per_node=devices, efficiency_table=str(table))
    return simulate(model_config(model), hw, layout, workload, stack="xla"), hardware_spec(hw, "xla")


def gather_row(result):
    rows = [row for row in result.breakdown_rows() if row["name"] == "sharded_weight_gather"]
    return rows[0] if rows else None


def decode(batch=64, **extra):
    return {"mode": "decode", "batch": batch, "context_len": 384, **extra}


def test_consecutive_arrays_share_a_call_up_to_the_threshold_and_a_larger_one_goes_alone():
    assert combined_calls([10, 10, 10], 25) == 2
    assert combined_calls([5, 30, 5], 25) == 3
    assert combined_calls([5, 5, 30], 100) == 1
    assert combined_calls([], 25) == 0


@pytest.mark.parametrize("group", [2, 4])
def test_a_decode_step_gathers_every_layer_and_the_head_over_the_group(tmp_path, with_calls, group):
    with_calls(XLA_GPU)
    replicas, _ = run(tmp_path, {"dp": group}, decode(), f"dp{group}", devices=group)
    sharded, spec = run(tmp_path, {"dp": group}, decode(**SHARDED), f"fsdp{group}", devices=group)
    # bf16; a layer (28.4 MiB) fits a call but two do not, and the 259.7 MiB head goes alone: the compiled
    # sampler's 25 calls (maxtext results fsdp_rollout_2026-11-27_s14)
    nbytes, calls = 2 * qwen_0_5b_gathered(), 24 + 1
    assert 2 * qwen_0_5b_layer() < XLA_GPU["combine_bytes"] < 4 * qwen_0_5b_layer()
    row = gather_row(sharded)
    assert row["bytes"] == pytest.approx(nbytes, rel=1e-9) and row["count"] == calls
    seconds = calls * collective_s("all_gather", nbytes / calls, group, group, spec)
    assert row["time_s"] == pytest.approx(seconds)
    assert sharded.latency_s == pytest.approx(replicas.latency_s + seconds)  # one step pays it all, once more
    assert gather_row(replicas) is None


def test_the_gather_follows_the_weights_the_tp_shard_and_the_calls(tmp_path, with_calls):
    with_calls(XLA_GPU)
    half, _ = run(tmp_path, {"dp": 2, "tp": 2}, decode(**SHARDED), "tp2", devices=4)
    assert gather_row(half)["bytes"] == pytest.approx(2 * qwen_0_5b_gathered(tp=2), rel=1e-9)
    small, _ = run(tmp_path, {"dp": 2}, decode(**SHARDED), "small")
    large, _ = run(tmp_path, {"dp": 2}, decode(**SHARDED), "large", model="qwen2_5_1_5b_instruct")
    assert gather_row(large)["bytes"] > 3 * gather_row(small)["bytes"]  # 1.5B: 1.54e9 parameters, 0.5B: 0.49e9
    with_calls({**XLA_GPU, "combine_bytes": 1})  # nothing combined: a call per array (4 per layer, the head)
    apart, spec = run(tmp_path, {"dp": 2}, decode(**SHARDED), "apart")
    assert gather_row(apart)["count"] == 24 * 4 + 1
    assert gather_row(apart)["bytes"] == pytest.approx(gather_row(small)["bytes"])
    latency = collective_s("all_gather", 0.0, 2, 2, spec)  # more calls, more latencies, the same bytes
    assert gather_row(apart)["time_s"] - gather_row(small)["time_s"] == pytest.approx((97 - 25) * latency)


def test_the_rows_and_the_prompt_length_do_not_change_a_passs_gather(tmp_path, with_calls):
    with_calls(XLA_GPU)
    few, _ = run(tmp_path, {"dp": 2}, decode(batch=16, **SHARDED), "few")
    many, _ = run(tmp_path, {"dp": 2}, decode(batch=256, **SHARDED), "many")
    short, _ = run(tmp_path, {"dp": 2}, {"mode": "prefill", "batch": 16, "seq_len": 128, **SHARDED}, "short")
    long, _ = run(tmp_path, {"dp": 2}, {"mode": "prefill", "batch": 16, "seq_len": 512, **SHARDED}, "long")
    times = {gather_row(result)["time_s"] for result in (few, many, short, long)}
    assert max(times) == pytest.approx(min(times))


def test_one_device_or_replicated_weights_gather_nothing(tmp_path, with_calls):
    with_calls(XLA_GPU)
    alone, _ = run(tmp_path, {}, decode(**SHARDED), "alone", devices=1)
    assert gather_row(alone) is None


def test_a_stack_without_sharded_forward_refuses_to_guess(tmp_path, with_calls):
    with_calls(None)
    with pytest.raises(ConfigError, match="stack 'xla' has no sharded_forward"):
        run(tmp_path, {"dp": 2}, decode(**SHARDED), "none")
