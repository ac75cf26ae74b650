"""GRPO one step off-policy (grpo.rollout_lag=1, parallel.rollout.placement=separate; trainers/pipeline.py):
the config's one-line errors, the sampler's behaviour log-probs (the update's on the same weights: ratio 1
on-policy), the overlapped preflight, and on forced CPU devices that batch t is what theta_{t-2} samples,
an end-to-end run and the kill -9 resume (the 2 | 2 weight move: test_weight_moves.py).

The multi-device check runs this file as a script in a subprocess (XLA_FLAGS before jax is imported).
"""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

from framework.core.errors import ConfigError
from tests.conftest import compose_config, run_cli
from tests.maxtext.test_rollout_layouts import grpo_task, rollout_layout

LAG1 = ["recipe=grpo_arithmetic_cpu", "grpo.rollout_lag=1", "parallel.rollout.placement=separate",
        "parallel.rollout.devices=1"]


def test_lag_and_placement_go_together_with_one_line_errors():
    from framework.backends.maxtext.trainers.pipeline import check_off_policy, split_devices

    check_off_policy(0, rollout_layout())
    check_off_policy(1, rollout_layout(placement="separate", devices=1))
    with pytest.raises(ConfigError, match=r"grpo.rollout_lag: 1 needs parallel.rollout.placement=separate"):
        check_off_policy(1, rollout_layout())
    with pytest.raises(ConfigError, match=r"parallel.rollout.placement: separate needs grpo.rollout_lag=1"):
        check_off_policy(0, rollout_layout(placement="separate", devices=1))
    with pytest.raises(ConfigError, match=r"placement: 'apart' is not valid; use shared or separate"):
        check_off_policy(1, rollout_layout(placement="apart", devices=1))
    with pytest.raises(ConfigError, match=r"rollout.devices: 2 is not valid .* on 2 devices; use auto or 1 .. 1"):
        split_devices([0, 1], rollout_layout(placement="separate", devices=2))
    with pytest.raises(ConfigError, match=r"rollout.devices: placement=separate needs 2 or more devices \(1 here\)"):
        split_devices([0], rollout_layout(placement="separate", devices=1))  # not "use 1 .. 0"
    with pytest.raises(ConfigError, match=r"parallel.rollout.devices: 1 needs parallel.rollout.placement=separate"):
        split_devices([0, 1], rollout_layout(devices=1))
    assert split_devices([0, 1, 2], rollout_layout(placement="separate", devices=1)) == ([0], [1, 2])
    assert split_devices([0, 1], rollout_layout()) == ([0, 1], [0, 1])
    with pytest.raises(ConfigError, match=r"grpo.rollout_lag"):
        grpo_task("grpo.rollout_lag=-1")
    with pytest.raises(ConfigError, match=r"rollout_lag: 1 needs .*\(parallel.rollout is null\)"):
        check_off_policy(1, None)  # else the rollout thread would sample with the params the update donates
    check_off_policy(0, None)


def test_a_rollout_lag_1_checkpoint_resumed_on_policy_is_refused_and_a_damaged_one_named(tmp_path):
    from types import SimpleNamespace

    from framework.backends.maxtext.trainers.in_flight import IN_FLIGHT, refuse_lag_change
    from framework.backends.maxtext.trainers.pipeline import OffPolicyRollouts
    from framework.core.errors import CheckpointError

    refuse_lag_change(SimpleNamespace(state={"rng": []}, path=tmp_path))  # an on-policy checkpoint: fine
    with pytest.raises(ConfigError, match=r"grpo.rollout_lag: 0, but .* was written by a rollout_lag=1 run"):
        refuse_lag_change(SimpleNamespace(state={IN_FLIGHT: {}}, path=tmp_path))
    pipeline = OffPolicyRollouts([None], None, [None], None)  # lag 1: one rollout group
    with pytest.raises(CheckpointError, match=r"the batch in flight is incomplete"):
        iterator = {"epoch": 0, "position": 4, "seed": 0, "num_items": 4, "batch_size": 1}  # B_4 drawn at step 3
        pipeline.restore(SimpleNamespace(state={IN_FLIGHT: {"references": []}, "data_iterator": iterator}, step=3,
                                         path=tmp_path), "state.safetensors")


