"""sims.benchmarks.layouts (issue 13): which sim_sweep layouts a node can measure, their K-layer predictions,
the static balanced routing of the parallel decode, the summary statistics, and (slow) a 2-process gloo
run whose tp=2 and ep=2 logits must equal tp=1's."""

import json
import math
import subprocess
import sys

import pytest
from sims_helpers import REPO, hardware, model_config

from sims import simulate
from sims.benchmarks.layouts import card_hardware, plan, ranks, repredict, spearman, summarise, sweep

RECIPE = REPO / "recipes/sim_sweep.yaml"


@pytest.fixture(scope="module")
def spec() -> dict:
    return sweep(RECIPE)


def test_sweep_reads_the_recipe_grid_and_workload(spec):
    assert spec["model"] == "qwen3_30b_a3b" and spec["hardware"] == "h100"
    assert len(spec["grid"]) == 16 and (8, 4) in spec["grid"]
    assert (spec["sim"]["mode"], spec["sim"]["batch"], spec["sim"]["context_len"]) == ("decode", 64, 4096)


def test_four_devices_measure_the_nine_layouts_that_split_them(spec):
    rows = plan(spec, model_config("qwen3_30b_a3b"), hardware("h100"), world=4, layers=4)
    planned = {(r["tp"], r["ep"]) for r in rows if r["status"] == "planned"}
    assert planned == {(tp, ep) for tp in (1, 2, 4) for ep in (1, 2, 4)}
    for row in rows:
        if row["status"] == "planned":
            assert row["devices"] == 4 and row["dp"] == 4 // row["tp"]
            assert 0 < row["predicted_s"] < row["predicted_full_s"]
        else:
            assert "tp=8" in row["reason"] or "ep=8" in row["reason"]


def test_eight_devices_measure_all_sixteen(spec):
    rows = plan(spec, model_config("qwen3_30b_a3b"), hardware("h100"), world=8, layers=4)
    assert [r["status"] for r in rows] == ["planned"] * 16


def test_prediction_is_for_the_same_k_layers_and_per_replica_batch(spec):
    hf = model_config("qwen3_30b_a3b")
    row = next(r for r in plan(spec, hf, hardware("h100"), world=4, layers=2) if (r["tp"], r["ep"]) == (2, 4))
    workload = {"mode": "decode", "batch": 64 * 2, "context_len": 4096, "dtype": "bf16"}
    short = simulate({**hf, "num_hidden_layers": 2}, hardware("h100"), {"tp": 2, "dp": 2, "ep": 4}, workload)
    assert row["predicted_s"] == pytest.approx(short.latency_s)


@pytest.mark.parametrize("card,name", [("NVIDIA H200", "h200"), ("NVIDIA H100 80GB HBM3", "h100"),
                                       ("NVIDIA A100-SXM4-80GB", "a100"), ("NVIDIA L4", None)])
def test_predictions_are_for_the_card_measured(card, name):
    assert card_hardware(card) == name


def test_a_saved_report_is_predicted_again_for_its_own_card(spec):
    saved = json.loads((REPO / "sims/benchmarks/results/h200x4_2026-11-26/layouts_4gpu_k4.json").read_text())
    assert saved["hardware"] == "h100" and saved["environment"]["device"] == "NVIDIA H200"
    report = repredict(saved)
    assert report["hardware"] == "h200" and report["repredicted_from"] == "h100"
    fresh = {(r["tp"], r["ep"]): r for r in plan(spec, model_config("qwen3_30b_a3b"), hardware("h200"), 4, 4)}
    for old, new in zip(saved["layouts"], report["layouts"]):
        assert {k: v for k, v in new.items() if "predicted" not in k and "error" not in k} == \
            {k: v for k, v in old.items() if "predicted" not in k and "error" not in k}  # measurements kept
        if new["status"] == "measured":
            assert new["predicted_s"] == fresh[(new["tp"], new["ep"])]["predicted_s"] != old["predicted_s"]
            assert new["error"] == pytest.approx(new["predicted_s"] / new["measured_s"] - 1)
    assert report["summary"] == summarise(report["layouts"])


@pytest.mark.parametrize("world", [4, 8])
def test_routing_plans_agree_between_ranks_and_balance_the_experts(world):
    from sims.benchmarks.layouts import Shapes, route_plan

    shapes = Shapes.of(model_config("qwen3_30b_a3b"))
    for tp in (1, 2, 4, 8)[: {4: 3, 8: 4}[world]]:
        for ep in (2, 4, 8)[: {4: 2, 8: 3}[world]]:
            plans = [route_plan(shapes, tp, ep, rank, 64) for rank in range(world)]
            for rank, p in enumerate(plans):
                first = rank - rank % ep
                for member in range(ep):  # what rank sends to a member is what that member expects from it
                    assert plans[first + member].recv_splits[rank % ep] == p.send_splits[member]
                assert sorted(p.unpermute) == list(range(len(p.send_rows)))
                assert len(set(p.expert_counts)) == 1, (tp, ep, rank)  # balanced, as the simulator assumes
                assert sum(p.expert_counts) == 64 // tp * shapes.top_k  # each member gets 1/ep of the group's copies


def test_ranks_and_spearman():
    assert ranks([3.0, 1.0, 2.0, 1.0]) == [4.0, 1.5, 3.0, 1.5]
    assert spearman([1, 2, 3], [10, 20, 30]) == pytest.approx(1.0)
    assert spearman([1, 2, 3], [3, 2, 1]) == pytest.approx(-1.0)
    assert spearman([1.0], [2.0]) is None


