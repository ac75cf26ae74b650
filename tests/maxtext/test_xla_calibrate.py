"""The xla-stack calibration (benchmarks/xla_calibrate.py) in --tiny mode on the CPU: every node of the
simulator's xla graph is timed through the backend's JAX code, the table is fitted from exactly those
measurements, and the held-out whole-model cases are predicted with it."""

import json

import pytest

from framework.backends.maxtext.benchmarks import xla_calibrate, xla_whole_steps
from sims.builders import build_graph
from sims.calculator import OP_CLASS
from sims.calibration.fit import fit_table
from sims.calibration.table import load_table


@pytest.mark.slow
def test_tiny_calibration_times_every_node_and_fits_the_table_from_them(tmp_path):
    report = xla_calibrate.main(["--tiny", "--out", str(tmp_path)])
    measurements = json.loads((tmp_path / "microbench.json").read_text())

    # Every measurable node of the xla graph of each tiny model was timed, with a positive time.
    for name, (conf_name, layers) in xla_calibrate.TINY["models"].items():
        graph = build_graph(xla_calibrate.model_config(conf_name, layers), "prefill", "xla")
        wanted = {n.name for n in graph.nodes if not n.is_comm and OP_CLASS[n.op_type] in xla_calibrate.BENCHMARKS}
        timed = {m["op"] for m in measurements if "op" in m}
        assert wanted <= timed, f"{name}: untimed nodes {wanted - timed}"
    assert {"copy", "launch"} <= {m["benchmark"] for m in measurements}
    assert all(m["time_us"] > 0 and m["timing"] == "xla_fori_loop" for m in measurements)
    grid = {(m["batch"], m["kv_len"]) for m in measurements if m.get("op") == "attention" and m["mode"] == "decode"}
    assert set(xla_calibrate.TINY["attention_grid"]) <= grid

    # The written table is the fit of exactly these measurements (same code path as the torch tables).
    table = load_table(tmp_path / "cpu_xla.json")
    assert table.stack == "xla"
    refit = fit_table(measurements, report["hardware"], source=table.source, stack="xla")
    assert refit.to_dict() == table.to_dict()
    gemms = [m for m in measurements if m["op_class"] == "gemm"]
    assert sorted((g.m, g.n, g.k, g.time_us) for g in table.gemm_measurements) == sorted(
        (m["m"], m["n"], m["k"], m["time_us"]) for m in gemms)

    # Held-out whole-model cases: measured, and predicted with both the built-in factors and the table.
    cases = json.loads((tmp_path / "accuracy.json").read_text())["cases"]
    assert len(cases) == sum(len(workloads) for *_, workloads in xla_calibrate.TINY["held_out"])
    for case in cases:
        assert case["held_out"] and case["time_us"] > 0
        assert case["predicted_default_us"] > 0 and case["predicted_calibrated_us"] > 0
    assert any(c["predicted_default_us"] != c["predicted_calibrated_us"] for c in cases)
    assert "calibrated" in (tmp_path / "accuracy.md").read_text()
    # Each model's first held-out prefill: its compiled program is kept (the while loop over the layers)
    # and it is timed again with the layers unrolled, outside the held-out accuracy.
    assert "while" in (tmp_path / "hlo" / "tiny_qwen3_prefill_b1_s32.txt").read_text()
    unrolled = json.loads((tmp_path / "accuracy.json").read_text())["unrolled_prefill"]
    assert [(u["model"], u["workload"]) for u in unrolled] == [("tiny_qwen3", cases[0]["workload"])]
    assert unrolled[0]["time_us"] > 0 and not unrolled[0]["held_out"]

    # The re-prediction of measured GRPO steps takes the table for the xla stack only.
    from framework.backends.maxtext.benchmarks import xla_repredict
    from framework.core.paths import REPO_ROOT

    raw = REPO_ROOT / "framework/backends/maxtext/benchmarks/results/h100_2026-11-26_s8_call2/layouts_2gpu.json"
    result = xla_repredict.main([str(raw), "--table", str(tmp_path / "cpu_xla.json"), "--out", str(tmp_path / "re")])
    assert len(result["rows"]) == len(json.loads(raw.read_text())["layouts"])
    assert all(r["built_in"]["rollout_s"] != r["table"]["rollout_s"] for r in result["rows"])
    assert (tmp_path / "re" / "repredict.md").is_file()


