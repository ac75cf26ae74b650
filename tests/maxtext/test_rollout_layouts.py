"""GRPO's rollout in its own layout (`parallel.rollout`, issue 14): the layout's resolution and default,
the resharding's bytes, and on 4 forced CPU devices the same greedy rollouts and the same step in every
layout.

The multi-device check runs this file as a script in a subprocess: XLA_FLAGS must be set before jax is
imported, and the pytest process has imported jax already.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from framework.core.build import build
from framework.core.errors import ConfigError
from framework.core.parallel import ParallelConfig, RolloutLayout
from tests.conftest import compose_config, run_cli

REPO = Path(__file__).resolve().parents[2]
UPDATE = {"dp": 1, "fsdp": 4, "tp": 1, "pp": 1, "ep": 1, "cp": 1}
# name -> the rollout layout on the 4 devices; "update" decodes in the update's layout (FSDP), as before issue 14
ROLLOUTS = {"update": None, "dp4": {"dp": -1, "tp": 1}, "dp2_tp2": {"dp": 2, "tp": 2}, "tp4": {"dp": 1, "tp": 4}}


def rollout_layout(**axes) -> RolloutLayout:
    return RolloutLayout(**{"dp": -1, "fsdp": 1, "tp": None, "pp": 1, "ep": 1, "cp": 1, "placement": "shared",
                            "devices": "auto", **axes})


def grpo_task(*overrides: str):
    from framework.tasks.grpo import GRPOTask

    return build(GRPOTask, compose_config(["recipe=grpo_arithmetic_cpu", *overrides]).grpo, "grpo")


def test_the_default_rollout_layout_is_in_the_parallel_node_and_every_backend_builds_it():
    parallel = build(ParallelConfig, compose_config(["hardware=h100"]).parallel, "parallel")
    assert parallel.rollout == rollout_layout()
    assert parallel.as_dict() == {"dp": 1, "fsdp": -1, "tp": 1, "pp": 1, "ep": 1, "cp": 1}  # the six axes only
    assert parallel.resolve(8).rollout == parallel.rollout and parallel.resolve(8).fsdp == 8
    override = compose_config(["recipe=grpo_arithmetic_cpu", "parallel.rollout.tp=2"]).parallel
    assert build(ParallelConfig, override, "parallel").rollout.tp == 2


def test_rollout_layout_resolution_and_its_one_line_errors():
    from framework.backends.maxtext.sharding import rollout_parallel

    def fit(tp: int):
        return lambda free: tp

    assert rollout_parallel(rollout_layout(), 4, 16, fit(1)).as_dict() == {**UPDATE, "dp": 4, "fsdp": 1}
    assert (rollout_parallel(rollout_layout(), 4, 16, fit(2)).dp, rollout_parallel(rollout_layout(), 4, 16, fit(2)).tp) == (2, 2)
    explicit = rollout_parallel(rollout_layout(tp=2), 4, 16, fit(1))
    assert (explicit.dp, explicit.tp) == (2, 2)
    fixed_dp = rollout_parallel(rollout_layout(dp=2), 4, 16, fit(1))  # tp null, no -1 axis: tp takes the rest
    assert (fixed_dp.dp, fixed_dp.tp) == (2, 2)
    offered = []  # the memory pick chooses among the devices the fixed axes leave: 4 / dp=2
    rollout_parallel(rollout_layout(dp=2, fsdp=-1), 4, 16, lambda free: offered.append(free) or 1)
    assert offered == [2]
    errors = {
        "parallel.rollout: 4 devices do not split into the fixed axes' product 3": rollout_layout(dp=3),
        "parallel.rollout: dp x fsdp = 4 does not divide grpo.prompts_per_step=6": rollout_layout(tp=1),
        "parallel.rollout.pp: 2; backend=maxtext has no pipeline parallelism": rollout_layout(pp=2),
        "parallel.rollout: only one axis may be -1, got dp, fsdp": rollout_layout(fsdp=-1),
        "parallel.rollout: dp=1 x fsdp=1 x tp=2 x pp=1 x cp=1 uses 2 devices, but 4 are there": rollout_layout(dp=1, tp=2),
    }
    for message, layout in errors.items():
        with pytest.raises(ConfigError) as caught:
            rollout_parallel(layout, 4, 6, fit(1))
        assert str(caught.value).startswith(message) and "\n" not in str(caught.value)


def test_the_rollout_tp_is_the_smallest_group_that_fits_beside_the_training_state():
    from framework.backends.maxtext.trainers.rollout_plan import pick_rollout_tp

    task = grpo_task()  # 16 prompts x 8 samples, 32 + 2 tokens
    gb = 1e9
    assert pick_rollout_tp(2 * gb, 1e3, 6 * gb, task, 4, 80) == 1  # fits one device: 4 replicas
    assert pick_rollout_tp(40 * gb, 1e3, 30 * gb, task, 4, 80) == 2  # 40 GB of weights beside 30: halves
    assert pick_rollout_tp(400 * gb, 1e3, 0, task, 4, 80) == 4  # fits nowhere: the largest group
    # 60 GB of weights + 43.5 GB of KV cache over 4 devices: over the 68 GB budget (85%) on one, fits halved
    assert pick_rollout_tp(60 * gb, 1e7, 0, task, 4, 80) == 2
    assert pick_rollout_tp(50 * gb, 1e7, 0, task, 4, 80) == 1
    # the same with the Pallas kernel's cache rounded to 64 slots a row (34 -> 64: 81.9 GB of KV cache)
    rounded = lambda tp: task.rows_per_step * 64 / (4 // tp)  # noqa: E731  (a batch shard's share over 4 // tp)
    assert pick_rollout_tp(50 * gb, 1e7, 0, task, 4, 80, cache_share=rounded) == 2
    assert pick_rollout_tp(2 * gb, 1e3, 0, grpo_task("grpo.prompts_per_step=2", "grpo.micro_batch_size=16"),
                           4, 80) == 2  # 2 prompts: at most 2 replicas
    # 14 query / 2 KV heads (Qwen2.5-0.5B): tp=4 would replicate the KV heads, so it is never picked
    assert pick_rollout_tp(400 * gb, 1e3, 0, task, 4, 80, heads=(14, 2)) == 2


def test_the_rollout_tp_counts_a_candidates_cache_shards_on_its_mesh_as_the_sampler_does():
    """rollout dp=2 fixed, fsdp=-1 over 8 devices: a tp candidate's cache splits over dp x fsdp = 8 / tp batch
    shards (prefix_cache.prompt_shards on the candidate's mesh), not over the 4 / tp devices the fixed dp leaves."""
    from types import SimpleNamespace

    from framework.backends.maxtext.sharding import DEFAULT_RULES, rollout_meshes
    from framework.backends.maxtext.trainers.rollout_plan import rollout_tp_for

    # 64 prompts x 8 of 1024 + 256 tokens, 256 KiB of K/V a token. tp=1: 8 prompts a shard, so auto repeats the
    # prompt: 512 x 1280 / 8 tokens = 21.5 GB a device (the old count, 4 shards of 16 prompts, shared: 12.9 GB);
    # tp=2: 16 prompts on each of 4 shards, shared, 6.4 GB. Beside 15 GB of state and 20 GB of bf16 weights
    # (10 at tp=2) in 51 GB: tp=2
    task = grpo_task("grpo.prompts_per_step=64", "grpo.max_prompt_tokens=1024", "grpo.max_new_tokens=256",
                     "grpo.micro_batch_size=64")
    model = SimpleNamespace(num_layers=64, num_heads=64, num_kv_heads=8, head_dim=128, dtype="bfloat16",
                            param_dtype="float32", decode_kernel="pallas", shared_prefix="auto")
    fsdp8 = {"data": 1, "fsdp": 8, "expert": 1, "tensor": 1}
    meshes = rollout_meshes(rollout_layout(dp=2, fsdp=-1), 8)
    assert meshes(2) == {"data": 2, "fsdp": 2, "expert": 1, "tensor": 2}
    assert rollout_tp_for(model, 40e9, fsdp8, task, 60, devices=4, meshes=meshes, rules=DEFAULT_RULES) == 2
    assert rollout_tp_for(model, 40e9, fsdp8, task, 60, devices=4) == 1  # a data x tensor mesh over the 4 only


def test_the_trainers_rollout_tp_counts_the_training_state_on_the_update_shards():
    from types import SimpleNamespace

    from framework.backends.maxtext.trainers.rollout_plan import rollout_tp_for

    task, gb = grpo_task(), 1e9  # beta 0: params + 2 AdamW moments stay, no reference
    model = SimpleNamespace(num_layers=28, num_heads=28, num_kv_heads=4, head_dim=128, dtype="bfloat16",
                            param_dtype="float32", decode_kernel="pallas", shared_prefix="auto")
    fsdp4 = {"data": 1, "fsdp": 4, "expert": 1, "tensor": 1}
    # the rollout holds the policy cast to bf16: half the float32 weights
    assert rollout_tp_for(model, 2 * gb, fsdp4, task, 80) == 1  # 0.5B in float32: replicas
    assert rollout_tp_for(model, 48 * gb, fsdp4, task, 80) == 1  # 12B: 36 GB of state + 24 fit in 68
    assert rollout_tp_for(model, 60 * gb, fsdp4, task, 80) == 2  # 15B: 45 + 30 do not; 45 + 15 do
    assert rollout_tp_for(model, 72 * gb, fsdp4, task, 80) == 4  # 18B: 54 + 18 do not; 54 + 9 do
    assert rollout_tp_for(model, 72 * gb, fsdp4, task, 80, devices=2) == 2  # fixed axes left 2: at most 2


def test_the_rollout_tp_counts_a_shared_prompt_once_per_group_where_the_sampler_shares_it():
    from types import SimpleNamespace

    from framework.backends.maxtext.trainers.rollout_plan import rollout_tp_for

    # 16 prompts x 8 samples of 256 + 256 tokens, 256 KiB of K/V a token: the Pallas kernel's shared prefix holds
    # 36,864 tokens (9.7 GB), the repeated cache 65,536 (17.2 GB); a quarter of each per device at tp=1
    task = grpo_task("grpo.max_prompt_tokens=256", "grpo.max_new_tokens=256")
    fsdp4 = {"data": 1, "fsdp": 4, "expert": 1, "tensor": 1}

    def model(kernel: str, shared_prefix: str = "on") -> SimpleNamespace:
        return SimpleNamespace(num_layers=64, num_heads=64, num_kv_heads=8, head_dim=128, dtype="bfloat16",
                               param_dtype="float32", decode_kernel=kernel, shared_prefix=shared_prefix)

    # 52 GB of float32 weights: 39 GB of state + 26 of rollout weights + 2.4 of shared cache fit in 68; + 4.3 do not
    assert rollout_tp_for(model("pallas"), 52e9, fsdp4, task, 80) == 1
    assert rollout_tp_for(model("xla"), 52e9, fsdp4, task, 80) == 2
    # auto: 256 + 256 tokens are not worth sharing (prefix_cache.shares_prefix), nor are 4 prompts a replica
    assert rollout_tp_for(model("pallas", "auto"), 52e9, fsdp4, task, 80) == 2
    assert rollout_tp_for(model("pallas", "off"), 52e9, fsdp4, task, 80) == 2
    # 32 prompts x 8 of 1024 + 256 tokens: auto shares at 16 prompts a replica (tp=2: 6.4 GB of cache a device),
    # not at 8 (tp=1: 21.5 GB, with 55 GB of state and weights over the 68 GB budget); on shares at tp=1 too
    long = grpo_task("grpo.prompts_per_step=32", "grpo.max_prompt_tokens=1024", "grpo.max_new_tokens=256")
    assert rollout_tp_for(model("pallas", "auto"), 44e9, fsdp4, long, 80) == 2
    assert rollout_tp_for(model("pallas", "on"), 44e9, fsdp4, long, 80) == 1


def test_reshard_bytes_per_device_and_their_predicted_seconds():
    from framework.backends.maxtext.trainers.preflight import reshard_bytes_per_device, reshard_seconds

    def mesh(data=1, fsdp=1, tensor=1):
        return {"data": data, "fsdp": fsdp, "expert": 1, "tensor": tensor}

    weights = 4e9
    assert reshard_bytes_per_device(weights, mesh(fsdp=4), mesh(data=4)) == 3e9  # an all-gather
    assert reshard_bytes_per_device(weights, mesh(fsdp=4), mesh(data=2, tensor=2)) == 1.5e9
    assert reshard_bytes_per_device(weights, mesh(fsdp=4), mesh(fsdp=4)) == 0.0  # one layout for both
    assert reshard_bytes_per_device(weights, mesh(data=4), mesh(data=2, tensor=2)) == 0.0  # replicas hold it all
    h100 = compose_config(["hardware=h100"]).hardware
    assert reshard_seconds(3e9, h100) == pytest.approx(3e9 / 450e9)  # the intra-node link, per direction
    assert reshard_seconds(3e9, {"nodes": 1, "intra_node_gb_s": None, "hbm_tb_s": 0.02}) == pytest.approx(0.15)


def test_a_bad_rollout_layout_is_one_line_before_any_weights_load(tmp_path):
    proc = run_cli(["recipe=grpo_arithmetic_cpu", "grpo.steps=1", "parallel.fsdp=2", "parallel.rollout.tp=1",
                    "grpo.prompts_per_step=3", "grpo.micro_batch_size=24", f"hydra.run.dir={tmp_path}"])
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "parallel.rollout: dp x fsdp = 2 does not divide grpo.prompts_per_step=3" in errors[0]
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_a_two_device_run_reshards_to_replicas_each_step_and_predicts_it(tmp_path):
    proc = run_cli(["recipe=grpo_arithmetic_cpu", "grpo.steps=2", "parallel.fsdp=2", "grpo.preflight=true",
                    "hardware.devices_per_node=2", "hardware.intra_node_gb_s=20", "progress=false",
                    f"hydra.run.dir={tmp_path}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "grpo: rollout mesh {'data': 2, 'fsdp': 1, 'expert': 1, 'tensor': 1}, weights resharded" in proc.stderr
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == 2 and all(row["reshard_time_s"] > 0 for row in rows)
    assert all(row["step_time_s"] > row["reshard_time_s"] + row["rollout_time_s"] + row["update_time_s"] - 1e-6
               for row in rows)
    summary = json.loads((tmp_path / "summary.json").read_text())["result"]["metrics"]
    assert summary["preflight_reshard_s"] > 0 and "preflight_error" not in summary
    assert json.loads((tmp_path / "shardings.json").read_text())["rollout_mesh"]["data"] == 2


@pytest.mark.slow
def test_every_rollout_layout_decodes_the_same_tokens_and_takes_the_same_step(tmp_path_factory):
    from framework.core.plain import to_plain
    from framework.models.tiny import resolve_model_dir

    model_dir = resolve_model_dir(to_plain(compose_config(["model=tiny_qwen2"]).model),
                                  tmp_path_factory.getbasetemp() / "tiny_models")
    from tests.maxtext.forced_devices import facts_on_cpu_devices

    facts = facts_on_cpu_devices(__file__, 4, str(model_dir), timeout=600)
    print(json.dumps({key: value for key, value in facts.items() if key != "meshes"}, indent=1))

    assert facts["meshes"]["dp4"] == {"data": 4, "fsdp": 1, "expert": 1, "tensor": 1}
    assert facts["meshes"]["dp2_tp2"] == {"data": 2, "fsdp": 1, "expert": 1, "tensor": 2}
    for name in ROLLOUTS:
        assert facts["tokens_equal_one_device"][name], name  # greedy: token for token
        assert facts["policy_equals_params"][name], name  # the resharding moves, it does not change a value
        assert facts["groups_on_one_device"][name], name
        for metric in ("loss", "grad_norm", "entropy"):
            reference = facts["one_device"][metric]
            assert abs(facts["steps"][name][metric] - reference) <= 1e-5 * max(1.0, abs(reference)), (name, metric)
        # one AdamW step at lr 1e-2: fsdp=4 sums gradients in another order (eps 1e-6, see _layout_checks)
        assert facts["params_max_abs_diff"][name] < 1e-4, name
        assert facts["params_max_abs_diff_to_update_layout_rollout"][name] == 0.0, name  # same tokens, same update
    assert facts["completion_tokens"] > 2 * 8  # the greedy completions are not just an EOS each
    assert facts["reshard_s"]["update"] == 0.0 and facts["reshard_s"]["dp4"] > 0
    assert facts["bf16_policy"] == {"same_order": {"compiled": True, "cast": True},
                                    "reversed": {"compiled": False, "cast": True}}
    assert facts["completions_sharded_over"]["dp4"] in ("data", ["data", "fsdp"])


@pytest.mark.slow
def test_the_layouts_benchmark_records_a_failing_layout_and_times_the_others(tmp_path):
    out = tmp_path / "layouts.json"
    proc = subprocess.run([sys.executable, "-m", "framework.backends.maxtext.benchmarks.grpo_layouts", "--tiny",
                           "--prompts", "3", "--micro-batch", "6", "--steps", "1", "--warmup", "1", "--out", str(out),
                           "--layouts", "fsdp2_rollout_dp2,one_device,fsdp4_rollout_dp4"],
                          cwd=REPO, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_backend_optimization_level=0"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(out.read_text())
    layouts = report["layouts"]
    assert report["devices"] == 4 and list(layouts) == ["fsdp2_rollout_dp2", "one_device", "fsdp4_rollout_dp4"]
    assert report["remat"] == "none"  # what the update ran with, for re-predicting the file later
    assert layouts["fsdp2_rollout_dp2"]["error"].startswith(  # 3 prompts cannot split over 2 replicas
        "ConfigError: parallel.rollout: dp x fsdp = 2 does not divide grpo.prompts_per_step=3")
    timed = layouts["one_device"]
    assert timed["step_s"] > 0 and timed["reshard_s"] == 0.0 and timed["speedup_over_one_device"] == 1.0
    assert len(timed["grad_norm"]) == len(timed["loss"]) == 2 and timed["grad_norm"][0] > 0  # warm-up + timed
    assert timed["first_grad_norm_relative_difference"] == 0.0  # the parity field, against itself
    assert timed["rollout_mesh"] == timed["update_mesh"] and timed["preflight_predicted_step_s"] > 0
    assert "error" in layouts["fsdp4_rollout_dp4"]


def _layout_checks(model_dir: str) -> dict:
    """Runs in the subprocess with 4 host devices: one GRPO step (greedy rollouts of the trainer's
    rollout.generate, then the update) on one device and on fsdp=4 with each rollout layout."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from flax import linen as nn
    from transformers import AutoTokenizer

    from framework.backends.maxtext.checkpoint_io import load_hf_params
    from framework.backends.maxtext.models import ModelConfig, Transformer, abstract_params
    from framework.backends.maxtext.sampler import Sampler, SamplingParams
    from framework.backends.maxtext.sharding import build_mesh, logical_axis_rules, param_shardings, rollout_parallel
    from framework.backends.maxtext.trainers import rollout
    from framework.backends.maxtext.trainers.update import PolicyUpdate, build_optimizer, learning_rate_schedule
    from framework.data import data_spec
    from framework.data.math import train_examples

    # Adam's eps 1e-6, not 1e-8: a first step divides each gradient by |g| + eps, so a gradient near eps that
    # two layouts sum in another order (relative 1e-6, as the grad norms show) would move by much of a step.
    overrides = ["grpo.prompts_per_step=4", "grpo.num_generations=2", "grpo.max_new_tokens=6", "grpo.micro_batch_size=8",
                 "grpo.optimizer.eps=1e-6"]
    task = grpo_task(*overrides)
    examples = train_examples(data_spec(compose_config(["recipe=grpo_arithmetic_cpu"]).data, "grpo"))
    examples = examples[:task.prompts_per_step]
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    encoder = rollout.PromptEncoder(tokenizer, None, task.max_prompt_tokens)
    config = ModelConfig.from_pretrained(model_dir, param_dtype="float32", dtype="float32")
    rules, devices = logical_axis_rules(), jax.devices()
    boxed = abstract_params(Transformer(config))
    noise = np.random.default_rng(0)  # HF init has zero biases and unit norms: perturb every tensor
    host_params = jax.tree.map(lambda x: np.asarray(x) + noise.normal(0, 0.05, x.shape).astype(np.float32),
                               load_hf_params(model_dir, config))
    greedy = SamplingParams(max_new_tokens=task.max_new_tokens, temperature=0.0, num_samples=task.num_generations)
    advantages = np.random.default_rng(1).normal(size=task.rows_per_step).astype(np.float32)

    def step(update_layout: dict, update_devices: list, rollout_axes: dict | None) -> dict:
        mesh = build_mesh(ParallelConfig(**update_layout), update_devices)
        model = Transformer(config, mesh, rules)
        shardings = param_shardings(boxed, mesh, rules)
        params = jax.device_put(host_params, shardings)
        layout = (ParallelConfig(**update_layout).resolve(mesh.size) if rollout_axes is None else
                  rollout_parallel(rollout_layout(**rollout_axes), mesh.size, task.prompts_per_step, lambda: 1))
        placement = rollout.RolloutPlacement(layout, update_devices, mesh, boxed, rules, config.dtype)
        policy, reshard_s = placement.policy(params)
        sampler = Sampler(model, eos_token_ids=[tokenizer.eos_token_id], pad_token_id=tokenizer.pad_token_id,
                          prompt_bucket=task.max_prompt_tokens, mesh=placement.mesh, rules=rules)
        prompts, _ = encoder.encode(examples)
        on_device = sampler.generate(policy, prompts, jax.random.key(0), greedy)
        rollouts, _ = rollout.generate(sampler, encoder, policy, examples, jax.random.key(0), greedy)
        policy_equals_params = all(np.array_equal(np.asarray(a), np.asarray(b)) and a.sharding == sharding
                                   for a, b, sharding in zip(jax.tree.leaves(policy), jax.tree.leaves(params),
                                                             jax.tree.leaves(placement.shardings)))
        optimizer = build_optimizer(task.optimizer, learning_rate_schedule(task.optimizer, task.steps, 1))
        update = PolicyUpdate(model, task, optimizer, nn.unbox(boxed), shardings, mesh, rules)
        new_params, _, metrics = update.run(params, update.init_opt_state(params), None, {
            "input_ids": rollouts.input_ids, "attention_mask": rollouts.attention_mask,
            "completion_mask": rollouts.completion_mask, "advantages": advantages})
        shard_rows = [shard.index[0] for shard in on_device.completion_ids.addressable_shards]
        return {
            "mesh": dict(placement.mesh.shape), "tokens": rollouts.input_ids, "reshard_s": reshard_s,
            "completion_tokens": int(rollouts.completion_mask.sum()),
            "policy_equals_params": policy_equals_params,
            "groups_on_one_device": all((r.start or 0) % task.num_generations == 0 and
                                        ((r.stop or task.rows_per_step) - (r.start or 0)) % task.num_generations == 0
                                        for r in shard_rows),
            "sharded_over": (list(on_device.completion_ids.sharding.spec) + [None])[0],
            "metrics": {k: metrics[k] for k in ("loss", "grad_norm", "entropy")},
            "params": jax.device_get(new_params),
        }

    def max_abs_diff(params: dict, other: dict) -> float:
        return max(float(np.abs(a - b).max()) for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(other)))

    def bf16_policy(rollout_devices: list) -> dict:
        """A bfloat16 sampler's placement moves the float32 params cast: equal to a cast, on its shardings;
        compiled when both meshes order the devices alike, else a device_put."""
        mesh = build_mesh(ParallelConfig(**UPDATE), devices)
        params = jax.device_put(host_params, param_shardings(boxed, mesh, rules))
        layout = rollout_parallel(rollout_layout(dp=2, tp=2), mesh.size, task.prompts_per_step, lambda: 1)
        placement = rollout.RolloutPlacement(layout, rollout_devices, mesh, boxed, rules, "bfloat16")
        policy, _ = placement.policy(params)
        return {"compiled": placement._move.path == "same_devices", "cast": all(
            a.dtype == jnp.bfloat16 and a.sharding == sharding and np.array_equal(
                np.asarray(a), np.asarray(b.astype(jnp.bfloat16))) for a, b, sharding in
            zip(jax.tree.leaves(policy), jax.tree.leaves(params), jax.tree.leaves(placement.shardings)))}

    reference = step({**UPDATE, "fsdp": 1}, devices[:1], None)
    runs = {name: step(UPDATE, devices, axes) for name, axes in ROLLOUTS.items()}
    return {
        "bf16_policy": {"same_order": bf16_policy(devices), "reversed": bf16_policy(devices[::-1])},
        "meshes": {name: run["mesh"] for name, run in runs.items()},
        "tokens_equal_one_device": {name: bool(np.array_equal(run["tokens"], reference["tokens"]))
                                    for name, run in runs.items()},
        "policy_equals_params": {name: run["policy_equals_params"] for name, run in runs.items()},
        "groups_on_one_device": {name: run["groups_on_one_device"] for name, run in runs.items()},
        "completions_sharded_over": {name: run["sharded_over"] for name, run in runs.items()},
        "reshard_s": {name: run["reshard_s"] for name, run in runs.items()},
        "one_device": reference["metrics"], "completion_tokens": reference["completion_tokens"],
        "steps": {name: run["metrics"] for name, run in runs.items()},
        "params_max_abs_diff": {name: max_abs_diff(run["params"], reference["params"]) for name, run in runs.items()},
        "params_max_abs_diff_to_update_layout_rollout": {name: max_abs_diff(run["params"], runs["update"]["params"])
                                                         for name, run in runs.items()},
    }


if __name__ == "__main__":
    print(json.dumps(_layout_checks(sys.argv[1])))
