"""The update as JAX runs it (sims/scan_update.py): the scanned layers' per-micro-batch parameter passes and
copies of what a layer saves (sims/stacks.yaml xla.scanned_update), and fsdp's weight gathers and gradient scatters every
micro-batch (workload.shard_weights), by hand on an exact table."""

import json

import pytest
from sims_helpers import EXACT, hardware, model_config, stack_override

from framework.core.errors import ConfigError
from sims import simulate
from sims.comm import collective_s
from sims.hardware import hardware_spec
from sims.train_work import GRAD_ACCUMULATE_BYTES, GRAD_BYTES


def train(microbatches, **extra):
    return {"mode": "train", "batch": 8, "seq_len": 128, "microbatches": microbatches, **extra}


@pytest.fixture
def with_scan(tmp_path, monkeypatch):
    """sims/stacks.yaml with the xla stack's scanned_update replaced (restored after the test)."""
    yield from stack_override(tmp_path, monkeypatch, "xla", "scanned_update")


def run(tmp_path, layout, workload, name, devices=1):
    table = tmp_path / f"{name}.json"  # a table of its own: nothing costed under another stacks.yaml is reused
    table.write_text(json.dumps(EXACT))
    hw = hardware("h100", devices_per_node=max(devices, 1), efficiency_table=str(table))
    return simulate(model_config("qwen2_5_0_5b_instruct"), hw, layout, workload, stack="xla"), hw


def by_name(result, key="time_s"):
    totals = {}
    for row in result.breakdown_rows():
        totals[row["name"]] = totals.get(row["name"], 0.0) + row[key]
    return totals


@pytest.mark.parametrize("microbatches", [1, 4])
def test_each_micro_batch_runs_the_scans_kernels_every_layer_whatever_the_sharding(tmp_path, with_scan, microbatches):
    with_scan(None)
    plain, _ = run(tmp_path, {}, train(microbatches, recompute=True), "plain")
    with_scan({"saved_byte_passes": 7.0, "kept_byte_passes": 3.0, "layer_us": 300.0, "fsdp_exposed": 1.0, "measured": "test"})
    scanned, _ = run(tmp_path, {}, train(microbatches, recompute=True), "scanned")
    # under recompute no copies: 24 layers x 300 us per micro-batch
    seconds = microbatches * 24 * 300e-6
    assert by_name(scanned)["scan_copies"] == pytest.approx(seconds)
    assert scanned.latency_s == pytest.approx(plain.latency_s + seconds)
    for layout in ({"tp": 2}, {"dp": 2}):  # neither tp nor fsdp shrinks the scan's kernels
        workload = train(microbatches, recompute=True, zero=True, shard_weights="dp" in layout)
        sharded, _ = run(tmp_path, layout, workload, f"sharded_{'dp' in layout}", devices=2)
        assert by_name(sharded)["scan_copies"] == pytest.approx(seconds)


def test_without_remat_the_saved_activations_are_copied_once_per_token_whatever_the_micro_batches(tmp_path, with_scan):
    with_scan({"saved_byte_passes": 7.0, "kept_byte_passes": 3.0, "layer_us": 0.0, "fsdp_exposed": 1.0, "measured": "test"})
    one = by_name(run(tmp_path, {}, train(1), "one")[0], "bytes")["scan_copies"]
    four = by_name(run(tmp_path, {}, train(4), "four")[0], "bytes")["scan_copies"]
    assert one > 0 and four == pytest.approx(one)  # the same tokens in 1 or 4 micro-batches
    # 24 layers, 1024 tokens: at least the layer inputs and the MLP's two 4864-wide products, bf16, 7 passes
    assert one > 7 * 2 * 24 * 1024 * (896 + 2 * 4864)
    remat = by_name(run(tmp_path, {}, train(1, recompute=True), "remat")[0], "bytes")["scan_copies"]
    assert remat == pytest.approx(0.0)


def test_under_remat_minimal_the_kept_gemm_outputs_are_copied_at_their_own_passes(tmp_path, with_scan):
    # remat minimal keeps each layer's GEMM outputs but its last (down_proj feeds only the residual sum): per token of
    # Qwen2.5-0.5B q/k/v 896 + 2 x 128, o_proj 896, gate/up 2 x 4864, bf16, 24 layers; 8 x 128 tokens a step
    with_scan({"saved_byte_passes": 7.0, "kept_byte_passes": 3.0, "layer_us": 0.0, "fsdp_exposed": 1.0,
               "measured": "test"})
    minimal = train(2, recompute=True, recompute_keeps=("gemm",))
    result, hw = run(tmp_path, {}, minimal, "minimal")
    kept_bytes = 2 * 24 * 8 * 128 * (896 + 2 * 128 + 896 + 2 * 4864)
    assert by_name(result, "bytes")["scan_copies"] == pytest.approx(3.0 * kept_bytes)
    assert by_name(result)["scan_copies"] == pytest.approx(3.0 * kept_bytes / hardware_spec(hw).memory_bytes_per_s)
    with_scan({"saved_byte_passes": 7.0, "kept_byte_passes": 1.0, "layer_us": 0.0, "fsdp_exposed": 1.0,
               "measured": "test"})
    once = by_name(run(tmp_path, {}, minimal, "once")[0], "bytes")["scan_copies"]
    assert once == pytest.approx(kept_bytes)  # the passes are kept_byte_passes', not saved_byte_passes'


