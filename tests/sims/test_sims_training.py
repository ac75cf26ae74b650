"""The training-step model: measured backward/forward ratios in place of the flat 2x, the loss over the
vocabulary, the gradient accumulation into fp32 main grads and clipping in the optimizer, by hand."""

import json

import pytest
from sims_helpers import hardware, model_config

from sims import build_graph, simulate
from sims.train_work import CLIP_BYTES_PER_PARAM, GRAD_ACCUMULATE_BYTES, optimizer_bytes_per_param
from sims.calibration.backward import BackwardRatios
from sims.calibration.fit import fit_table
from sims.calibration.table import BackwardMeasurement, EfficiencyTable
from sims.calibration.train_bench import derive_backward, parameter_shapes
from sims.memory import local_params
from sims.workload import parse_layout
from framework.core.errors import ConfigError

H100_HBM = 3.35e12
TRAIN = {"mode": "train", "batch": 4, "seq_len": 128, "microbatches": 2}
EXACT = {"op_classes": {name: {"compute": 1.0, "memory": 1.0, "floor_us": 0.0}
                        for name in ("gemm", "attention", "norm", "elementwise", "embedding", "optimizer")}}


def backward(op, op_class, forward_us, time_us):
    return {"op": op, "op_class": op_class, "dtype": "bf16", "flops": 1.0, "bytes": 1.0,
            "forward_us": forward_us, "time_us": time_us}


def table_file(tmp_path, name="table.json", **sections) -> str:
    path = tmp_path / name
    path.write_text(json.dumps({**EXACT, **sections}))
    return str(path)


def row(result, name):
    return next(r for r in result.breakdown_rows() if r["name"] == name)


def test_ratio_is_measured_at_its_sizes_log_linear_between_and_kept_beyond():
    ratios = BackwardRatios([BackwardMeasurement("q_proj", "gemm", "bf16", 1, 1, 10.0, 20.0),
                             BackwardMeasurement("q_proj", "gemm", "bf16", 1, 1, 1000.0, 3000.0),
                             BackwardMeasurement("attention", "attention", "bf16", 1, 1, 100.0, 250.0)], 2.0)
    assert ratios.ratio("q_proj", "gemm", 10e-6) == pytest.approx(2.0)
    assert ratios.ratio("q_proj", "gemm", 100e-6) == pytest.approx(2.5)  # halfway in log(forward time)
    assert ratios.ratio("q_proj", "gemm", 1e-6) == pytest.approx(2.0)
    assert ratios.ratio("q_proj", "gemm", 1.0) == pytest.approx(3.0)
    assert ratios.ratio("o_proj", "gemm", 1e-3) == pytest.approx(2.5)  # its class's median op ratio
    assert ratios.ratio("mlp_act", "elementwise", 1e-3) == 2.0  # nothing measured in the class


def test_the_loss_ratio_stands_for_itself_not_for_its_class():
    """The loss over the vocabulary is no graph node: its measured ratio must not become the ratio of
    elementwise graph ops that have none of their own."""
    ratios = BackwardRatios([BackwardMeasurement("mlp_act", "elementwise", "bf16", 1, 1, 10.0, 15.0),
                             BackwardMeasurement("cross_entropy", "elementwise", "bf16", 1, 1, 10.0, 3.5)], 2.0)
    assert ratios.ratio("cross_entropy", "elementwise", 10e-6) == pytest.approx(0.35)
    assert ratios.ratio("moe_permute", "elementwise", 10e-6) == pytest.approx(1.5)


