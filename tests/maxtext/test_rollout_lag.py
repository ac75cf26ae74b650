"""GRPO L steps off-policy with L rollout groups (grpo.rollout_lag=L >= 2; trainers/pipeline.py): the one-line
config refusals, the lag a checkpoint records, the L-group prediction and search, and on forced CPU devices that
batch t is what theta_{t-L-1} samples (theta_0 for the first L), an end-to-end run with evaluation and the
kill -9 resume with L batches in flight.

The multi-device check runs this file as a script in a subprocess (XLA_FLAGS before jax is imported).
"""

from __future__ import annotations

import json
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from framework.core.errors import ConfigError
from tests.conftest import run_cli
from tests.maxtext.test_rollout_layouts import rollout_layout

LAG2 = ["recipe=grpo_arithmetic_cpu", "grpo.rollout_lag=2", "parallel.rollout.placement=separate",
        "parallel.rollout.devices=2"]


def test_rollout_groups_and_their_one_line_refusals():
    from framework.backends.maxtext.trainers.pipeline import check_off_policy, group_devices

    check_off_policy(2, rollout_layout(placement="separate", devices=4))
    check_off_policy(3, rollout_layout(placement="separate", devices="auto"))
    for devices in (3, 0, 1, None):  # not a multiple of L, or fewer devices than groups
        with pytest.raises(ConfigError, match=rf"^parallel.rollout.devices: {devices} does not split into the "
                                              r"grpo.rollout_lag=2 rollout groups; use auto or a multiple of 2 \(2, "
                                              r"4, ..\) below the device count \(the rest train\)$"):
            check_off_policy(2, rollout_layout(placement="separate", devices=devices))
    with pytest.raises(ConfigError, match=r"^grpo.rollout_lag: 2 needs parallel.rollout.placement=separate"):
        check_off_policy(2, rollout_layout())
    with pytest.raises(ConfigError, match=r"^grpo.rollout_lag: -1 is not valid; use 0"):
        check_off_policy(-1, None)
    assert group_devices([0, 1, 2, 3], 2) == [[0, 1], [2, 3]]
    assert group_devices([0, 1], 0) == [[0, 1]] and group_devices([0], 1) == [[0]]
    with pytest.raises(ConfigError, match=r"^parallel.rollout.devices: 3 does not split into the grpo.rollout_lag=2"):
        group_devices([0, 1, 2], 2)


def test_a_checkpoint_resumed_with_another_lag_is_refused(tmp_path):
    from framework.backends.maxtext.trainers.in_flight import IN_FLIGHT, LAG_KEY, refuse_lag_change

    lag1 = SimpleNamespace(state={IN_FLIGHT: {}}, path=tmp_path)  # a lag-1 checkpoint: no LAG_KEY
    lag2 = SimpleNamespace(state={IN_FLIGHT: {}, f"{IN_FLIGHT}_2": {}, LAG_KEY: 2}, path=tmp_path)
    refuse_lag_change(lag1, 1)
    refuse_lag_change(lag2, 2)
    refuse_lag_change(SimpleNamespace(state={"rng": []}, path=tmp_path), 2)  # nothing in flight: any lag
    with pytest.raises(ConfigError, match=r"^grpo.rollout_lag: 1, but .* was written by a rollout_lag=2 run"):
        refuse_lag_change(lag2, 1)
    with pytest.raises(ConfigError, match=r"^grpo.rollout_lag: 2, but .* was written by a rollout_lag=1 run.*"
                                          r"resume it with grpo.rollout_lag=1"):
        refuse_lag_change(lag1, 2)
    with pytest.raises(ConfigError, match=r"^grpo.rollout_lag: 0, but .* was written by a rollout_lag=2 run"):
        refuse_lag_change(lag2)