def test_unrolled_prefill_computes_the_scanned_prefill():
    """The scan-cost comparison is fair: the unrolled layers give the scanned program's logits."""
    import jax
    import jax.numpy as jnp
    from flax import linen as nn

    from framework.backends.maxtext.models import ModelConfig, Transformer
    from framework.backends.maxtext.models.transformer import unstack_layers

    config = ModelConfig.from_hf_config(xla_calibrate.model_config("tiny_qwen3", None), param_dtype="float32",
                                        dtype="float32").for_platform("none", "auto", "auto", "cpu")
    model = Transformer(config)
    ids = jnp.zeros((1, 1), jnp.int32)
    params = nn.unbox(model.init(jax.random.key(0), ids, ids, jnp.ones((1, 1), bool))["params"])
    tokens = jax.random.randint(jax.random.key(1), (2, 24), 0, config.vocab_size)
    mask = jnp.ones(tokens.shape, bool)
    scanned, unrolled = xla_whole_steps.prefill_programs(model, config)
    expected = jax.jit(scanned)(tokens, mask, params)
    assert expected.shape == (2, 1, config.vocab_size)
    assert jnp.allclose(jax.jit(unrolled)(tokens, mask, unstack_layers(params)), expected, atol=1e-5)


def test_a_run_summary_is_read_as_a_grpo_step_report():
    """`python run.py` GRPO runs are re-predicted too: shapes from the run's config, phase times the median
    of the steps after the compiling one (the step time then equals the trainer's own measured_step_s)."""
    from pathlib import Path

    from framework.backends.maxtext.benchmarks.xla_repredict import runs
    from framework.core.paths import REPO_ROOT

    run_dir = REPO_ROOT / "framework/backends/maxtext/benchmarks/results/h100_2026-11-26_s10_callA/recipe"
    [(label, report)] = runs(Path(run_dir / "summary.json"))
    summary = json.loads((run_dir / "summary.json").read_text())["result"]["metrics"]
    assert label == "h100_2026-11-26_s10_callA/recipe"
    assert (report["micro_batch"], report["remat"], report["prompts"], report["generations"]) == (128, "full", 16, 8)
    assert report["step_s"] == pytest.approx(summary["measured_step_s"])
    # one device, the rollout on the update's: no groups of its own, the run's own move time (none here)
    assert "rollout_groups" not in report and report["preflight_reshard_s"] == summary.get("preflight_reshard_s", 0.0)
    assert 0 < report["rollout_s"] < report["step_s"] and 0 < report["update_s"] < report["step_s"]


def test_a_layouts_file_without_its_remat_takes_the_one_given():
    """grpo_layouts files of session 10 and before do not record the remat policy (their call.sh does):
    --remat-of supplies it, and a recorded one is kept."""
    from pathlib import Path

    from framework.backends.maxtext.benchmarks.xla_repredict import runs
    from framework.core.paths import REPO_ROOT

    path = REPO_ROOT / "framework/backends/maxtext/benchmarks/results/h200x2_2026-11-26_s10_callB/layouts_2gpu_mb128.json"
    assert {report["remat"] for _, report in runs(path)} == {"none"}
    assert {report["remat"] for _, report in runs(path, "full")} == {"full"}


def test_a_run_that_shared_its_prompts_is_re_predicted_with_the_shared_prefix(tmp_path):
    """summary.json records the sampler's choice (shared_prefix, session 17): the re-prediction costs that decode."""
    import shutil
    from pathlib import Path

    from framework.backends.maxtext.benchmarks.xla_repredict import phases, runs
    from framework.core.paths import REPO_ROOT

    source = REPO_ROOT / "framework/backends/maxtext/benchmarks/results/h100_2026-11-26_s10_callA/recipe"
    shutil.copytree(source, tmp_path / "run")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    summary["result"]["metrics"]["shared_prefix"] = True
    (tmp_path / "run" / "summary.json").write_text(json.dumps(summary))
    [(_, repeated)], [(_, shared)] = runs(Path(source / "summary.json")), runs(tmp_path / "run" / "summary.json")
    assert (repeated["shared_prefix"], shared["shared_prefix"]) == (False, True)
    assert phases(shared, None)["rollout_s"] != phases(repeated, None)["rollout_s"]