def test_measured_backward_replaces_twice_forward(tmp_path):
    cfg = model_config("qwen2_5_0_5b_instruct")
    flat = simulate(cfg, hardware("h100", efficiency_table=table_file(tmp_path)), {"tp": 2}, TRAIN)
    measured = table_file(tmp_path, "measured.json", backward_measurements=[backward("q_proj", "gemm", 50.0, 175.0),
                                                           backward("attention", "attention", 50.0, 150.0),
                                                           backward("cross_entropy", "elementwise", 50.0, 25.0)])
    result = simulate(cfg, hardware("h100", efficiency_table=measured), {"tp": 2}, TRAIN)
    forward = row(flat, "q_proj")["time_s"] / 3
    assert row(result, "q_proj")["time_s"] == pytest.approx(forward * (1 + 3.5))
    assert row(result, "o_proj")["time_s"] == pytest.approx(row(flat, "o_proj")["time_s"] / 3 * 4.5)  # gemm class
    assert row(result, "attention")["time_s"] == pytest.approx(row(flat, "attention")["time_s"] / 3 * 4)
    assert row(result, "input_layernorm")["time_s"] == pytest.approx(row(flat, "input_layernorm")["time_s"])
    assert row(result, "mlp_act")["time_s"] == pytest.approx(row(flat, "mlp_act")["time_s"])  # not the loss's 0.5
    assert row(result, "cross_entropy")["time_s"] == pytest.approx(row(flat, "cross_entropy")["time_s"] / 3 * 1.5)
    assert row(result, "attn_all_reduce")["time_s"] == pytest.approx(row(flat, "attn_all_reduce")["time_s"])
    assert sum(r["time_s"] for r in result.breakdown_rows()) == pytest.approx(result.latency_s)
    for name in ("q_proj", "o_proj", "attention", "cross_entropy"):  # work counts the passes, time the ratios
        assert (row(result, name)["flops"], row(result, name)["bytes"]) == (row(flat, name)["flops"], row(flat, name)["bytes"])


def test_loss_accumulation_and_optimizer_by_hand(tmp_path):
    cfg = model_config("qwen2_5_0_5b_instruct")
    result = simulate(cfg, hardware("h100", efficiency_table=table_file(tmp_path)), {}, TRAIN)
    tokens_per_micro_batch = 2 * 128
    logits = tokens_per_micro_batch * cfg["vocab_size"]
    assert row(result, "cross_entropy")["time_s"] == pytest.approx(2 * 3 * logits * (2 + 4) / H100_HBM)
    split = simulate(cfg, hardware("h100", devices_per_node=2, efficiency_table=table_file(tmp_path)), {"tp": 2}, TRAIN)
    assert row(split, "cross_entropy")["time_s"] == pytest.approx(row(result, "cross_entropy")["time_s"] / 2)  # vocab/tp
    params = sum(local_params(build_graph(cfg, "train"), parse_layout({}), 0))
    assert params == pytest.approx(494_032_768)  # Qwen2.5-0.5B, tied embedding
    assert row(result, "grad_accumulate")["time_s"] == pytest.approx(2 * params * GRAD_ACCUMULATE_BYTES / H100_HBM)
    assert optimizer_bytes_per_param("bf16") == 30 + CLIP_BYTES_PER_PARAM
    assert row(result, "optimizer_step")["bytes"] == pytest.approx(params * 42)
    assert sum(r["time_s"] for r in result.breakdown_rows()) == pytest.approx(result.latency_s)


def test_loss_runs_on_the_last_stage_and_accumulation_on_every_one(tmp_path):
    cfg = model_config("qwen2_5_0_5b_instruct")
    hw = hardware("h100", efficiency_table=table_file(tmp_path))
    result = simulate(cfg, hw, {"pp": 2}, TRAIN)
    names = {r["name"] for r in result.breakdown_rows()}
    assert "grad_accumulate" in names
    assert ("cross_entropy" in names) == ("lm_head" in names)
    from sims import step, train_rows
    from sims.calculator import Context
    from sims.hardware import hardware_spec
    from sims.workload import parse_workload

    graph = build_graph(cfg, "train")
    ctx = Context.for_step(graph, hardware_spec(hw), parse_layout({"pp": 2}), parse_workload(TRAIN))
    heads = step._stage_weights(graph, ctx.workload, 2)[3]  # which stages run lm_head
    per_stage = [[row[0] for row in rows] for rows in train_rows.train_rows(graph, ctx, None, heads)]
    assert per_stage == [["grad_accumulate"], ["cross_entropy", "grad_accumulate"]]  # lm_head on the last stage


