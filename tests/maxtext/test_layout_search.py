"""`parallel.rollout.devices: auto` (trainers/layout_search.py) and the preflight's memory under grpo.rollout_lag=1:
the split the predictions favour, the memory that moves it, the copies the weight move adds, their one-line
refusals, and a run on 4 forced CPU devices whose choice is the argmin of the predictions it logs."""

from __future__ import annotations

import json
import re
from dataclasses import replace

import pytest

from framework.core.build import build
from framework.core.errors import ConfigError
from framework.core.parallel import ParallelConfig
from tests.conftest import compose_config, run_cli

LAG1_AUTO = ["grpo.rollout_lag=1", "parallel.rollout.placement=separate", "parallel.rollout.devices=auto"]


def _setting(*overrides: str):
    """Qwen2.5-0.5B's GRPO recipe on 4 H100s, 12 prompts x 8 (96 rows: every split 1..3 | 3..1 can run)."""
    from framework.backends.maxtext.models import ModelConfig
    from framework.tasks.grpo import GRPOTask

    cfg = compose_config(["recipe=grpo_gsm8k", "data=gsm8k_sample", "hardware=h100", "hardware.devices_per_node=4",
                          "grpo.prompts_per_step=12", "grpo.micro_batch_size=24", "backend.adapter.remat=minimal",
                          *LAG1_AUTO, *overrides])
    task = build(GRPOTask, cfg.grpo, "grpo")
    model = ModelConfig.from_hf_config(dict(cfg.model.hf_config), param_dtype=task.param_dtype,
                                       dtype=task.compute_dtype)
    return model, 0.494e9 * 4, dict(cfg.hardware), build(ParallelConfig, cfg.parallel, "parallel"), task


def _search(hardware_memory_gb: float | None = None, total: int = 4):
    from framework.backends.maxtext.trainers.layout_search import search

    model, weights, hardware, parallel, task = _setting()
    if hardware_memory_gb is not None:
        hardware = {**hardware, "memory_gb": hardware_memory_gb}
    return search(model, weights, hardware, parallel, task, "minimal", total)


def test_auto_picks_the_fastest_predicted_split_that_fits_and_memory_moves_it():
    from framework.backends.maxtext.trainers.preflight import MEMORY_HEADROOM

    chosen, candidates = _search()
    assert {c.name for c in candidates} == {"r1_tp1_dp1", "r2_tp1_dp2", "r2_tp2_dp1", "r3_tp1_dp3"}
    fitting = [c for c in candidates if c.fits]
    assert chosen is min(fitting, key=lambda c: c.step_s)
    for c in candidates:  # each predicted as it runs: max(the move + rollout, update) (the move is off the update's path)
        assert c.step_s == pytest.approx(max(c.rollout_s + c.prediction["preflight_reshard_s"],
                                             c.update_s + c.prediction["preflight_stage_s"]))  # (a move < update)
    # a device too small for the chosen split's peak but not for another: the pick moves to the fastest that fits
    smaller = min((c for c in fitting if c.memory_gb < chosen.memory_gb), key=lambda c: c.step_s)
    budget = (smaller.memory_gb + chosen.memory_gb) / 2
    tight, tight_candidates = _search(budget / MEMORY_HEADROOM)
    assert tight.name != chosen.name and tight.memory_gb <= budget
    assert tight is min((c for c in tight_candidates if c.memory_gb <= budget), key=lambda c: c.step_s)
    with pytest.raises(ConfigError) as caught:
        _search(0.5)
    assert str(caught.value).startswith("parallel.rollout.devices: auto finds no split of the 4 devices that fits")
    assert "\n" not in str(caught.value)