def test_a_run_with_the_extra_forward_passes_is_re_predicted_with_them():
    """A run's grpo.beta and grpo.ppo_epochs are in its config: the re-prediction prices the reference's and the old
    log-prob passes as the preflight does (session 22's beta runs on one H200): the recipe's update, plus one pass
    per micro-batch with beta, plus two updates and two passes with ppo_epochs 2."""
    import argparse
    import dataclasses

    from framework.backends.maxtext.benchmarks.grpo_step import grpo_task
    from framework.backends.maxtext.benchmarks.xla_repredict import phases, runs
    from framework.backends.maxtext.trainers.preflight import grpo_phases
    from framework.core.paths import REPO_ROOT, load_conf
    from sims import simulate

    recipe = REPO_ROOT / "framework/backends/maxtext/benchmarks/results/h200_2026-11-28_s22_beta/recipe"
    table = str(REPO_ROOT / "sims/calibration/tables/h200_xla.json")
    updates = {}
    for name in ("as_typed", "beta", "beta_epochs2"):
        [(_, report)] = runs(recipe / name / "summary.json")
        updates[name] = phases(report, table)["update_s"]
    [(_, report)] = runs(recipe / "beta" / "summary.json")
    args = argparse.Namespace(**{key: report[key] for key in ("prompts", "generations", "new_tokens", "dtype")},
                              prompt_tokens=report["prompt_tokens"], micro_batch=report["micro_batch"])
    task = dataclasses.replace(grpo_task(args), beta=report["beta"])
    (forward,) = [workload for phase, workload, _ in grpo_phases(task, zero=False) if phase == "forward"]
    assert forward["scanned"] and forward["loss_len"] == report["new_tokens"]  # the completion's log-probs
    hardware = {**load_conf("hardware", "h200")["hardware"], "efficiency_table": table}
    one_pass = simulate(load_conf("model", report["model"])["hf_config"], hardware, {"tp": 1}, forward,
                        stack="xla").latency_s
    assert updates["beta"] == pytest.approx(updates["as_typed"] + one_pass, rel=1e-9)
    assert updates["beta_epochs2"] == pytest.approx(2 * updates["as_typed"] + 2 * one_pass, rel=1e-9)


def test_other_models_replace_the_plans_models_and_are_held_out_as_whole_steps():
    plan = xla_calibrate.with_models(xla_calibrate.FULL, ["qwen2_5_1_5b_instruct"])
    assert plan["models"] == {"qwen2_5_1_5b_instruct": ("qwen2_5_1_5b_instruct", None)}
    (name, (conf_name, layers), cases), = plan["held_out"]
    assert (name, conf_name, layers) == ("qwen2_5_1_5b_instruct", "qwen2_5_1_5b_instruct", None)
    assert {c["mode"] for c in cases} == {"prefill", "decode"}
    assert plan["workloads"] == xla_calibrate.FULL["workloads"]  # the same calibration points
    assert xla_calibrate.model_config(conf_name, layers)["hidden_size"] == 1536


def test_a_run_with_its_own_rollout_devices_is_predicted_overlapped():
    """A run.py GRPO run that decoded on devices of its own (grpo.rollout_lag=1, placement separate) is re-predicted
    as the preflight predicts it: the rollout on its mesh beside the update, the step about the longer phase."""
    from pathlib import Path

    from framework.backends.maxtext.benchmarks.xla_repredict import phases, runs
    from framework.core.paths import REPO_ROOT

    results = REPO_ROOT / "framework/backends/maxtext/benchmarks/results"
    run_dir = results / "h200x4_2026-11-27_s15_pipeline/call5/q15b/lag1_1_5b"
    [(_, report)] = runs(Path(run_dir / "summary.json"))
    assert (report["devices"], report["rollout_devices"], report["rollout_groups"]) == (2, 2, 1)
    assert report["rollout_mesh"] == {"data": 2, "fsdp": 1, "expert": 1, "tensor": 1}
    predicted = phases(report, None)
    assert max(predicted["rollout_s"], predicted["update_s"]) <= predicted["step_s"]
    assert predicted["step_s"] < 0.9 * (predicted["rollout_s"] + predicted["update_s"])  # overlapped, not summed


def test_saved_held_out_steps_are_re_predicted_with_the_shipped_table():
    """--repredict (no GPU): the 1.5B whole steps the session-16 H200 run held out, against h200_xla.json, which
    holds that run's kernels (without them its decode was predicted 23% slow)."""
    from framework.core.paths import REPO_ROOT

    run = REPO_ROOT / "sims/benchmarks/results/h200_2026-11-28_s16_xla15b/accuracy.json"
    cases = xla_calibrate.main(["--repredict", str(REPO_ROOT / "sims/calibration/tables/h200_xla.json"), str(run)])
    decode = {case["name"]: case["error_calibrated"] for case in cases[str(run)]
              if case["workload"]["mode"] == "decode"}
    assert len(decode) == 2 and all(abs(error) < 0.10 for error in decode.values()), decode


