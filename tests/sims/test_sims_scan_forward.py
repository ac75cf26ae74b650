"""A forward pass scanned over stacked layer weights (sims/scan_forward.py, `workload.scanned`): every layer's weights
copied out of the stack, copy_passes x their bytes at the peak memory bandwidth, plus layer_us a layer, by hand on an
exact table; what the maxtext preflight and the xla calibration's held-out prefill mark as scanned."""

import json

import pytest
from sims_helpers import EXACT, hardware, model_config, simulated_alone, stack_override

from framework.core.errors import ConfigError
from sims import simulate, simulate_many
from sims.hardware import hardware_spec

SPEC = {"copy_passes": 2.0, "layer_us": 20.0, "measured": "test"}


def qwen_0_5b_layer(tp: int = 1) -> float:
    """Elements of one Qwen2.5-0.5B decoder layer, by hand: q/k/v with their biases, o, gate, up, down (tp-split
    tp ways) and the two norms (whole on every device)."""
    hidden, qkv, mlp = 896, 896 + 2 * 128, 4864
    return (hidden * qkv + qkv + hidden * hidden + 3 * hidden * mlp) / tp + 2 * hidden


@pytest.fixture
def with_scan(tmp_path, monkeypatch):
    yield from stack_override(tmp_path, monkeypatch, "xla", "scanned_forward")


def run(tmp_path, layout, workload, name, devices=1, model="qwen2_5_0_5b_instruct"):
    table = tmp_path / f"{name}.json"  # a table of its own: nothing costed under another stacks.yaml is reused
    table.write_text(json.dumps(EXACT))
    hw = hardware("h100", devices_per_node=devices, efficiency_table=str(table))
    return simulate(model_config(model), hw, layout, workload, stack="xla"), hardware_spec(hw, "xla")


def slice_row(result):
    rows = [row for row in result.breakdown_rows() if row["name"] == "scan_weight_slices"]
    return rows[0] if rows else None


def prefill(batch=1, **extra):
    return {"mode": "prefill", "batch": batch, "seq_len": 512, **extra}


def test_every_layer_copies_its_weights_at_the_bandwidth_and_pays_its_loop(tmp_path, with_scan):
    with_scan(SPEC)
    unrolled, _ = run(tmp_path, {}, prefill(), "unrolled")
    scanned, spec = run(tmp_path, {}, prefill(scanned=True), "scanned")
    nbytes = 24 * qwen_0_5b_layer() * 2 * SPEC["copy_passes"]  # bf16
    row = slice_row(scanned)
    assert row["bytes"] == pytest.approx(nbytes, rel=1e-9) and row["count"] == 24
    seconds = nbytes / spec.memory_bytes_per_s + 24 * SPEC["layer_us"] * 1e-6
    assert row["time_s"] == pytest.approx(seconds)
    assert scanned.latency_s == pytest.approx(unrolled.latency_s + seconds)
    assert slice_row(unrolled) is None


def test_the_copy_follows_the_tp_shard_the_fsdp_shard_and_the_stage(tmp_path, with_scan):
    with_scan(SPEC)
    whole = slice_row(run(tmp_path, {}, prefill(scanned=True), "whole")[0])["bytes"]
    half = slice_row(run(tmp_path, {"tp": 2}, prefill(scanned=True), "tp2", devices=2)[0])["bytes"]
    assert half == pytest.approx(24 * qwen_0_5b_layer(tp=2) * 2 * SPEC["copy_passes"], rel=1e-9)
    sharded = {"zero": True, "shard_weights": True}
    fsdp, _ = run(tmp_path, {"dp": 2}, prefill(2, scanned=True, **sharded), "fsdp", devices=2)
    assert slice_row(fsdp)["bytes"] == pytest.approx(whole / 2, rel=1e-9)
    assert {row["name"] for row in fsdp.breakdown_rows()} >= {"sharded_weight_gather", "scan_weight_slices"}
    staged, _ = run(tmp_path, {"pp": 2}, prefill(scanned=True), "pp2", devices=2)
    assert slice_row(staged)["bytes"] == pytest.approx(whole / 2, rel=1e-9)  # 12 of 24 layers a stage


def test_the_batch_does_not_change_the_copy(tmp_path, with_scan):
    with_scan(SPEC)
    one, _ = run(tmp_path, {}, prefill(1, scanned=True), "one")
    many, _ = run(tmp_path, {}, prefill(64, scanned=True), "many")
    assert slice_row(one)["time_s"] == pytest.approx(slice_row(many)["time_s"])


def test_a_stack_without_scanned_forward_and_a_scanned_decode_are_refused(tmp_path, with_scan):
    with_scan(None)
    with pytest.raises(ConfigError, match="stack 'xla' has no scanned_forward"):
        run(tmp_path, {}, prefill(scanned=True), "none")
    with pytest.raises(ConfigError, match="workload.scanned is for mode prefill"):
        run(tmp_path, {}, {"mode": "decode", "batch": 8, "context_len": 512, "scanned": True}, "decode")
    with pytest.raises(ConfigError, match="workload.scanned is 'yes'; expected true or false"):
        run(tmp_path, {}, prefill(scanned="yes"), "word")