def test_each_candidate_moves_the_weights_between_the_meshes_its_layouts_build(monkeypatch):
    """The weight move of a candidate is costed from the update's mesh on the devices left (fsdp=-1: all of them)
    and the rollout's (sharding.mesh_shape, as the run builds them); the expert axis is 1 (dense models)."""
    from framework.backends.maxtext.trainers import layout_search

    moves, original = {}, layout_search.reshard_bytes_per_device

    def spy(weight_bytes, update_mesh, rollout_mesh, separate=False):
        moves[len(moves)] = (dict(update_mesh), dict(rollout_mesh))
        return original(weight_bytes, update_mesh, rollout_mesh, separate)

    monkeypatch.setattr(layout_search, "reshard_bytes_per_device", spy)
    _, candidates = _search()
    mesh = {"data": 1, "fsdp": 1, "expert": 1, "tensor": 1}
    expected = {"r1_tp1_dp1": ({**mesh, "fsdp": 3}, mesh), "r2_tp1_dp2": ({**mesh, "fsdp": 2}, {**mesh, "data": 2}),
                "r2_tp2_dp1": ({**mesh, "fsdp": 2}, {**mesh, "tensor": 2}), "r3_tp1_dp3": (mesh, {**mesh, "data": 3})}
    assert {c.name: moves[n] for n, c in enumerate(candidates)} == expected


def test_auto_on_one_device_is_a_one_line_error():
    with pytest.raises(ConfigError) as caught:
        _search(total=1)
    message = str(caught.value)
    assert message.startswith("parallel.rollout.devices: auto with placement=separate needs 2 or more devices (1 here)")
    assert "\n" not in message


def test_auto_keeps_a_rollout_tp_the_config_sets():
    from framework.backends.maxtext.trainers.layout_search import search

    model, weights, hardware, parallel, task = _setting()
    parallel = replace(parallel, rollout=replace(parallel.rollout, tp=2))
    chosen, candidates = search(model, weights, hardware, parallel, task, "minimal", 4)
    assert {c.name for c in candidates} == {"r1", "r2_tp2_dp1", "r3"} and chosen.name == "r2_tp2_dp1"


def test_auto_that_predicts_no_split_says_so_and_names_each_reason():
    from framework.backends.maxtext.trainers.layout_search import search

    model, weights, hardware, parallel, task = _setting()
    parallel = replace(parallel, rollout=replace(parallel.rollout, tp=3))  # divides neither 14 heads nor r=1, 2
    with pytest.raises(ConfigError) as caught:
        search(model, weights, hardware, parallel, task, "minimal", 4)
    message = str(caught.value)
    assert message.startswith("parallel.rollout.devices: auto cannot predict any split of the 4 devices")
    assert "fits" not in message.split("(")[0] and "\n" not in message
    assert "r1: skipped (" in message and "prompts)" not in message.split("r1: skipped (")[1].split(";")[0]


def test_auto_counts_the_reference_model_on_the_update_devices():
    from framework.backends.maxtext.trainers.layout_search import search

    model, weights, hardware, parallel, task = _setting("grpo.beta=0.04")
    _, candidates = search(model, weights, hardware, parallel, task, "minimal", 4)
    for c in candidates:
        if c.step_s is None:
            continue
        reference_gb = weights / (c.update.fsdp * c.update.tp) / 1e9
        assert c.memory_gb == pytest.approx(max(c.prediction["preflight_rollout_memory_gb"],
                                                c.prediction["preflight_update_memory_gb"] + reference_gb))
        assert c.memory_gb > c.prediction["preflight_update_memory_gb"]


def test_a_rollout_on_an_fsdp_mesh_is_predicted_slower_than_replicas_on_the_same_devices():
    """2 of 4 devices decode: fsdp=2 gathers the weights every decode step (sims/sharded_forward.py), dp=2 does not."""
    from framework.backends.maxtext.trainers.layout_search import predict

    model, weights, hardware, parallel, task = _setting()
    on = {name: predict(model, weights, hardware, parallel, task, "minimal", 2,
                        ParallelConfig(dp=3 - fsdp, fsdp=fsdp, tp=1, pp=1, ep=1, cp=1), 4)
          for name, fsdp in (("fsdp", 2), ("replicas", 1))}
    assert on["fsdp"].rollout_s > 1.5 * on["replicas"].rollout_s
    assert on["fsdp"].step_s > on["replicas"].step_s
    assert on["fsdp"].update_s == pytest.approx(on["replicas"].update_s)