def test_a_held_out_prefill_is_predicted_as_the_scanned_pass_it_timed():
    """The held-out prefill is the backend's scanned pass (its unrolled twin is not): predicted with the scan's
    weight slices (sims/scan_forward.py) from a session-19 H200 run the scan's fit never saw, within 5% (without
    them 25% short)."""
    from framework.backends.maxtext.benchmarks.xla_whole_steps import sim_workload
    from framework.core.paths import REPO_ROOT

    prefill = {"mode": "prefill", "batch": 1, "seq_len": 512}
    assert sim_workload(prefill, "bf16", "model")["scanned"] is True
    assert "scanned" not in sim_workload(prefill, "bf16", "unrolled_prefill")
    assert "scanned" not in sim_workload({"mode": "decode", "batch": 8, "context_len": 512}, "bf16", "model")
    run = REPO_ROOT / "sims/benchmarks/results/h200_2026-11-28_s19_xla15b/accuracy.json"
    cases = xla_calibrate.main(["--repredict", str(REPO_ROOT / "sims/calibration/tables/h200_xla.json"), str(run)])
    (error,) = [case["error_calibrated"] for case in cases[str(run)] if case["workload"]["mode"] == "prefill"]
    assert abs(error) < 0.05, error


@pytest.mark.parametrize("argv,message", [
    (["--tiny", "--out", "OUT", "--models", "tiny_qwen2,nosuch"], "--models: nosuch not in conf/model; valid: "),
    (["--repredict", "sims/calibration/tables/h200_xla.json"], "--repredict takes a table, then one or more"),
    (["--repredict", "no_table.json", "no_run.json"], "no such file: no_table.json, no_run.json")])
def test_bad_calibration_arguments_are_one_line_errors(argv, message, capsys, tmp_path):
    with pytest.raises(SystemExit) as exit_:
        xla_calibrate.main([str(tmp_path) if a == "OUT" else a for a in argv])
    assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_a_merged_gemm_is_timed_with_one_output_and_with_its_parts_apart():
    # Where XLA merges the group into one GEMM, separate outputs cost a slice copy the step never runs; where it
    # does not (large prefill shapes), the concatenation is the copy: both forms compute the same parts.
    import jax
    import numpy as np

    from framework.backends.maxtext.benchmarks.xla_kernels import XlaKernels

    config = xla_calibrate.model_config("tiny_qwen2", 1)
    kernels = XlaKernels(config, "float32", "cpu")
    heads, kv_heads = config["num_attention_heads"], config["num_key_value_heads"]
    head_dim = config.get("head_dim") or config["hidden_size"] // heads
    for name, width, parts in (("qkv_proj", (heads + 2 * kv_heads) * head_dim, ("q_proj", "k_proj", "v_proj")),
                               ("mlp_gate_up_proj", 2 * config["intermediate_size"], ("gate_proj", "up_proj"))):
        bench = kernels._gemm(name, 2, 3)
        x, params = bench.make_args()
        out = jax.jit(bench.fn)(x, params)
        assert out.shape == (2, 3, width), name
        # Each part is its module's x @ kernel + bias, side by side in the order of the model's modules.
        expected = []
        for part in params:
            kernel = np.asarray(part["kernel"]).reshape(config["hidden_size"], -1)
            bias = np.asarray(part["bias"]).reshape(-1) if "bias" in part else 0.0
            expected.append(np.asarray(x) @ kernel + bias)
        np.testing.assert_allclose(np.asarray(out), np.concatenate(expected, axis=-1), rtol=1e-5, atol=1e-5)
        apart = jax.jit(bench.alternative.fn)(x, params)
        for got, want in zip(apart, expected, strict=True):
            np.testing.assert_allclose(np.asarray(got), want.reshape(2, 3, -1), rtol=1e-5, atol=1e-5)
    assert kernels._gemm("o_proj", 2, 3).alternative is None