def test_scanned_and_unrolled_passes_of_one_sweep_equal_each_alone():
    cfg, hw = model_config("qwen3_8b"), hardware("h100", nodes=1)
    layouts = [{"tp": tp, "dp": 8 // tp} for tp in (1, 2, 4, 8)] * 2
    workloads = [prefill(8, scanned=i < 4) for i in range(len(layouts))]  # each layout both ways
    alone = simulated_alone(cfg, hw, layouts, workloads, stack="xla")
    for (summary, rows), result in zip(alone, simulate_many(cfg, hw, layouts, workloads, stack="xla")):
        assert result.summary() == summary and result.breakdown_rows() == rows
    assert sum(slice_row(result) is not None for result in simulate_many(cfg, hw, layouts, workloads, stack="xla")) == 4


def test_the_shipped_constants_are_the_fit_of_the_runs_stacks_yaml_names():
    """sims/stacks.yaml's xla scanned_forward is scan_forward_fit's least squares over the scanned / unrolled prefill
    pairs of the two session-20 H200 calibration runs it names (rounded as shipped)."""
    from sims.benchmarks.scan_forward_fit import fit, scan_pairs
    from sims.stacks import stack
    from sims_helpers import REPO

    runs = REPO / "sims/benchmarks/results"
    pairs = [p for run in ("h200_2026-11-28_s20_xla", "h200_2026-11-28_s20_xla15b") for p in scan_pairs(runs / run)]
    passes, layer_us = fit(pairs)
    shipped = stack("xla").scanned_forward
    assert len(pairs) == 3 and (round(passes, 2), round(layer_us, 1)) == (shipped.copy_passes, shipped.layer_us)


def test_the_fit_tool_names_a_folder_without_a_calibration_record(tmp_path, capsys):
    from sims.benchmarks.scan_forward_fit import main

    with pytest.raises(SystemExit) as exit_info:
        main(["--fit", str(tmp_path)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1
    assert err.startswith(f"error: {tmp_path}/accuracy.json: not a readable xla calibration record")


# --- weights stored wider than the pass computes (workload.param_dtype: float32 master weights) ---

HEAD = 896 * 151936  # Qwen2.5-0.5B's vocabulary projection (tied to the embedding)
MASTER = {"param_dtype": "fp32"}


def log_prob_pass(loss_len=256, chunk=128, **extra):
    return prefill(16, scanned=True, loss_len=loss_len, logits_chunk=chunk, **extra)


def named(result, name):
    rows = [row for row in result.breakdown_rows() if row["name"] == name]
    return rows[0] if rows else None


def test_a_float32_stack_is_sliced_reading_four_bytes_and_writing_two(tmp_path, with_scan):
    """XLA fuses each slice with its convert to the pass's dtype (the update's compiled program, the pass's profile):
    a float32 element read and a bfloat16 one written, against two and two from a bfloat16 stack."""
    with_scan(SPEC)
    bf16, spec = run(tmp_path, {}, prefill(scanned=True), "bf16")
    master, _ = run(tmp_path, {}, prefill(scanned=True, **MASTER), "master")
    nbytes = 24 * qwen_0_5b_layer() * (4 + 2) / 2 * SPEC["copy_passes"]
    assert slice_row(master)["bytes"] == pytest.approx(nbytes, rel=1e-9)
    extra = nbytes - slice_row(bf16)["bytes"]
    assert master.latency_s == pytest.approx(bf16.latency_s + extra / spec.memory_bytes_per_s)
    assert named(master, "head_weight_cast") is None  # no log-prob head: nothing else converts


def test_the_log_prob_head_is_cast_every_chunk_and_a_tied_one_transposed_once(tmp_path, with_scan):
    with_scan(SPEC)
    bf16, spec = run(tmp_path, {}, log_prob_pass(), "bf16")
    master, _ = run(tmp_path, {}, log_prob_pass(**MASTER), "master")
    cast, transpose = named(master, "head_weight_cast"), named(master, "head_weight_transpose")
    assert cast["count"] == 2 and cast["bytes"] == pytest.approx(2 * HEAD * (4 + 2) / 2 * SPEC["copy_passes"])
    assert transpose["count"] == 1 and transpose["bytes"] == pytest.approx(HEAD * 4 * SPEC["copy_passes"])
    for row in (cast, transpose):
        assert row["time_s"] == pytest.approx(row["bytes"] / spec.memory_bytes_per_s) and row["bound"] == "memory"
    extra = slice_row(master)["bytes"] - slice_row(bf16)["bytes"] + cast["bytes"] + transpose["bytes"]
    assert master.latency_s == pytest.approx(bf16.latency_s + extra / spec.memory_bytes_per_s)
    assert named(bf16, "head_weight_cast") is None and named(bf16, "head_weight_transpose") is None


def test_the_casts_follow_the_chunks_the_tp_shard_and_an_untied_head(tmp_path, with_scan):
    with_scan(SPEC)
    per_chunk = HEAD * 3 * SPEC["copy_passes"]
    four = named(run(tmp_path, {}, log_prob_pass(200, 64, **MASTER), "four")[0], "head_weight_cast")
    assert four["count"] == 4 and four["bytes"] == pytest.approx(4 * per_chunk)  # ceil(200 / 64)
    whole = named(run(tmp_path, {}, log_prob_pass(chunk=None, **MASTER), "whole")[0], "head_weight_cast")
    assert whole["count"] == 1 and whole["bytes"] == pytest.approx(per_chunk)
    half = named(run(tmp_path, {"tp": 2}, log_prob_pass(**MASTER), "tp2", devices=2)[0], "head_weight_cast")
    assert half["bytes"] == pytest.approx(per_chunk)  # two chunks of half the head
    longer, _ = run(tmp_path, {}, log_prob_pass(4096, **MASTER), "longer")  # loss_len past seq_len: its 512 positions
    assert named(longer, "head_weight_cast")["count"] == 4
    untied, _ = run(tmp_path, {}, log_prob_pass(**MASTER), "untied", model="qwen3_8b")
    assert named(untied, "head_weight_cast")["bytes"] == pytest.approx(2 * 4096 * 151936 * 3 * SPEC["copy_passes"])
    assert named(untied, "head_weight_transpose") is None


def test_the_casts_follow_the_fsdp_shard_and_sit_on_the_stage_with_the_head(tmp_path, with_scan):
    """On fsdp (shard_weights) each device casts its shard of the head, as it slices its shard of the layers; with
    pp the casts are the last stage's (the one with lm_head), whose rows the breakdown shows."""
    with_scan(SPEC)
    sharded = {"zero": True, "shard_weights": True, **MASTER}
    fsdp, _ = run(tmp_path, {"dp": 2}, log_prob_pass(**sharded), "fsdp", devices=2)
    assert named(fsdp, "head_weight_cast")["bytes"] == pytest.approx(2 * HEAD / 2 * 3 * SPEC["copy_passes"])
    assert named(fsdp, "head_weight_transpose")["bytes"] == pytest.approx(HEAD / 2 * 4 * SPEC["copy_passes"])
    staged, _ = run(tmp_path, {"pp": 2}, log_prob_pass(**MASTER), "pp2", devices=2)
    assert named(staged, "lm_head") and named(staged, "head_weight_cast")["count"] == 2


def test_weights_stored_as_the_pass_computes_cost_as_without_param_dtype(tmp_path, with_scan):
    with_scan(SPEC)
    plain, _ = run(tmp_path, {}, log_prob_pass(), "plain")
    same, _ = run(tmp_path, {}, log_prob_pass(param_dtype="bf16"), "same")
    assert same.breakdown_rows() == plain.breakdown_rows() and same.latency_s == plain.latency_s


def test_param_dtype_is_checked(tmp_path, with_scan):
    with_scan(SPEC)
    with pytest.raises(ConfigError, match="workload.param_dtype is 'float32'; valid: bf16, fp8, fp32"):
        run(tmp_path, {}, log_prob_pass(param_dtype="float32"), "long")
    with pytest.raises(ConfigError, match="workload.param_dtype is for mode prefill"):
        run(tmp_path, {}, {"mode": "train", "batch": 8, "seq_len": 512, **MASTER}, "train")
    with pytest.raises(ConfigError, match="workload.param_dtype needs workload.scanned: true"):  # casts not modelled
        run(tmp_path, {}, {**log_prob_pass(**MASTER), "scanned": False}, "unrolled")
    with pytest.raises(ConfigError, match="workload.param_dtype needs workload.scanned: true"):
        run(tmp_path, {}, prefill(**MASTER), "plain")
    with_scan(None)
    with pytest.raises(ConfigError, match="stack 'xla' has no scanned_forward"):
        run(tmp_path, {}, log_prob_pass(**MASTER), "none")


def test_passes_on_master_and_on_bf16_weights_in_one_sweep_equal_each_alone():
    """The same layout and shapes with and without param_dtype share their op costs, not their rows."""
    cfg, hw = model_config("qwen2_5_0_5b_instruct"), hardware("h200")
    layouts = [{"tp": 1}, {"tp": 1}, {"tp": 1}, {"tp": 2}, {"tp": 1}, {"tp": 1}]
    workloads = [log_prob_pass(), log_prob_pass(**MASTER), log_prob_pass(chunk=64, **MASTER), log_prob_pass(**MASTER),
                 log_prob_pass(chunk=None), log_prob_pass(chunk=None, **MASTER)]  # the last two: param_dtype alone
    alone = simulated_alone(cfg, hw, layouts, workloads, stack="xla")
    together = simulate_many(cfg, hw, layouts, workloads, stack="xla")
    for (summary, rows), result in zip(alone, together):
        assert result.summary() == summary and result.breakdown_rows() == rows
    assert [named(result, "head_weight_cast")["count"] if named(result, "head_weight_cast") else 0
            for result in together] == [0, 2, 4, 2, 0, 1]