def test_predict_step_stages_the_rollouts_whole_share_with_equal_device_counts():
    """2 | 2: the update devices lay out the rollout's share (each rollout replica's whole copy) before the
    device-to-device copy; 1 | 2 would stage only the update's own cast shard."""
    from framework.backends.maxtext.trainers.preflight import predict_step

    model, _, hardware, _, task = _setting()
    fsdp = ParallelConfig(dp=1, fsdp=-1, tp=1, pp=1, ep=1, cp=1)
    replicas = ParallelConfig(dp=2, fsdp=1, tp=1, pp=1, ep=1, cp=1)
    big = {**hardware, "memory_gb": 10_000.0}

    def update_gb(moved: float) -> float:  # a move so large that the staging copy is the update side's peak
        return predict_step(model.hf_config, big, fsdp, 2, task, replicas, moved, remat="minimal",
                            rollout_devices=2)["preflight_update_memory_gb"]

    assert update_gb(400e9) - update_gb(200e9) == pytest.approx(200.0)  # not 100: the update's own half


def test_the_weight_moves_copies_are_counted_on_each_side_and_a_layout_they_overflow_is_refused():
    """Lag 1: the rollout devices hold the next weights beside the ones still decoding, the update devices the
    staging copy beside their params and AdamW state; without the copies the same layout fits."""
    from framework.backends.maxtext.trainers.preflight import off_policy_memory, predict_step, refuse_out_of_memory

    breakdowns = {"prefill": {"weights": 1.0, "kv_cache": 0.5, "activations": 0.2},
                  "decode": {"weights": 1.0, "kv_cache": 2.0, "activations": 0.1},
                  "train": {"weights": 4.0, "gradients": 4.0, "optimizer": 8.0, "activations": 3.0}}
    memory = off_policy_memory(breakdowns, 1e9, 2e9, 20.0)
    assert memory["preflight_rollout_memory_gb"] == pytest.approx(3.1 + 1.0)
    assert memory["preflight_update_memory_gb"] == pytest.approx(19.0 + 2.0)  # the next update starts beside it
    assert memory["preflight_fits"] is False
    assert off_policy_memory(breakdowns, 1e9, 0.5e9, 20.0)["preflight_fits"]

    # long completions (a large KV cache) and a sharded update of small micro-batches: the rollout side is the peak
    model, weights, hardware, parallel, task = _setting("grpo.micro_batch_size=4", "grpo.max_new_tokens=4096",
                                                        "grpo.num_generations=16")
    one = ParallelConfig(dp=1, fsdp=1, tp=1, pp=1, ep=1, cp=1)
    fsdp = ParallelConfig(dp=1, fsdp=-1, tp=1, pp=1, ep=1, cp=1)
    moved = weights / 2  # the bf16 copy each rollout device receives

    def predict(hardware_file: dict, move_bytes: float) -> dict:  # rollout on 1 device, the update fsdp over 2
        return predict_step(model.hf_config, hardware_file, fsdp, 2, task, one, move_bytes, remat="full",
                            rollout_devices=1)

    without, counted = predict(hardware, 0.0), predict(hardware, moved)
    assert counted["preflight_rollout_memory_gb"] == pytest.approx(without["preflight_rollout_memory_gb"] + moved / 1e9)
    assert counted["preflight_update_memory_gb"] >= without["preflight_update_memory_gb"]
    assert counted["preflight_memory_per_device_gb"] > without["preflight_memory_per_device_gb"]
    # a device between the two estimates: the layout fits only when the copies are not counted
    between = {**hardware, "memory_gb": (counted["preflight_memory_per_device_gb"]
                                         + without["preflight_memory_per_device_gb"]) / 2}
    refuse_out_of_memory(predict(between, 0.0), between, task)
    refused = predict(between, moved)
    with pytest.raises(ConfigError) as caught:
        refuse_out_of_memory(refused, between, task)
    message = str(caught.value)
    assert message.startswith("parallel.rollout: the preflight predicts") and "\n" not in message
    assert "per rollout device (two weight copies while they move)" in message and "parallel.rollout.tp" in message


