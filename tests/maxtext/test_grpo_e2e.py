"""`python run.py recipe=grpo_gsm8k_cpu` end to end, and the maxtext patches.

The run uses a KL penalty and two PPO epochs, so the reference and old log-prob passes run too.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from framework.core.loggers import read_metrics
from framework.core.patches import PatchContext, Phase
from tests.conftest import compose_config, run_cli

jax = pytest.importorskip("jax")

RUN = ["recipe=grpo_gsm8k_cpu", "grpo.steps=2", "grpo.beta=0.04", "grpo.ppo_epochs=2", "progress=false"]
RECORDS = ["config.yaml", "overrides.yaml", "env.json", "patches.json", "metrics.jsonl", "summary.json", "run.log"]
STEP_METRICS = [
    "reward_mean", "reward_std", "accuracy", "kl", "clip_fraction", "entropy", "completion_length",
    "rollout_tokens_per_s", "update_tokens_per_s", "step_time_s", "loss", "grad_norm", "learning_rate",
    *[f"reward_{name}_{stat}" for name in ("correctness", "format", "tag_count") for stat in ("mean", "std")],
]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("crucible_cache")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory, cache_dir):
    """One run from an empty cache: the tiny model is built and every program compiled afresh."""
    run_dir = tmp_path_factory.mktemp("grpo_e2e")
    proc = run_cli([*RUN, f"hydra.run.dir={run_dir}"], env={"CRUCIBLE_CACHE": str(cache_dir)})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return run_dir


@pytest.mark.slow
def test_run_dir_holds_every_record_a_checkpoint_and_the_export(run_dir):
    missing = [name for name in RECORDS if not (run_dir / name).is_file()]
    assert not missing
    assert (run_dir / "checkpoints" / "step_2" / "state.safetensors").is_file()
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in (run_dir / "hf_export").iterdir()}
    assert "traceback.txt" not in os.listdir(run_dir)


@pytest.mark.slow
def test_metrics_have_one_row_per_step_with_the_named_metrics(run_dir):
    rows = read_metrics(run_dir / "metrics.jsonl")
    assert [row["step"] for row in rows] == [1, 2]
    for row in rows:
        assert not [m for m in STEP_METRICS if not isinstance(row.get(m), (int, float))], row
        assert row["rollout_tokens_per_s"] > 0 and row["update_tokens_per_s"] > 0 and row["entropy"] > 0
    assert "eval_accuracy" in rows[1] and 0.0 <= rows[1]["eval_accuracy"] <= 1.0  # eval.every=2


@pytest.mark.slow
def test_summary_is_ok_with_preflight_against_measured_step_time(run_dir):
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["success"] and summary["backend"] == "maxtext"
    metrics = summary["metrics"]
    assert metrics["preflight_predicted_step_s"] > 0 and metrics["measured_step_s"] > 0
    assert metrics["steps_completed"] == 2 and summary["result"]["samples"] == 2 * 4 * 4
    artifacts = summary["result"]["artifacts"]
    assert artifacts["hf_export"] == str(run_dir / "hf_export")
    assert artifacts["last_checkpoint"].endswith("checkpoints/step_2")


@pytest.mark.slow
def test_patch_report_says_what_applied_and_why_others_did_not(run_dir):
    report = {p["id"]: p for p in json.loads((run_dir / "patches.json").read_text())["patches"]}
    assert report["maxtext.compilation_cache"]["status"] == "applied"
    assert report["maxtext.gpu_xla_flags"]["status"] == "skipped"
    assert "not in ['gpu']" in report["maxtext.gpu_xla_flags"]["reason"]
    assert report["maxtext.cpu_host_devices"]["reason"] == "condition mesh_needs_several_devices is false"


@pytest.mark.slow
def test_model_build_and_compiled_programs_land_in_the_cache_dir(run_dir, cache_dir):
    built = sorted(p.name for p in (cache_dir / "models").iterdir())  # the model, then its small files apart
    assert [name.split("-")[0] for name in built] == ["tiny_qwen2"] * 2 and built[1] == built[0] + ".metadata"
    compiled = {p.name.split("-")[0] for p in (cache_dir / "jax").iterdir()}  # the compilation_cache patch
    # only programs compiling longer than COMPILE_CACHE_MIN_SECONDS are kept, which depends on the machine's
    # speed; the sampler's decode loop takes seconds everywhere
    assert "jit__generate" in compiled


@pytest.mark.slow
def test_hf_export_loads_in_transformers_with_the_logits_of_the_trained_params(run_dir):
    import torch
    from flax.traverse_util import unflatten_dict
    from safetensors.numpy import load_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from framework.backends.maxtext.models import ModelConfig, Transformer, forward

    export = run_dir / "hf_export"
    state = unflatten_dict(load_file(run_dir / "checkpoints" / "step_2" / "state.safetensors"), sep="/")
    params = state["params"]
    tokenizer = AutoTokenizer.from_pretrained(export)
    ids = np.asarray([tokenizer("Natalia sold 48 clips in April. How many in May?")["input_ids"]], np.int32)
    jax_logits, _ = forward(Transformer(ModelConfig.from_pretrained(export)), params, ids, np.ones_like(ids))

    model = AutoModelForCausalLM.from_pretrained(export, dtype=torch.float32)
    with torch.no_grad():
        torch_logits = model(torch.from_numpy(ids.astype(np.int64))).logits.numpy()
    np.testing.assert_allclose(np.asarray(jax_logits), torch_logits, atol=2e-4, rtol=1e-4)
    assert tokenizer.chat_template  # the prompts of a later run render the same way


# ---- patches, applied directly -----------------------------------------------------------------


def patch_context(overrides: list[str]) -> PatchContext:
    cfg = compose_config(["backend=maxtext", "task=grpo", *overrides])
    return PatchContext("maxtext", {"jax": jax.__version__}, cfg.model.name, cfg.hardware.name, cfg.hardware.accelerator,
                        Phase.SETUP, config=cfg)


def test_gpu_flags_are_added_once_and_never_override_the_users(monkeypatch):
    from framework.backends.maxtext.patches.devices import gpu_xla_flags

    monkeypatch.setenv("XLA_FLAGS", "--xla_dump_to=/tmp/x")
    gpu_xla_flags(patch_context(["hardware=h100"]))
    gpu_xla_flags(patch_context(["hardware=h100"]))
    assert os.environ["XLA_FLAGS"] == "--xla_dump_to=/tmp/x --xla_gpu_enable_latency_hiding_scheduler=true"
    monkeypatch.setenv("XLA_FLAGS", "--xla_gpu_enable_latency_hiding_scheduler=false")
    gpu_xla_flags(patch_context(["hardware=h100"]))
    assert os.environ["XLA_FLAGS"] == "--xla_gpu_enable_latency_hiding_scheduler=false"


def test_cpu_device_patch_applies_when_the_mesh_needs_more_devices():
    from framework.backends.maxtext.patches.devices import mesh_device_count, mesh_needs_several_devices

    assert not mesh_needs_several_devices(patch_context(["hardware=cpu"]))  # fsdp=-1: whatever there is
    wide = patch_context(["hardware=cpu", "parallel.fsdp=2", "parallel.tp=2"])
    assert mesh_needs_several_devices(wide) and mesh_device_count(wide) == 4
    assert mesh_device_count(patch_context(["hardware=cpu", "parallel.tp=4"])) == 4
    separate = ["hardware=cpu", "parallel.rollout.placement=separate"]
    assert mesh_device_count(patch_context([*separate, "parallel.rollout.devices=1"])) == 2
    # devices auto: the hardware's devices for the preflight to split, at least one per phase
    assert mesh_device_count(patch_context([*separate, "hardware.devices_per_node=4"])) == 4
    assert mesh_device_count(patch_context(separate)) == 2
    assert mesh_device_count(patch_context(["hardware=cpu", "hardware.devices_per_node=4"])) == 1  # shared: auto is none


@pytest.mark.slow
def test_cpu_device_patch_splits_the_host_for_a_sharded_run(tmp_path):
    """Without XLA flags the host is one device; the patch gives the 2 x 2 mesh its 4 CPU devices."""
    proc = run_cli(["recipe=grpo_gsm8k_cpu", "grpo.steps=1", "grpo.eval.every=0", "grpo.export_hf=false",
                    "grpo.checkpoint.every=0", "parallel.fsdp=2", "parallel.tp=2", "progress=false",
                    f"hydra.run.dir={tmp_path}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = {p["id"]: p for p in json.loads((tmp_path / "patches.json").read_text())["patches"]}
    assert report["maxtext.cpu_host_devices"]["status"] == "applied"
    assert "mesh {'data': 1, 'fsdp': 2, 'expert': 1, 'tensor': 2} over 4 cpu device(s)" in proc.stderr


# ---- the GPU benchmarks, checked on tiny shapes ----------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("module", ["grpo_step", "trl_grpo_step"])
def test_benchmark_runs_on_tiny_shapes_and_prints_its_json(module):
    import subprocess
    import sys

    from tests.conftest import REPO_ROOT

    proc = subprocess.run([sys.executable, "-m", f"framework.backends.maxtext.benchmarks.{module}", "--tiny"],
                          cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    result = json.loads(proc.stdout[proc.stdout.index("{\n"):])
    assert result["prompts"] * result["generations"] == 4 and result["new_tokens"] == 16
    assert result["step_s"] > 0 and result["rollout_tokens_per_s"] > 0 and 0 < result["update_mfu"] < 1


# ---- bad input: one line naming the key, before any weights load -------------------------------


BAD_GRPO_INPUTS = [
    (["backend=maxtext", "task=grpo", "model=tiny_qwen2", "hardware=cpu", "data=none"],
     "data=none: task=grpo needs a math (question/answer) data set, got no data set; choose data=arithmetic, "
     "data=gsm8k, data=gsm8k_local, data=gsm8k_sample"),
    (["recipe=grpo_gsm8k_cpu", "grpo.micro_batch_size=5"],
     "grpo.micro_batch_size: 5 must divide prompts_per_step x num_generations = 16"),
    (["recipe=grpo_gsm8k_cpu", "+grpo.rewards.speed=1.0"], "grpo.rewards: speed is not a reward; give {name: weight} with names from correctness, format, tag_count"),
    (["recipe=grpo_gsm8k_cpu", "grpo.temperature=0"], "grpo.temperature: 0 is out of range; valid: > 0"),
    (["recipe=grpo_gsm8k_cpu", "parallel.tp=-1"], "parallel: only one axis may be -1, got fsdp, tp"),
    (["recipe=grpo_gsm8k_cpu", "parallel.pp=2"], "parallel.pp: 2; backend=maxtext has no pipeline parallelism"),
    (["recipe=grpo_gsm8k_cpu", "grpo.advantage_estimator=ppo"],
     "grpo.advantage_estimator: unknown advantage estimator 'ppo'; valid: grpo, reinforce, rloo"),
]


@pytest.mark.parametrize("overrides,expected", BAD_GRPO_INPUTS, ids=[o[-1] for o, _ in BAD_GRPO_INPUTS])
def test_bad_grpo_input_is_one_clear_line(overrides, expected, tmp_path):
    proc = run_cli([*overrides, f"hydra.run.dir={tmp_path}"])
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and expected in errors[0], proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr


def test_the_benchmarks_update_mfu_is_per_device_of_the_step():
    from framework.backends.maxtext.benchmarks.shapes import parse_args, step_report

    args = parse_args("mfu", [])  # Qwen2.5-0.5B shapes on the h100 file
    one, four = (step_report(args, 128, 1.0, 0.5, 0.5, devices) for devices in (1, 4))
    assert four["update_mfu"] == pytest.approx(one["update_mfu"] / 4)  # 4 devices: 4x the peak
    assert four["update_tflops"] == one["update_tflops"]


def test_the_decode_probe_times_two_row_counts_and_tables_the_kernels(tmp_path):
    from framework.backends.maxtext.benchmarks.decode_probe import main

    report = main(["--tiny", "--generations", "2", "--steps", "1", "--profile", str(tmp_path / "trace")])
    assert set(report["rows"]) == {4}  # --tiny has 2 prompts: both row counts are 2 x 2
    figures = report["rows"][4]
    assert figures["ms_per_decode_step"] > 0
    assert figures["ms_per_step_after_prefill"] == pytest.approx(1e3 * (figures["s"] - figures["prefill_s"]) / 15)
    host = next(table for name, table in report["kernels"].items() if "CPU" in name)
    assert host["events"] > 0 and host["top"][0][2] > 0


def test_the_decode_probe_samples_on_a_tensor_parallel_mesh():
    # --tp 2 over two forced CPU devices: the sampler's mesh is the rollout's with parallel.rollout.tp=2
    import os
    import subprocess
    import sys

    from tests.conftest import REPO_ROOT

    env = {**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    done = subprocess.run([sys.executable, "-m", "framework.backends.maxtext.benchmarks.decode_probe", "--tiny",
                           "--tp", "2", "--steps", "1"], env=env, capture_output=True, text=True, cwd=REPO_ROOT,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout)
    assert report["mesh"] == {"data": 1, "fsdp": 1, "expert": 1, "tensor": 2}
    assert report["rows"]["4"]["ms_per_decode_step"] > 0


def test_every_id_an_eos_stops_the_sampler_after_the_prefills_token():
    # decode_probe's prefill_s rests on this: the decode loop does not run, the program's shapes are the same
    import jax
    import numpy as np

    from framework.backends.maxtext.benchmarks.grpo_step import OPTIONS, model_config, random_model
    from framework.backends.maxtext.benchmarks.shapes import parse_args
    from framework.backends.maxtext.sampler import Sampler, SamplingParams
    from framework.backends.maxtext.sharding import build_mesh
    from framework.core.parallel import ParallelConfig

    config = model_config(parse_args("eos", ["--tiny"], OPTIONS))
    model, _, _, params = random_model(config, build_mesh(ParallelConfig(dp=1, fsdp=-1, tp=1, pp=1, ep=1, cp=1)))
    sampler = Sampler(model, eos_token_ids=list(range(config.vocab_size)), pad_token_id=0)
    out = sampler.generate(params, [[1, 2, 3], [4, 5, 6]], jax.random.key(0),
                           SamplingParams(max_new_tokens=8, temperature=1.0, num_samples=2))
    assert np.asarray(out.completion_mask).sum(axis=1).tolist() == [1, 1, 1, 1]


def test_the_probe_names_each_compiled_kernel_by_its_shape_op_and_source_line():
    import jax
    import jax.numpy as jnp

    from framework.backends.maxtext.benchmarks.decode_probe import hlo_sources

    def scaled_sine(x):
        return jnp.sin(x) * 2 + x  # the line the fused kernel must name

    line = scaled_sine.__code__.co_firstlineno + 1
    sources = hlo_sources(jax.jit(scaled_sine).lower(jnp.ones(8)).compile().as_text())
    fused = [source for name, source in sources.items() if "fusion" in name]
    assert fused and all(source.startswith("f32[8]") for source in fused), sources
    assert any(source.endswith(f"test_grpo_e2e.py:{line}") for source in fused), sources


def test_two_gpu_parity_takes_its_gpus_from_the_callers_visible_devices(monkeypatch):
    from framework.backends.maxtext.benchmarks.two_gpu_parity import visible

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert visible("0,1") == "0,1"
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2, 3")  # a caller that gave the benchmark the last two cards
    assert (visible("0"), visible("0,1")) == ("2", "2,3")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(SystemExit, match="lists 0 GPU"):
        visible("0")


def test_evaluation_of_no_examples_trains_without_evaluating(tmp_path):
    """grpo.eval.num_examples=0 with eval on was exit 1 at the first evaluation (`range() arg 3 must not be zero`)."""
    proc = run_cli(["recipe=grpo_arithmetic_cpu", "grpo.steps=1", "grpo.eval.every=1", "grpo.eval.num_examples=0",
                    "progress=false", f"hydra.run.dir={tmp_path}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = read_metrics(tmp_path / "metrics.jsonl")
    assert len(rows) == 1 and "eval_accuracy" not in rows[0]


def test_a_run_whose_every_step_had_grad_norm_0_says_why_once_and_exits_0(tmp_path):
    """The random-init model earns 0 on every GSM8K problem: every advantage 0, beta 0, so every update had grad_norm
    0 and the run learned nothing; it ended ok saying nothing (recipe_runs.py alone printed a NOTE)."""
    proc = run_cli(["recipe=grpo_gsm8k_cpu", "grpo.steps=2", "grpo.eval.every=0", "grpo.checkpoint.every=0",
                    "grpo.export_hf=false", "progress=false", f"hydra.run.dir={tmp_path}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [row["grad_norm"] for row in read_metrics(tmp_path / "metrics.jsonl")] == [0.0, 0.0]
    summary = json.loads((tmp_path / "summary.json").read_text())
    said = ("grpo: grad_norm 0 at every step of this run (steps 1-2), the model learned nothing: every group's rewards "
            "were equal (zero_std_group_fraction 1), no advantage; check the rewards (grpo.rewards), the data, the "
            "sampling (grpo.temperature, top_p) and that the model can earn one (a random-init model earns none)")
    assert summary["warnings"] == [said] and summary["metrics"]["zero_grad_norm_steps"] == 2
    assert proc.stderr.count("grad_norm 0") == 1 and f"  warning: {said}" in proc.stdout.splitlines()


def test_a_resumed_run_counts_its_grad_norm_0_steps_from_the_first(tmp_path):
    """The count and the claim were of the steps since the resume: 2 steps, resumed for 2 more, all at grad_norm 0,
    said `(steps 3-4)` and zero_grad_norm_steps 2 beside steps_completed 4 (a run whose first steps learned would
    have been told it learned nothing). The watch's state rides in each checkpoint."""
    args = ["recipe=grpo_gsm8k_cpu", "grpo.eval.every=0", "grpo.checkpoint.every=1", "grpo.export_hf=false",
            "progress=false", f"hydra.run.dir={tmp_path}"]
    for steps in (1, 2):
        proc = run_cli([*args, f"grpo.steps={steps}"])
        assert proc.returncode == 0, proc.stderr[-3000:]
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["metrics"]["resumed_from_step"] == 1 and summary["metrics"]["zero_grad_norm_steps"] == 2
    assert summary["warnings"][0].startswith("grpo: grad_norm 0 at every step of this run (steps 1-2), the model ")