def test_a_bad_combination_is_one_line_before_any_weights_load(tmp_path):
    proc = run_cli(["recipe=grpo_arithmetic_cpu", "grpo.steps=1", "grpo.rollout_lag=1", f"hydra.run.dir={tmp_path}"])
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "grpo.rollout_lag: 1 needs parallel.rollout.placement=separate" in errors[0]
    assert "Traceback" not in proc.stderr


def test_the_default_stays_synchronous_on_shared_devices():
    cfg = compose_config(["recipe=grpo_arithmetic_cpu"])
    assert cfg.grpo.rollout_lag == 0
    assert cfg.parallel.rollout.placement == "shared" and cfg.parallel.rollout.devices == "auto"
    from framework.backends.maxtext.trainers.pipeline import split_devices

    assert split_devices([0, 1], rollout_layout()) == ([0, 1], [0, 1])  # auto on shared devices: none taken


def test_separate_devices_receive_their_whole_shard_and_the_preflight_overlaps_the_phases():
    from framework.backends.maxtext.trainers.preflight import predict_step, reshard_bytes_per_device
    from framework.core.parallel import ParallelConfig
    from framework.core.paths import load_conf

    one = {"data": 1, "fsdp": 1, "expert": 1, "tensor": 1}
    assert reshard_bytes_per_device(1e9, one, one) == 0.0
    assert reshard_bytes_per_device(1e9, one, one, separate=True) == 1e9
    assert reshard_bytes_per_device(1e9, {**one, "fsdp": 2}, {**one, "tensor": 2}, separate=True) == 5e8
    task = grpo_task("grpo.micro_batch_size=128")
    hf, hardware = load_conf("model", "qwen2_5_0_5b_instruct")["hf_config"], load_conf("hardware", "h100")["hardware"]
    layout = ParallelConfig(dp=1, fsdp=1, tp=1, pp=1, ep=1, cp=1)
    shared = predict_step(hf, hardware, layout, 1, task, layout, 0.0)
    separate = predict_step(hf, hardware, layout, 1, task, layout, 1e9, rollout_devices=1)
    if not shared:
        pytest.skip("the simulator is not importable")
    rollout_s = separate["preflight_prefill_s"] + separate["preflight_decode_s"]
    update_s = shared["preflight_predicted_step_s"] - rollout_s
    assert separate["preflight_overlapped"] and not shared["preflight_overlapped"]
    # the move delays the rollout devices only: the update does not wait for it (nothing to gather on one device)
    assert separate["preflight_stage_s"] == 0.0
    assert separate["preflight_predicted_step_s"] == pytest.approx(max(rollout_s + separate["preflight_reshard_s"],
                                                                       update_s))
    assert separate["preflight_reshard_s"] > 0
    assert separate["preflight_predicted_step_s"] < shared["preflight_predicted_step_s"]


def test_a_rollout_on_devices_of_its_own_counts_no_training_state():
    from framework.backends.maxtext.models import ModelConfig
    from framework.backends.maxtext.trainers.rollout_plan import rollout_tp_for
    from framework.core.paths import load_conf

    model = ModelConfig.from_hf_config(load_conf("model", "qwen3_8b")["hf_config"], param_dtype="float32",
                                       dtype="bfloat16")
    task, mesh = grpo_task("grpo.micro_batch_size=128"), {"data": 1, "fsdp": 1, "expert": 1, "tensor": 1}
    weight_bytes = 8.2e9 * 4  # float32 master weights: with params + 2 moments beside it, 8B fits no 80 GB device
    shared = rollout_tp_for(model, weight_bytes, mesh, task, 80, devices=4)
    separate = rollout_tp_for(model, weight_bytes, mesh, task, 80, devices=4, separate=True)
    assert separate < shared and separate == 1


def test_behaviour_log_probs_change_no_token_and_equal_the_updates_log_probs(tmp_path):
    """The sampler's log-probs of its tokens are the update's for the same weights: the ratio is 1 on-policy."""
    import jax

    facts = _behaviour_checks(str(_model_dir(tmp_path)), jax.devices()[:1])
    assert facts["tokens_equal"] and facts["padding_zero"]
    assert facts["max_abs_log_prob_diff"] < 1e-4, facts
    assert facts["mean_log_prob"] < -0.1  # sampled at temperature 1: not all near-certain tokens