def test_staging_is_the_rollout_share_when_the_group_divides_the_update_else_the_updates_own_shard():
    from framework.backends.maxtext.trainers.preflight import staging_bytes_per_device

    fsdp2 = ParallelConfig(dp=1, fsdp=2, tp=1, pp=1, ep=1, cp=1)
    fsdp3 = ParallelConfig(dp=1, fsdp=3, tp=1, pp=1, ep=1, cp=1)
    replicas2 = ParallelConfig(dp=2, fsdp=1, tp=1, pp=1, ep=1, cp=1)
    one = ParallelConfig(dp=1, fsdp=1, tp=1, pp=1, ep=1, cp=1)
    tp2 = ParallelConfig(dp=1, fsdp=1, tp=2, pp=1, ep=1, cp=1)
    assert staging_bytes_per_device(1e9, fsdp2, replicas2, staged=True) == 1e9  # the whole copy, laid out
    assert staging_bytes_per_device(5e8, fsdp2, tp2, staged=True) == 5e8
    assert staging_bytes_per_device(1e9, fsdp2, one, staged=True) == 1e9  # 2 -> 1: a whole copy on each
    assert staging_bytes_per_device(1e9, fsdp3, one.resolve(1), staged=False) == 1e9 / 3  # 3 -> 2: cast in place


def test_predict_step_counts_the_staged_copy_whenever_a_group_divides_the_update(monkeypatch):
    """sharding.resharder stages a copy per rollout-sized slice when the group's device count divides the update's
    (2 -> 1 for a lag-2 group of one device, as for 2 -> 2), else casts in place: the preflight must say the same."""
    from framework.backends.maxtext.trainers import preflight

    model, weight_bytes, hw, parallel, task = _setting()
    asked = []
    monkeypatch.setattr(preflight, "staging_bytes_per_device", lambda *args, staged: asked.append(staged) or 0.0)
    replicas = ParallelConfig(dp=-1, fsdp=1, tp=1, pp=1, ep=1, cp=1)
    for update_devices, group_devices, groups in ((2, 1, 2), (2, 2, 1), (3, 1, 1), (1, 2, 1)):
        preflight.predict_step(model.hf_config, hw, parallel, update_devices, task,
                               rollout=replicas.resolve(group_devices),
                               reshard_bytes=1e9, remat="minimal", rollout_devices=group_devices, rollout_groups=groups)
    assert asked == [True, True, True, False]


def test_a_separate_rollouts_tp_counts_two_weight_copies():
    from framework.backends.maxtext.models import ModelConfig
    from framework.backends.maxtext.trainers.preflight import MEMORY_HEADROOM
    from framework.backends.maxtext.trainers.rollout_plan import rollout_tp_for
    from framework.core.paths import load_conf
    from tests.maxtext.test_rollout_layouts import grpo_task

    model = ModelConfig.from_hf_config(load_conf("model", "qwen3_8b")["hf_config"], param_dtype="float32",
                                       dtype="bfloat16")
    task, mesh = grpo_task("grpo.micro_batch_size=128"), {"data": 1, "fsdp": 1, "expert": 1, "tensor": 1}
    weights = 8.2e9 * 4  # bf16 rollout copy: 16.4 GB; a device that holds one copy and its cache, not two
    memory_gb = (16.4 * 1.5) / MEMORY_HEADROOM
    assert rollout_tp_for(model, weights, mesh, task, memory_gb, devices=4, separate=True) == 2
    assert rollout_tp_for(model, weights, {**mesh, "fsdp": 1000}, task, memory_gb, devices=4) == 1  # shared: one copy