def test_other_stacks_have_no_scan_copies(tmp_path):
    table = tmp_path / "t.json"
    table.write_text(json.dumps(EXACT))
    hw = hardware("h100", efficiency_table=str(table))
    result = simulate(model_config("qwen2_5_0_5b_instruct"), hw, {}, train(2), stack="torch_fused")
    assert "scan_copies" not in by_name(result)


@pytest.mark.parametrize("microbatches", [1, 4])
def test_fsdp_gathers_the_weights_twice_and_scatters_the_gradients_every_micro_batch(tmp_path, with_scan, microbatches):
    with_scan(None)
    zero1, hw = run(tmp_path, {"dp": 2}, train(microbatches, zero=True), "zero1", devices=2)
    fsdp, _ = run(tmp_path, {"dp": 2}, train(microbatches, zero=True, shard_weights=True), "fsdp", devices=2)
    spec = hardware_spec(hw, "xla")
    params = by_name(zero1, "bytes")["grad_accumulate"] / GRAD_ACCUMULATE_BYTES / microbatches
    gather = collective_s("all_gather", params * 2, 2, 2, spec)
    scatter = collective_s("reduce_scatter", params * GRAD_BYTES, 2, 2, spec)
    rows = by_name(fsdp)
    assert rows["fsdp_weight_gather"] == pytest.approx(microbatches * 2 * gather)
    assert rows["fsdp_grad_scatter"] == pytest.approx(microbatches * scatter)
    assert "dp_grad_sync" not in rows  # nothing more once per step
    assert by_name(zero1)["dp_grad_sync"] == pytest.approx(gather + scatter)  # ZeRO-1: once per step
    # fsdp accumulates the gradients of its shard only
    assert rows["grad_accumulate"] == pytest.approx(by_name(zero1)["grad_accumulate"] / 2)


def test_the_stacks_exposed_share_of_the_fsdp_collectives_stays_on_the_steps_path(tmp_path, with_scan):
    workload = train(4, zero=True, shard_weights=True, recompute=True)
    with_scan({"saved_byte_passes": 7.0, "kept_byte_passes": 3.0, "layer_us": 0.0, "fsdp_exposed": 1.0, "measured": "test"})
    whole, _ = run(tmp_path, {"dp": 2}, workload, "whole", devices=2)
    with_scan({"saved_byte_passes": 7.0, "kept_byte_passes": 3.0, "layer_us": 0.0, "fsdp_exposed": 0.25, "measured": "test"})
    quarter, _ = run(tmp_path, {"dp": 2}, workload, "quarter", devices=2)
    collectives = ("fsdp_weight_gather", "fsdp_grad_scatter")
    hidden = 0.0
    for name in collectives:
        assert by_name(quarter)[name] == pytest.approx(0.25 * by_name(whole)[name])
        assert by_name(quarter, "bytes")[name] == by_name(whole, "bytes")[name]  # the traffic is the same
        hidden += 0.75 * by_name(whole)[name]
    assert quarter.latency_s == pytest.approx(whole.latency_s - hidden)


def test_an_exposed_share_outside_0_to_1_is_one_line_naming_the_key(tmp_path, with_scan):
    with_scan({"saved_byte_passes": 7.0, "kept_byte_passes": 3.0, "layer_us": 0.0, "fsdp_exposed": 1.5, "measured": "test"})
    with pytest.raises(ConfigError, match=r"xla.scanned_update.fsdp_exposed is 1.5; valid: a share from 0 to 1"):
        run(tmp_path, {"dp": 2}, train(1, zero=True, shard_weights=True), "bad_share", devices=2)


def test_shard_weights_needs_zero(tmp_path):
    with pytest.raises(ConfigError, match="shard_weights needs zero"):
        run(tmp_path, {"dp": 2}, train(1, shard_weights=True), "bad", devices=2)


def test_a_training_stage_lists_its_rows_outside_the_graph_in_one_order():
    """The last stage's rows after the graph's ops: the loss and accumulation, the scan's copies, then fsdp's
    collectives (sims/train_rows.py; their times add to the stage in this order)."""
    workload = {"mode": "train", "seq_len": 512, "batch": 8, "microbatches": 2, "shard_weights": True, "zero": True}
    result = simulate(model_config("qwen3_30b_a3b"), hardware("h100", nodes=2), {"dp": 2, "pp": 2}, workload, stack="xla")
    names = [row["name"] for row in result.breakdown_rows()]
    assert names[names.index("lm_head") + 1:names.index("pp_send_recv")] == [
        "cross_entropy", "grad_accumulate", "scan_copies", "fsdp_weight_gather", "fsdp_grad_scatter"]