@pytest.mark.slow
def test_batch_t_is_what_the_policy_two_versions_back_samples(tmp_path):
    from tests.maxtext.forced_devices import facts_on_cpu_devices

    facts = facts_on_cpu_devices(__file__, 4, str(_model_dir(tmp_path)), timeout=600)
    print(json.dumps(facts, indent=1))
    assert facts["staleness"] == [0.0, 1.0, 1.0]
    assert facts["tokens_equal_behaviour_policy"] == [True, True, True]
    for step, (behaviour, newer) in enumerate(zip(facts["diff_to_behaviour"], facts["diff_to_newer"]), start=1):
        assert behaviour < 1e-4, (step, behaviour)
        if step > 1:  # B_1 is on-policy; later batches are one update behind the weights they train
            assert newer > 100 * max(behaviour, 1e-7), (step, newer)
    assert all(np.isfinite(facts["losses"]))
    assert facts["devices"] == {"rollout": [0], "update": [1]}


@pytest.mark.slow
def test_a_two_device_run_overlaps_one_step_off_policy(tmp_path):
    proc = run_cli([*LAG1, "grpo.steps=3", "grpo.preflight=true", "hardware.devices_per_node=2",
                    "hardware.intra_node_gb_s=20", "progress=false", f"hydra.run.dir={tmp_path}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "grpo: mesh {'data': 1, 'fsdp': 1, 'expert': 1, 'tensor': 1} over 1 cpu device(s)" in proc.stderr
    assert "weights resharded to it each step" in proc.stderr
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [row["staleness"] for row in rows] == [0.0, 1.0, 1.0]
    assert all(np.isfinite(row["loss"]) and row["rollout_wait_time_s"] >= 0 for row in rows)
    assert rows[0]["ratio_mean"] == pytest.approx(1.0, abs=1e-4)  # B_1: sampled by the weights it trains
    summary = json.loads((tmp_path / "summary.json").read_text())["result"]["metrics"]
    assert summary["preflight_overlapped"] and summary["preflight_reshard_s"] > 0
    assert summary["aot_fallbacks"] == 0  # the executables compiled ahead take the off-policy batch too
    assert summary["preflight_predicted_step_s"] == pytest.approx(max(
        summary["preflight_train_s"] + summary["preflight_stage_s"],
        summary["preflight_reshard_s"] + summary["preflight_prefill_s"] + summary["preflight_decode_s"]))


@pytest.mark.slow
def test_evaluation_runs_beside_the_off_policy_pipeline(tmp_path):
    proc = run_cli([*LAG1, "grpo.steps=3", "hardware.devices_per_node=2", "grpo.eval.every=2",
                    "grpo.eval.num_examples=2", "progress=false", f"hydra.run.dir={tmp_path}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [("eval_accuracy" in row) for row in rows] == [False, True, True]  # with B_3 in flight, and at the end
    assert all(np.isfinite(row["loss"]) for row in rows)


@pytest.mark.slow
def test_resume_conformance_kill_9_one_step_off_policy(tmp_path):
    """The in-flight batch is in the checkpoint: killed after step 2, the rerun ends byte for byte the same."""
    from tests.conformance import check_kill_resume

    check_kill_resume(tmp_path, [*LAG1, "grpo.steps=4", "grpo.checkpoint.every=2", "grpo.max_new_tokens=2"],
                      kill_after_checkpoint=2)


def _model_dir(tmp_path):
    from framework.core.plain import to_plain
    from framework.models.tiny import resolve_model_dir

    return resolve_model_dir(to_plain(compose_config(["model=tiny_qwen2"]).model), tmp_path / "tiny_models")


def _pieces(model_dir: str, update_devices: list, rollout_devices: list, behaviour: bool):
    """A perturbed tiny policy on the update's devices, its update, the rollout placement and sampler."""
    import jax
    from flax import linen as nn
    from transformers import AutoTokenizer

    from framework.backends.maxtext.checkpoint_io import load_hf_params
    from framework.backends.maxtext.models import ModelConfig, Transformer, abstract_params
    from framework.backends.maxtext.sampler import Sampler
    from framework.backends.maxtext.sharding import build_mesh, logical_axis_rules, param_shardings, rollout_parallel
    from framework.backends.maxtext.trainers import rollout
    from framework.backends.maxtext.trainers.update import PolicyUpdate, build_optimizer, learning_rate_schedule
    from framework.core.parallel import ParallelConfig

    task = grpo_task("grpo.prompts_per_step=4", "grpo.num_generations=2", "grpo.max_new_tokens=6",
                     "grpo.micro_batch_size=8")
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    config = ModelConfig.from_pretrained(model_dir, param_dtype="float32", dtype="float32")
    rules, boxed = logical_axis_rules(), abstract_params(Transformer(config))
    layout = ParallelConfig(dp=1, fsdp=-1, tp=1, pp=1, ep=1, cp=1)
    mesh = build_mesh(layout, update_devices)
    noise = np.random.default_rng(0)  # HF init has zero biases and unit norms: perturb every tensor
    params = jax.device_put(jax.tree.map(lambda x: np.asarray(x) + noise.normal(0, 0.05, x.shape).astype(np.float32),
                                         load_hf_params(model_dir, config)), param_shardings(boxed, mesh, rules))
    model = Transformer(config, mesh, rules)
    optimizer = build_optimizer(task.optimizer, learning_rate_schedule(task.optimizer, task.steps, 1))
    update = PolicyUpdate(model, task, optimizer, nn.unbox(boxed), param_shardings(boxed, mesh, rules), mesh, rules)
    rollout_axes = rollout_layout(dp=1, tp=1, placement="separate" if behaviour else "shared")
    placement = rollout.RolloutPlacement(rollout_parallel(rollout_axes, len(rollout_devices), task.prompts_per_step,
                                                          lambda: 1), rollout_devices, mesh, boxed, rules, config.dtype)
    sampler = Sampler(model, eos_token_ids=[tokenizer.eos_token_id], pad_token_id=tokenizer.pad_token_id,
                      prompt_bucket=task.max_prompt_tokens, mesh=placement.mesh, rules=rules,
                      behaviour_log_probs=behaviour)
    encoder = rollout.PromptEncoder(tokenizer, None, task.max_prompt_tokens)
    return task, params, update, placement, sampler, encoder


def _problems(count: int, offset: int = 0) -> list:
    from framework.data import data_spec
    from framework.data.math import train_examples

    examples = train_examples(data_spec(compose_config(["recipe=grpo_arithmetic_cpu"]).data, "grpo"))
    return examples[offset:offset + count]


def _batch(rollouts, log_probs=None) -> dict:
    arrays = {"input_ids": rollouts.input_ids, "attention_mask": rollouts.attention_mask,
              "completion_mask": rollouts.completion_mask}
    return arrays | ({"old_log_probs": log_probs} if log_probs is not None else {})


def _behaviour_checks(model_dir: str, devices: list) -> dict:
    import jax

    from framework.backends.maxtext.sampler import SamplingParams
    from framework.backends.maxtext.trainers import rollout

    task, params, update, _, sampler, encoder = _pieces(model_dir, devices, devices, behaviour=True)
    plain = _pieces(model_dir, devices, devices, behaviour=False)[4]
    sampling = SamplingParams(max_new_tokens=6, temperature=1.0, num_samples=2)
    examples = _problems(task.prompts_per_step)
    with_lp, _ = rollout.generate(sampler, encoder, params, examples, jax.random.key(3), sampling)
    without, _ = rollout.generate(plain, encoder, params, examples, jax.random.key(3), sampling)
    batch = update.to_device(_batch(with_lp))
    recomputed = np.asarray(update.log_probs(params, batch)) * with_lp.completion_mask
    mask = with_lp.completion_mask > 0
    return {"tokens_equal": bool(np.array_equal(with_lp.input_ids, without.input_ids)),
            "padding_zero": bool((with_lp.behaviour_log_probs[~mask] == 0).all()),
            "max_abs_log_prob_diff": float(np.abs(recomputed - with_lp.behaviour_log_probs).max()),
            "mean_log_prob": float(with_lp.behaviour_log_probs[mask].mean())}


def _train_off_policy(pipeline, task, params, update, steps: int) -> tuple[list, list, list, list]:
    """`steps` steps of the trainer's pipeline in the trainer's order (take, update dispatched, B_{t+L} started, B_{t+1}
    prefetched, the weights moved without waiting; advantages fixed, problems 4 apart): the weights before each step
    and after the last (host copies), the batches, their staleness and the losses."""
    import jax

    opt_state = update.init_opt_state(params)
    draws = iter([(_problems(task.prompts_per_step, 4 * i), jax.random.key(i)) for i in range(steps)])
    snapshots, batches, stalenesses, losses = [jax.device_get(params)], [], [], []
    advantages = np.random.default_rng(1).normal(size=task.rows_per_step).astype(np.float32)
    for step in range(1, steps + 1):
        rollouts, _, _, timing = pipeline.take(step, params, lambda: next(draws), steps)
        batches.append(rollouts)
        stalenesses.append(timing["staleness"])
        params, opt_state, metrics = update.start(params, opt_state, None, _batch(
            rollouts, rollouts.behaviour_log_probs) | {"advantages": advantages},
            lambda: pipeline.start_next(step, lambda: next(draws), steps))
        pipeline.during_update(step, params, steps, 0.0)
        losses.append(metrics()["loss"])
        snapshots.append(jax.device_get(params))
        pipeline.after_update(step, params, steps)
    pipeline.close()
    return snapshots, batches, stalenesses, losses


def _off_policy_checks(model_dir: str) -> dict:
    """In the subprocess with 2 host devices: three lag-1 steps of the trainer's OffPolicyRollouts (rollout on
    device 0, update on device 1 of 4, greedy), each batch compared with a greedy sample of the weights two versions
    back, and its behaviour log-probs with the log-probs under those weights and under the next ones."""
    import jax

    from framework.backends.maxtext.sampler import SamplingParams
    from framework.backends.maxtext.trainers import rollout
    from framework.backends.maxtext.trainers.pipeline import OffPolicyRollouts

    devices = jax.devices()
    task, params, update, placement, sampler, encoder = _pieces(model_dir, devices[1:2], devices[:1], behaviour=True)
    greedy = SamplingParams(max_new_tokens=task.max_new_tokens, temperature=0.0, num_samples=task.num_generations)
    snapshots, batches, stalenesses, losses = _train_off_policy(
        OffPolicyRollouts([sampler], encoder, [placement], greedy), task, params, update, steps=3)

    def log_probs(weights, rollouts) -> np.ndarray:
        placed = jax.device_put(weights, jax.tree.map(lambda x: x.sharding, params))
        return np.asarray(update.log_probs(placed, update.to_device(_batch(rollouts)))) * rollouts.completion_mask

    tokens_equal, to_behaviour, to_newer = [], [], []
    for step, rollouts in enumerate(batches, start=1):
        behaviour = snapshots[max(step - 2, 0)]  # theta_{t-2} samples B_t (theta_0 samples B_1)
        policy, _ = placement.policy(jax.device_put(behaviour, jax.tree.map(lambda x: x.sharding, params)))
        again, _ = rollout.generate(sampler, encoder, policy, _problems(task.prompts_per_step, 4 * (step - 1)),
                                    jax.random.key(step - 1), greedy)
        tokens_equal.append(bool(np.array_equal(again.input_ids, rollouts.input_ids)))
        to_behaviour.append(float(np.abs(log_probs(behaviour, rollouts) - rollouts.behaviour_log_probs).max()))
        to_newer.append(float(np.abs(log_probs(snapshots[step - 1], rollouts) - rollouts.behaviour_log_probs).max()))
    return {"staleness": stalenesses, "tokens_equal_behaviour_policy": tokens_equal,
            "losses": losses,
            "diff_to_behaviour": to_behaviour, "diff_to_newer": to_newer,
            "devices": {"rollout": [d.id for d in placement.mesh.devices.flat],
                        "update": [d.id for d in update.mesh.devices.flat]}}


if __name__ == "__main__":
    print(json.dumps(_off_policy_checks(sys.argv[1])))