@pytest.mark.slow
def test_a_run_on_4_devices_takes_the_argmin_of_the_predictions_it_logs(tmp_path):
    proc = run_cli(["recipe=grpo_arithmetic_cpu", *LAG1_AUTO, "hardware.devices_per_node=4", "grpo.steps=2",
                    "grpo.preflight=true", "hardware.intra_node_gb_s=20", "progress=false",
                    f"hydra.run.dir={tmp_path}"])
    assert proc.returncode == 0, proc.stderr[-3000:]
    logged = dict(re.findall(r"parallel.rollout.devices auto candidate (\S+): step ([0-9.e+-]+) s", proc.stderr))
    chosen = re.search(r"parallel.rollout.devices auto -> (\d) \(rollout dp=(\d) tp=(\d)", proc.stderr)
    assert logged and chosen, proc.stderr[-3000:]
    best = min(logged, key=lambda name: float(logged[name]))
    rollout_devices, dp, tp = map(int, chosen.groups())
    assert best == f"r{rollout_devices}_tp{tp}_dp{dp}"
    assert f"over {4 - rollout_devices} cpu device(s)" in proc.stderr  # the update trains on the rest
    summary = json.loads((tmp_path / "summary.json").read_text())["result"]["metrics"]
    assert summary["layout_search_choice"] == best and summary["layout_search_rollout_devices"] == rollout_devices
    steps = {key[len("layout_search_"):-len("_step_s")]: value for key, value in summary.items()
             if key.startswith("layout_search_r") and key.endswith("_step_s") and value is not None}
    assert steps.keys() == logged.keys() and min(steps, key=steps.get) == best
    assert summary["preflight_overlapped"] and summary["preflight_rollout_memory_gb"] > 0
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [row["staleness"] for row in rows] == [0.0, 1.0]


def test_a_candidate_whose_sampler_shares_the_prompt_is_predicted_with_it():
    """Long prompts (2,048 + 256 tokens, 16 prompts x 8): a rollout replica holding all 16 prompts shares their K/V
    under backend.adapter.shared_prefix=auto (rollout_plan.prompt_decision), so its decode is predicted as the shared-prefix decode
    (two kernel calls and their merge, sims/shared_prefix.py); with `off` the same split decodes the repeated cache, slower."""
    from framework.backends.maxtext.trainers.layout_search import predict

    decode = {}
    for setting in ("auto", "off"):
        model, weights, hardware, parallel, task = _setting("grpo.prompts_per_step=16", "grpo.micro_batch_size=16",
                                                            "grpo.max_prompt_tokens=2048")
        model = model.replace(decode_kernel="pallas", shared_prefix=setting)
        rollout = ParallelConfig(dp=1, fsdp=1, tp=1, pp=1, ep=1, cp=1)
        decode[setting] = predict(model, weights, hardware, parallel, task, "minimal", 1, rollout, 3).prediction[
            "preflight_decode_s"]
    assert decode["auto"] < 0.8 * decode["off"]


@pytest.mark.parametrize("decode_attention,shared", [("pallas", True), ("xla", False)])
def test_the_search_predicts_with_the_kernels_and_shared_prefix_the_run_will_use(tmp_path, decode_attention, shared):
    """choose_rollout_devices builds the model from its config.json, then gives it the run's decode kernel and
    backend.adapter.shared_prefix (as the trainer does): with the Pallas kernel and `on` every candidate's decode
    holds a shared prompt, with XLA's it cannot."""
    from types import SimpleNamespace

    from framework.backends.maxtext.trainers import layout_search

    model, _, hardware, parallel, task = _setting("grpo.prompts_per_step=16", "grpo.micro_batch_size=16",
                                                  "grpo.max_prompt_tokens=2048")
    (tmp_path / "config.json").write_text(model.hf_config_json)
    config = SimpleNamespace(parallel=parallel, task=task, hardware=hardware, remat="minimal", attention="auto",
                             logical_axis_rules={},
                             decode_attention=decode_attention, shared_prefix="on",
                             model_source=SimpleNamespace(metadata=lambda: tmp_path))
    from framework.backends.maxtext.models.prefix_cache import prompt_shards

    seen, shards = [], []
    original = layout_search.prompt_decision

    def spy(model, task, mesh, rules):
        shards.append(prompt_shards(task.prompts_per_step, task.rows_per_step // task.prompts_per_step, mesh, rules))
        seen.append(original(model, task, mesh, rules)[0])
        return original(model, task, mesh, rules)

    layout_search.prompt_decision = spy
    try:
        layout_search.choose_rollout_devices(config, 3)
    finally:
        layout_search.prompt_decision = original
    assert seen and set(seen) == {shared}
    assert set(shards) == {1, 2}  # the candidates' batch shards: 1 device, 2 replicas (dp=2) or one tp=2 pair