def test_measured_optimizer_and_loss_curves_replace_the_roofline(tmp_path):
    cfg = model_config("qwen2_5_0_5b_instruct")
    params = 494_032_768
    table = table_file(tmp_path, op_measurements=[
        {"op": "optimizer_step", "dtype": "bf16", "flops": 10.0 * params, "bytes": 42.0 * params, "time_us": 20000.0},
        {"op": "grad_accumulate", "dtype": "bf16", "flops": params, "bytes": 10.0 * params, "time_us": 3000.0}])
    result = simulate(cfg, hardware("h100", efficiency_table=table), {}, TRAIN)
    assert row(result, "optimizer_step")["time_s"] == pytest.approx(0.020)
    assert row(result, "grad_accumulate")["time_s"] == pytest.approx(2 * 0.003)


def test_backward_measurements_load_save_and_stay_optional():
    entry = backward("q_proj", "gemm", 50.0, 120.0)
    table = EfficiencyTable.from_dict({"backward_measurements": [entry]})
    assert table.to_dict()["backward_measurements"] == [entry]
    assert "backward_measurements" not in EfficiencyTable.from_dict({}).to_dict()  # old tables: unchanged files
    with pytest.raises(ConfigError, match="forward_us"):
        EfficiencyTable.from_dict({"backward_measurements": [{**entry, "forward_us": 0}]})
    with pytest.raises(ConfigError, match="op_class"):
        EfficiencyTable.from_dict({"backward_measurements": [{**entry, "op_class": "conv"}]})


def test_backward_is_the_pair_minus_the_forward_and_fits_into_the_table():
    point = {"op": "q_proj", "dtype": "bf16", "mode": "train", "batch": 1, "seq_len": 8, "kv_len": 8, "tokens": 8,
             "flops": 1e9, "bytes": 1e7}
    measurements = [{**point, "benchmark": "q_proj", "op_class": "gemm", "time_us": 40.0},
                    {**point, "benchmark": "q_proj_forward_backward", "backward_of": "gemm", "time_us": 130.0},
                    {"benchmark": "cross_entropy", "op": "cross_entropy", "op_class": "elementwise",
                     "own_op_only": True, "dtype": "bf16", "flops": 1e6, "bytes": 1e9, "time_us": 5000.0}]
    derived = derive_backward(measurements)
    assert [(d["op"], d["forward_us"], d["time_us"]) for d in derived] == [("q_proj", 40.0, 90.0)]
    table = fit_table(measurements + derived, hardware("h100"))
    assert [(m.op, m.forward_us, m.time_us) for m in table.backward_measurements] == [("q_proj", 40.0, 90.0)]
    assert "cross_entropy" in table.ops
    assert table.op_classes["elementwise"] == EfficiencyTable().op_classes["elementwise"]  # not a class member


def test_a_pair_takes_its_own_models_forward():
    # two models of one vocabulary run the log-softmax on the same work at one batch: each backward is its own pair
    # less its own forward (session 24's vocab file paired Qwen2.5-0.5B's at 16 rows with Qwen3-8B's forward)
    point = {"op": "cross_entropy", "dtype": "bf16", "mode": "train", "batch": 16, "seq_len": 128, "kv_len": 128,
             "tokens": 2048, "flops": 1e6, "bytes": 1e9}
    measurements = [{**point, "model": model, "benchmark": "cross_entropy", "op_class": "elementwise", "time_us": fwd}
                    for model, fwd in (("a", 580.0), ("b", 390.0))]
    measurements += [{**point, "model": model, "benchmark": "cross_entropy_forward_backward",
                      "backward_of": "elementwise", "time_us": both} for model, both in (("a", 1130.0), ("b", 1600.0))]
    derived = derive_backward(measurements)
    assert [(d["forward_us"], d["time_us"]) for d in derived] == [(580.0, 550.0), (390.0, 1210.0)]


def test_parameter_shapes_count_the_model_once():
    cfg = model_config("qwen2_5_0_5b_instruct")
    shapes = parameter_shapes(build_graph(cfg, "train", "torch_fused"))
    total = sum(a * (b if len(s) > 1 else 1) for s in shapes for a, b in [(s[0], s[-1])])
    assert total == 494_032_768