def test_a_bench_with_another_form_is_timed_both_ways_and_keeps_the_faster():
    import jax.numpy as jnp

    from framework.backends.maxtext.benchmarks.xla_backward import with_backward
    from framework.backends.maxtext.benchmarks.xla_kernels import Bench, LoopTimer, LoopTiming

    class CannedTimer(LoopTimer):  # each form's time from a table: the choice, not the clock, is under test
        def time(self, bench, bytes_touched, estimate_s, target_s=None):
            if bench.alternative is not None:
                return super().time(bench, bytes_touched, estimate_s, target_s)
            return LoopTiming(canned[bench.fn], 0.0, 1, 1, 0.0)

    def one(x):
        return x + 1

    def other(x):
        return x * 2

    args = lambda: (jnp.ones(4),)  # noqa: E731
    timer = CannedTimer(cpu=True, repeats=1, target_s=1e-3)
    cases = (({one: 3.0, other: 5.0}, 3.0, "a", 5.0), ({one: 7.0, other: 2.0}, 2.0, "b", 7.0))
    for canned, fastest, form, slower in cases:
        timing = timer.time(Bench(one, args, form="a", alternative=Bench(other, args, form="b")), 16, 1e-6)
        assert (timing.time_us, timing.form, timing.other_us) == (fastest, form, slower)
        assert xla_calibrate.timing_fields(timing)["form"] == form  # recorded beside the time
    # The training kernels' forward + backward bench keeps the other form too, as its own forward + backward.
    other_pair = with_backward(Bench(one, args, alternative=Bench(other, args))).alternative
    x, cotangent = other_pair.make_args()
    outputs, (gradient,) = other_pair.fn(x, cotangent)
    assert jnp.allclose(outputs, x * 2) and jnp.allclose(gradient, 2 * cotangent)


def test_a_training_kernel_takes_its_forward_in_the_form_whose_forward_and_backward_was_kept():
    # The backward is derived as (forward + backward) - forward: both must be the same form, even where the other
    # form's forward alone is faster.
    from framework.backends.maxtext.benchmarks import xla_backward
    from framework.backends.maxtext.benchmarks.xla_kernels import LoopTimer, LoopTiming

    class CannedTimer(LoopTimer):
        def time(self, bench, bytes_touched, estimate_s, target_s=None):
            if bench.alternative is not None:
                return super().time(bench, bytes_touched, estimate_s, target_s)
            pair = bench.fn.__name__ == "forward_backward"
            canned = {"one output": 20.0, "parts apart": 10.0} if pair else {"one output": 3.0, "parts apart": 5.0}
            return LoopTiming(canned.get(bench.form, 1.0), 0.0, 1, 1, 0.0)

    plan = xla_backward.TINY
    name, conf_name, workloads, _ = plan["models"][0]
    hardware = xla_calibrate.hardware_named("cpu", "cpu", True)
    records = xla_backward.measure(name, xla_calibrate.model_config(conf_name, None), hardware, plan, workloads[:1],
                                   CannedTimer(True, 1, 1e-3), "cpu", lambda _: None, float("inf"), update=False)
    merged = [r for r in records if r.get("op", "").endswith("gate_up_proj")]
    assert merged and all(r["form"] == "parts apart" for r in merged)
    forward = next(r for r in merged if r["benchmark"] == r["op"])
    assert forward["time_us"] == 5.0  # the kept pair's form, not the faster forward alone (3.0)


@pytest.mark.parametrize("content, expected", [
    (None, "m.json: cannot read it (No such file or directory)"), ("garbage", "m.json: not JSON (Expecting value"),
    ("[]", "m.json: a JSON list, not a report; valid: a grpo_step"), ("{}", "has no model, hardware, prompts"),
    ('{"layouts": {"a": {}}, "hardware": "h100"}', "m.json: no measured step in it (no layout with step_s)")])
def test_a_file_that_is_no_report_is_one_line_naming_it(content, expected, tmp_path, capsys):
    from framework.backends.maxtext.benchmarks import xla_repredict

    path = tmp_path / "m.json"
    if content is not None:
        path.write_text(content)
    table = str(xla_repredict.Path(__file__).parents[2] / "sims/calibration/tables/h200_xla.json")
    with pytest.raises(SystemExit) as exit_:
        xla_repredict.main([str(path), "--table", table, "--out", str(tmp_path / "re")])
    assert exit_.value.code == 2
    assert expected in capsys.readouterr().err.strip().splitlines()[-1]
    assert not (tmp_path / "re").exists()


@pytest.mark.parametrize("args, expected", [(["--table", "/no/table.json"], "--table: /no/table.json is not a file"),
                                            (["--remat-of", "full"], "--remat-of: 'full' has no '='")])
def test_a_bad_table_or_remat_option_is_one_line(args, expected, tmp_path, capsys):
    from framework.backends.maxtext.benchmarks import xla_repredict

    table = ["--table", str(xla_repredict.Path(__file__).parents[2] / "sims/calibration/tables/h200_xla.json")]
    with pytest.raises(SystemExit) as exit_:
        xla_repredict.main([str(tmp_path / "m.json"), *table, "--out", str(tmp_path / "re"), *args])
    assert exit_.value.code == 2 and expected in capsys.readouterr().err