def test_summary_reports_errors_and_whether_the_predicted_best_is_the_measured_best():
    def row(tp, measured, predicted, throughput_measured, throughput_predicted):
        return {"tp": tp, "ep": 1, "status": "measured", "measured_s": measured, "predicted_s": predicted,
                "error": (predicted - measured) / measured, "error_full": 0.0, "max_abs_logit_diff": 0.0,
                "measured_tokens_per_s_per_device": throughput_measured,
                "predicted_tokens_per_s_per_device": throughput_predicted}

    rows = [row(1, 2.0, 1.0, 10, 30), row(2, 1.0, 1.5, 20, 20), {"tp": 8, "ep": 1, "status": "skipped"}]
    summary = summarise(rows)
    assert summary["measured"] == 1 + 1 and summary["skipped"] == 1
    assert summary["median_abs_error"] == pytest.approx((0.5 + 0.5) / 2)
    assert summary["fastest_step_measured"] == "tp2_ep1" and summary["fastest_step_predicted"] == "tp1_ep1"
    assert summary["fastest_step_agrees"] is False
    assert summary["best_throughput_measured"] == "tp2_ep1" and summary["best_throughput_agrees"] is False
    assert summary["spearman_step_time"] == pytest.approx(-1.0)


@pytest.mark.slow
def test_two_gloo_ranks_decode_every_layout_to_the_same_logits(tmp_path):
    out = tmp_path / "layouts.json"
    command = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--master_port", "29517",
               "-m", "sims.benchmarks.layouts", "--tiny", "--layers", "2", "--repeats", "2", "--warmup", "1",
               "--out", str(out)]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(out.read_text())
    assert report["layers_measured"] == 2 and report["environment"]["backend"] == "gloo"
    measured = {(r["tp"], r["ep"]): r for r in report["layouts"] if r["status"] == "measured"}
    assert set(measured) == {(1, 1), (1, 2), (2, 1), (2, 2)}
    assert len(report["layouts"]) == 16 and report["summary"]["skipped"] == 12
    for row in measured.values():
        assert row["mean_abs_logit"] > 0.1  # real logits, not zeros
        assert row["max_abs_logit_diff"] < 1e-4  # tp=2 and ep=2 compute what tp=1 computes
        assert row["measured_s"] > 0 and math.isfinite(row["error"]) and row["measured_full_s"] > row["measured_s"]
    summary = report["summary"]
    assert summary["measured"] == 4 and -1.0 <= summary["spearman_step_time"] <= 1.0
    assert isinstance(summary["fastest_step_agrees"], bool)


def test_tp1_decode_matches_transformers_qwen3_moe_with_the_same_weights_cache_and_routing(tmp_path):
    """The hand-written step is Qwen3-MoE decode: transformers' model with its weights, KV cache and the
    benchmark's expert choice gives the same logits (one process, gloo)."""
    import torch
    import torch.distributed as dist

    from sims.benchmarks.hf_steps import FixedCache, no_padding_masks
    from sims.benchmarks.layouts import TINY
    from sims.benchmarks.layouts_decode import DecodeModel, Mesh, Shapes
    from sims.calibration.kernels import build_hf_model

    hf = {**model_config("qwen3_30b_a3b"), **TINY, "num_hidden_layers": 2}
    batch, context = 3, 12
    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        ours = DecodeModel(Shapes.of(hf), Mesh(tp=1, ep=1), batch, context, torch.device("cpu"), torch.float32)
        ids = ours.token_ids()
        with torch.no_grad():
            expected = ours.step(ids)
    finally:
        dist.destroy_process_group()
    model = build_hf_model(hf, "cpu", "fp32")
    kv_width = hf["num_key_value_heads"] * hf["head_dim"]
    cache = FixedCache(2, batch, hf["num_key_value_heads"], hf["head_dim"], context, 1, "cpu", torch.float32)
    state = {"model.embed_tokens.weight": ours.embed, "lm_head.weight": ours.lm_head}
    for i, layer in enumerate(ours.layers):
        prefix = f"model.layers.{i}."
        state.update({prefix + "self_attn.q_proj.weight": layer["q"], prefix + "self_attn.o_proj.weight": layer["o"],
                      prefix + "self_attn.k_proj.weight": layer["kv"][:kv_width],
                      prefix + "self_attn.v_proj.weight": layer["kv"][kv_width:],
                      prefix + "mlp.gate.weight": layer["router"], prefix + "mlp.experts.gate_up_proj": layer["gate_up"],
                      prefix + "mlp.experts.down_proj": layer["down"]})
        cache.keys[i], cache.values[i] = layer["k_cache"].clone(), layer["v_cache"].clone()
    missing = set(state) - set(model.state_dict())
    assert not missing, missing
    model.load_state_dict(state, strict=False)

    def our_routing(module, args, output):
        probs = torch.softmax(output[0].float(), dim=-1).gather(1, ours.choice)
        return output[0], (probs / probs.sum(-1, keepdim=True)).to(output[0].dtype), ours.choice

    hooks = [layer.mlp.gate.register_forward_hook(our_routing) for layer in model.model.layers]
    positions = torch.full((batch, 1), context - 1)
    with torch.no_grad(), no_padding_masks(model):
        logits = model(input_ids=ids[:, None], position_ids=positions, past_key_values=cache, use_cache=True).logits
    for hook in hooks:
        hook.remove()
    torch.testing.assert_close(logits[:, -1], expected, rtol=1e-4, atol=1e-4)