def test_a_checkpoint_missing_a_batch_its_data_iterator_drew_is_one_line_naming_the_slot(tmp_path):
    """A lag-L checkpoint at step t holds the batches its data iterator drew past B_t: L of them, fewer near the
    writing run's last step (a resume that raises grpo.steps samples the rest); a missing or extra slot would skip
    or repeat a batch's data."""
    from framework.backends.maxtext.trainers.in_flight import IN_FLIGHT, LAG_KEY, in_flight_slots
    from framework.backends.maxtext.trainers.pipeline import OffPolicyRollouts
    from framework.core.errors import CheckpointError

    def checkpoint(drawn: int, *slots: str) -> SimpleNamespace:  # at step 3; 5 items: 2 batches of 2 an epoch
        iterator = {"epoch": (drawn - 1) // 2, "position": 2 * ((drawn - 1) % 2 + 1), "seed": 0, "num_items": 5,
                    "batch_size": 2}
        return SimpleNamespace(step=3, path=tmp_path / "step_3", state={"data_iterator": iterator, LAG_KEY: 2,
                                                                         **{slot: {} for slot in slots}})

    second = f"{IN_FLIGHT}_2"
    assert in_flight_slots(checkpoint(5, IN_FLIGHT, second), 2) == [IN_FLIGHT, second]
    assert in_flight_slots(checkpoint(4, IN_FLIGHT), 2) == [IN_FLIGHT]  # written by a run with grpo.steps=4
    assert in_flight_slots(checkpoint(3), 2) == []  # its last step (or a lag-0 checkpoint)
    with pytest.raises(CheckpointError, match=rf"^{tmp_path / 'step_3'}: the batch in flight {second} is missing "
                                              r"\(the iterator is 2 batches past step 3: .*in_flight, in_flight_2\)$"):
        OffPolicyRollouts([None] * 2, None, [None] * 2, None).restore(checkpoint(5, IN_FLIGHT), "state.safetensors")
    with pytest.raises(CheckpointError, match=r"the batch in flight in_flight_2 is missing"):  # a gap
        in_flight_slots(checkpoint(6, IN_FLIGHT, f"{IN_FLIGHT}_3"), 3)
    with pytest.raises(CheckpointError, match=r"the batch in flight in_flight_2 is one its data iterator never drew"):
        in_flight_slots(checkpoint(4, IN_FLIGHT, second), 2)
    with pytest.raises(CheckpointError, match=r"its data iterator is 3 batches past step 3; a grpo.rollout_lag=2 "):
        in_flight_slots(checkpoint(6, IN_FLIGHT, second), 2)


def test_l_groups_divide_the_predicted_rollout_and_the_search_tries_only_splits_l_divides():
    from framework.backends.maxtext.trainers.layout_search import search
    from framework.backends.maxtext.trainers.preflight import predict_step, reshard_seconds
    from tests.maxtext.test_layout_search import _setting

    model, weights, hardware, parallel, task = _setting("grpo.rollout_lag=2")
    one = predict_step(model.hf_config, hardware, parallel.resolve(2), 2, task, parallel.resolve(1), 1e8,
                       rollout_devices=1)
    if not one:
        pytest.skip("the simulator is not importable")
    two = predict_step(model.hf_config, hardware, parallel.resolve(2), 2, task, parallel.resolve(1), 1e8,
                       rollout_devices=1, rollout_groups=2)
    rollout_s = one["preflight_prefill_s"] + one["preflight_decode_s"]
    # the move's copy is off the update's path; its staging (a whole bf16 copy gathered on each of the 2 update
    # devices, each holding half of it) is on it
    assert two["preflight_stage_s"] == pytest.approx(reshard_seconds(1e8 / 2, hardware))
    assert two["preflight_predicted_step_s"] == pytest.approx(max((two["preflight_reshard_s"] + rollout_s) / 2,
        two["preflight_train_s"] + two.get("preflight_forward_s", 0.0) + two["preflight_stage_s"]))
    # a move longer than the update bounds the step: one leaves the update devices per step
    slow_move = predict_step(model.hf_config, hardware, parallel.resolve(2), 2, task, parallel.resolve(1), 1e13,
                             rollout_devices=1, rollout_groups=2)
    assert slow_move["preflight_predicted_step_s"] == pytest.approx(slow_move["preflight_reshard_s"])
    assert slow_move["preflight_reshard_s"] > slow_move["preflight_train_s"] + slow_move["preflight_stage_s"]
    chosen, candidates = search(model, weights, hardware, parallel, task, "minimal", 4, groups=2)
    assert {c.rollout_devices for c in candidates} == {2} and chosen.name == "r2_g2_tp1_dp1"
    assert chosen.step_s == pytest.approx(max((chosen.prediction["preflight_reshard_s"] + chosen.rollout_s) / 2,
                                              chosen.update_s + chosen.prediction["preflight_stage_s"]))
    with pytest.raises(ConfigError, match=r"^parallel.rollout.devices: auto with placement=separate needs 4 or more "
                                          r"devices \(3 here\): one per rollout group \(grpo.rollout_lag=3\)"):
        search(model, weights, hardware, parallel, task, "minimal", 3, groups=3)