def test_measured_megatron_and_grpo_steps_are_repredicted():
    from sims_helpers import REPO

    from sims.benchmarks.train_repredict import grpo_cases, megatron_cases, predict

    megatron = REPO / "framework/backends/megatron/benchmarks/results"
    grpo = REPO / "framework/backends/maxtext/benchmarks/results/h100_2026-11-26_s8_call2/layouts_4gpu.json"
    cases = megatron_cases([str(megatron / f"megatron_{n}.json") for n in ("1b", "dp2", "tp2")], REPO)
    cases += grpo_cases([str(grpo)], REPO)
    assert [c["measured_s"] for c in cases] == pytest.approx([0.7721, 0.4219, 0.5326, 0.6858, 0.6858], abs=1e-3)
    assert [c["workload"].get("microbatches") for c in cases] == [8, 4, 8, None, 8]
    rows = predict(cases, REPO)
    assert all(r["predicted_s"] > 0 and "cross_entropy" in r["breakdown_s"] for r in rows)
    assert rows[3]["predicted_s"] > rows[4]["predicted_s"]  # eight optimizer steps instead of one


def test_the_saved_held_out_training_steps_stay_predicted_within_five_percent():
    """The session-10 H100 training steps (plain torch, never calibration inputs as whole steps) re-predicted
    with the shipped tables: a change to the training model that loses them fails here."""
    import statistics

    from sims_helpers import REPO

    from sims.benchmarks.train_repredict import held_out_cases, predict

    steps = REPO / "sims/benchmarks/results/h100_2026-11-26_s10_train/train_steps.json"
    rows = predict(held_out_cases([str(steps)], REPO), REPO)
    plain = [abs(r["error"]) for r in rows if "recompute" not in r["name"]]
    assert len(plain) == 3 and statistics.median(plain) <= 0.05 and max(plain) <= 0.05


def test_a_loss_over_the_last_positions_projects_only_those(tmp_path):
    """loss_len (GRPO: the completion): lm_head and the loss run over those positions of each sequence, the
    layers over all of them; a chunked loss then holds one chunk of those positions' logits."""
    cfg = model_config("qwen2_5_0_5b_instruct")
    hw = hardware("h100", efficiency_table=table_file(tmp_path))
    whole = simulate(cfg, hw, {}, TRAIN)
    completion = simulate(cfg, hw, {}, {**TRAIN, "loss_len": 32})
    for name in ("lm_head", "cross_entropy"):
        assert row(completion, name)["flops"] == pytest.approx(row(whole, name)["flops"] * 32 / 128)
    assert row(completion, "mlp_down_proj")["time_s"] == row(whole, "mlp_down_proj")["time_s"]
    unchunked, chunked = (simulate(cfg, hw, {}, {**TRAIN, "loss_len": 32, "logits_chunk": chunk})
                          .memory_breakdown_gb["activations"] for chunk in (None, 16))
    rows = TRAIN["batch"] // TRAIN["microbatches"]
    assert unchunked - chunked == pytest.approx(rows * (32 - 16) * cfg["vocab_size"] * 4 / 1e9)


@pytest.mark.parametrize("model", ("qwen3_8b", "qwen3_30b_a3b", "deepseek_v3"))
def test_pass_multipliers_of_every_node_at_once_equal_passes_per_node(model):
    """step.pass_multipliers (one array per graph and workload) equals step.passes node by node: inference once,
    training forward + backward (collectives once more), recompute adding a forward of the layer ops it does not
    keep."""
    from sims.step import pass_multipliers, passes
    from sims.workload import parse_workload

    workloads = [{"mode": "prefill", "seq_len": 64}, {"mode": "train", "seq_len": 64},
                 {"mode": "train", "seq_len": 64, "recompute": True},
                 {"mode": "train", "seq_len": 64, "recompute": True, "recompute_keeps": ["gemm"]},
                 {"mode": "train", "seq_len": 64, "recompute": True, "recompute_keeps": ["attention", "norm"]}]
    for record in workloads:
        workload = parse_workload(record)
        graph = build_graph(model_config(model), workload.mode)
        expected = [passes(node, workload, graph.meta["num_layers"])[0] for node in graph.nodes]
        assert pass_multipliers(graph, workload).tolist() == expected, record
        assert len(set(expected)) >= (3 if workload.recompute else 2 if workload.mode == "train" else 1)
