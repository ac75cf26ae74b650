"""The eager host's launch time as a floor under a training micro-batch (sims/stacks.yaml host_dispatch,
sims/train_rows.py host_waits_s), by hand on an exact table."""

import json

import pytest
import yaml
from sims_helpers import EXACT, hardware, model_config, stack_override

import sims.stacks as stacks_module
from framework.core.errors import ConfigError
from sims import simulate

TRAIN = {"mode": "train", "batch": 4, "seq_len": 128, "microbatches": 2}


@pytest.fixture
def with_host_dispatch(tmp_path, monkeypatch):
    """sims/stacks.yaml with megatron_local's host_dispatch replaced (restored after the test)."""
    yield from stack_override(tmp_path, monkeypatch, "megatron_local", "host_dispatch")


def run(tmp_path, layout, name):
    table = tmp_path / f"{name}.json"  # a table of its own: nothing costed under another stacks.yaml is reused
    table.write_text(json.dumps(EXACT))
    hw = hardware("h100", devices_per_node=2, efficiency_table=str(table))
    return simulate(model_config("qwen2_5_0_5b_instruct"), hw, layout, TRAIN, stack="megatron_local")


def rows(result):
    return {r["name"]: r["time_s"] for r in result.breakdown_rows()}


def test_a_slow_host_sets_each_micro_batch_to_its_launch_time(tmp_path, with_host_dispatch):
    with_host_dispatch(None)
    gpu = rows(run(tmp_path, {"tp": 2}, "gpu"))
    with_host_dispatch({"layer_us": 1e5, "collective_us": 1e3, "measured": "test"})
    result = run(tmp_path, {"tp": 2}, "host")
    # 24 layers; collectives per micro-batch: the embedding's and each layer's two all-reduces, forward and backward
    host_per_micro_batch = 24 * 0.1 + (2 + 4 * 24) * 1e-3
    per_step = {"optimizer_step", "dp_grad_sync"}
    gpu_micro_batches = sum(t for name, t in gpu.items() if name not in per_step)
    assert rows(result)["host_dispatch_wait"] == pytest.approx(2 * host_per_micro_batch - gpu_micro_batches)
    assert result.latency_s == pytest.approx(2 * host_per_micro_batch + gpu["optimizer_step"])
    assert sum(rows(result).values()) == pytest.approx(result.latency_s)


def test_one_gpu_launches_no_collectives(tmp_path, with_host_dispatch):
    with_host_dispatch({"layer_us": 1e5, "collective_us": 1e3, "measured": "test"})
    result = run(tmp_path, {}, "tp1")
    assert result.latency_s == pytest.approx(2 * 24 * 0.1 + rows(result)["optimizer_step"])


def test_a_host_faster_than_the_kernels_changes_nothing(tmp_path, with_host_dispatch):
    with_host_dispatch(None)
    before = run(tmp_path, {"tp": 2}, "none")
    with_host_dispatch({"layer_us": 1.0, "collective_us": 1.0, "measured": "test"})
    after = run(tmp_path, {"tp": 2}, "fast")
    assert after.latency_s == pytest.approx(before.latency_s) and "host_dispatch_wait" not in rows(after)


def test_host_dispatch_keys_are_checked(with_host_dispatch):
    with_host_dispatch({"layer_us": 1.0})
    with pytest.raises(ConfigError, match="megatron_local.host_dispatch has"):
        stacks_module.stacks()


def test_the_shipped_megatron_host_keeps_tp2_from_halving_the_one_gpu_step():
    """megatron-core launches the same kernels per micro-batch at tp=1 and tp=2 (plus the all-reduces):
    with the measured host pace the 1B tp=2 step on an H200 is hardly faster than the one-GPU step, as measured
    (session 11 call F: 0.58-0.65 s against 0.69 s), while one GPU's kernels still outlast its host."""
    from sims_helpers import REPO

    cfg = yaml.safe_load((REPO / "conf/model/llama3_2_1b.yaml").read_text())["hf_config"]
    workload = {"mode": "train", "batch": 16, "seq_len": 2048, "microbatches": 8, "dtype": "bf16"}
    h200 = hardware("h200")
    one, split = (simulate(cfg, h200, layout, workload, stack="megatron_local") for layout in ({}, {"tp": 2}))
    dispatch = stacks_module.stack("megatron_local").host_dispatch
    host_per_micro_batch = 16 * dispatch.layer_us * 1e-6 + 66 * dispatch.collective_us * 1e-6
    assert split.latency_s == pytest.approx(8 * host_per_micro_batch + rows(split)["optimizer_step"])
    assert split.latency_s >= 0.95 * one.latency_s and "host_dispatch_wait" not in rows(one)