@pytest.mark.slow
def test_batch_t_is_what_the_policy_l_plus_1_versions_back_samples(tmp_path):
    from tests.maxtext.forced_devices import facts_on_cpu_devices
    from tests.maxtext.test_off_policy import _model_dir

    facts = facts_on_cpu_devices(__file__, 4, str(_model_dir(tmp_path)), timeout=600)
    print(json.dumps(facts, indent=1))
    assert facts["staleness"] == [0.0, 1.0, 2.0, 2.0, 2.0]
    assert facts["behaviour_versions"] == [0, 0, 0, 1, 2]  # theta_0 samples B_1 .. B_3, theta_{t-3} the rest
    assert facts["tokens_equal_behaviour_policy"] == [True] * 5
    for step, (behaviour, newer) in enumerate(zip(facts["diff_to_behaviour"], facts["diff_to_newer"]), start=1):
        assert behaviour < 1e-4, (step, behaviour)
        if step > 1:  # B_1 is on-policy; later batches are 1 .. L updates behind the weights they train
            assert newer > 100 * max(behaviour, 1e-7), (step, newer)
    assert all(np.isfinite(facts["losses"]))
    assert facts["devices"] == {"rollout": [[0], [1]], "update": [2, 3]}


@pytest.mark.slow
def test_a_lag_2_run_samples_on_two_groups_and_evaluates(tmp_path):
    proc = run_cli([*LAG2, "grpo.steps=4", "grpo.preflight=true", "hardware.intra_node_gb_s=20", "grpo.eval.every=2",
                    "grpo.eval.num_examples=2", "progress=false", f"hydra.run.dir={tmp_path}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "in each of 2 rollout groups [[0], [1]]" in proc.stderr
    assert "grpo: mesh {'data': 1, 'fsdp': 1, 'expert': 1, 'tensor': 1} over 1 cpu device(s)" in proc.stderr
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [row["staleness"] for row in rows] == [0.0, 1.0, 2.0, 2.0]
    # theta_1's move (after step 1, to group 1) runs beside update 2 and is reported by step 2; theta_2 .. sample
    # nothing
    assert [row["reshard_time_s"] > 0 for row in rows] == [False, True, False, False]
    assert [("eval_accuracy" in row) for row in rows] == [False, True, False, True]  # step 2: B_3, B_4 in flight
    assert all(np.isfinite(row["loss"]) for row in rows)
    summary = json.loads((tmp_path / "summary.json").read_text())["result"]["metrics"]
    assert summary["rollout_groups"] == 2 and summary["preflight_overlapped"]
    # each group's sampling program compiled ahead and taken (evaluation's greedy calls on group 0 go through jit)
    assert "aot: compiled rollout_1" in proc.stderr and "aot: rollout_1 runs through jax.jit" not in proc.stderr
    assert summary["aot_unused"] == ""
    assert summary["preflight_predicted_step_s"] == pytest.approx(max(
        summary["preflight_train_s"] + summary["preflight_stage_s"],
        (summary["preflight_reshard_s"] + summary["preflight_prefill_s"] + summary["preflight_decode_s"]) / 2))


@pytest.mark.slow
def test_a_lag_2_run_with_devices_auto_picks_a_split_into_two_groups(tmp_path):
    proc = run_cli(["recipe=grpo_arithmetic_cpu", "grpo.rollout_lag=2", "parallel.rollout.placement=separate",
                    "parallel.rollout.devices=auto", "hardware.devices_per_node=3", "grpo.steps=1",
                    "grpo.preflight=true", "hardware.intra_node_gb_s=20", "progress=false",
                    f"hydra.run.dir={tmp_path}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "parallel.rollout.devices auto -> 2 (rollout dp=1 tp=1 in each of 2 groups | update on 1" in proc.stderr
    summary = json.loads((tmp_path / "summary.json").read_text())["result"]["metrics"]
    assert summary["layout_search_choice"] == "r2_g2_tp1_dp1" and summary["rollout_groups"] == 2


@pytest.mark.slow
def test_resume_conformance_kill_9_two_steps_off_policy(tmp_path):
    """B_3 and B_4 are in the checkpoint of step 2: killed after it, the rerun ends byte for byte the same."""
    from tests.conformance import check_kill_resume

    check_kill_resume(tmp_path, [*LAG2, "grpo.steps=5", "grpo.checkpoint.every=2", "grpo.max_new_tokens=2"],
                      kill_after_checkpoint=2)


@pytest.mark.slow
def test_a_lag_2_checkpoint_before_the_last_step_holds_one_batch_and_resumes_with_more_steps(tmp_path):
    """At step 2 of a 3-step run only B_3 is in flight (B_4 is past the last step: never drawn); the checkpoint does
    not record grpo.steps, yet the slot check must accept it, and a resume with grpo.steps=5 samples B_4 and B_5."""
    import shutil

    common = [*LAG2, "grpo.max_new_tokens=2", "progress=false", f"hydra.run.dir={tmp_path}"]
    first = run_cli([*common, "grpo.steps=3", "grpo.checkpoint.every=1"])
    assert first.returncode == 0, first.stderr[-3000:]
    checkpoints = tmp_path / "checkpoints"
    state = json.loads((checkpoints / "step_2" / "manifest.json").read_text())["state"]
    assert "in_flight" in state and "in_flight_2" not in state and state["rollout_lag"] == 2
    shutil.rmtree(checkpoints / "step_3")  # resume from step 2
    resumed = run_cli([*common, "grpo.steps=5"])
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows] == [1, 2, 3, 4, 5]


def _lag_checks(model_dir: str, lag: int = 2, steps: int = 5) -> dict:
    """In the subprocess with 4 host devices: `steps` lag-2 steps of the trainer's OffPolicyRollouts (rollout
    groups on devices 0 and 1, the update on 2 and 3, greedy), each batch compared with a greedy sample of the
    weights L + 1 versions back, and its behaviour log-probs with the log-probs under those weights and the next."""
    import jax

    from framework.backends.maxtext.sampler import SamplingParams
    from framework.backends.maxtext.trainers import rollout
    from framework.backends.maxtext.trainers.pipeline import OffPolicyRollouts
    from tests.maxtext.test_off_policy import _batch, _pieces, _problems, _train_off_policy

    devices = jax.devices()
    groups = [_pieces(model_dir, devices[2:4], devices[g:g + 1], behaviour=True) for g in range(lag)]
    task, params, update, _, _, encoder = groups[0]
    placements, samplers = [group[3] for group in groups], [group[4] for group in groups]
    greedy = SamplingParams(max_new_tokens=task.max_new_tokens, temperature=0.0, num_samples=task.num_generations)
    snapshots, batches, stalenesses, losses = _train_off_policy(
        OffPolicyRollouts(samplers, encoder, placements, greedy), task, params, update, steps)

    def placed(weights):
        return jax.device_put(weights, jax.tree.map(lambda x: x.sharding, params))

    def log_probs(weights, rollouts) -> np.ndarray:
        return np.asarray(update.log_probs(placed(weights), update.to_device(_batch(rollouts)))) * rollouts.completion_mask

    versions, tokens_equal, to_behaviour, to_newer = [], [], [], []
    for step, rollouts in enumerate(batches, start=1):
        version = max(step - lag - 1, 0)  # theta_{t-L-1} samples B_t (theta_0 samples B_1 .. B_{L+1})
        group = (step - 1) % lag
        policy, _ = placements[group].policy(placed(snapshots[version]))
        again, _ = rollout.generate(samplers[group], encoder, policy, _problems(task.prompts_per_step, 4 * (step - 1)),
                                    jax.random.key(step - 1), greedy)
        versions.append(version)
        tokens_equal.append(bool(np.array_equal(again.input_ids, rollouts.input_ids)))
        to_behaviour.append(float(np.abs(log_probs(snapshots[version], rollouts) - rollouts.behaviour_log_probs).max()))
        to_newer.append(float(np.abs(log_probs(snapshots[step - 1], rollouts) - rollouts.behaviour_log_probs).max()))
    return {"staleness": stalenesses, "behaviour_versions": versions, "tokens_equal_behaviour_policy": tokens_equal,
            "losses": losses, "diff_to_behaviour": to_behaviour, "diff_to_newer": to_newer,
            "devices": {"rollout": [[d.id for d in p.mesh.devices.flat] for p in placements],
                        "update": [d.id for d in update.mesh.devices.flat]}}


if __name__ == "__main__":
    print(json.dumps(_lag_checks(sys.argv[1])))
