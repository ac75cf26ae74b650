"""The GRPO preflight simulates an fsdp update as it runs: weights gathered and gradients reduce-scattered every
micro-batch (workload.shard_weights, sims/scan_update.py), not once per step as a ZeRO-1 optimizer; and a rollout on
the fsdp mesh as it runs: every decode step (and the prefill, once) all-gathers the weights (sims/sharded_forward.py),
so data-parallel replicas decode faster."""

from __future__ import annotations

import pytest

from framework.backends.maxtext.trainers.preflight import predict_step, train_workload
from framework.core.build import build
from framework.core.parallel import ParallelConfig
from framework.tasks.grpo import GRPOTask
from sims import simulate
from tests.conftest import compose_config


def test_fsdp_shards_the_weights_and_plain_data_parallel_does_not():
    cfg = compose_config(["recipe=grpo_gsm8k", "data=gsm8k_sample", "grpo.micro_batch_size=16"])
    task = build(GRPOTask, cfg.grpo, "grpo")
    assert train_workload(task, 16, True, "none")["shard_weights"] is True
    assert train_workload(task, 16, False, "none")["shard_weights"] is False


def _recipe(devices: int):
    """The GRPO recipe (Qwen2.5-0.5B, 16 prompts x 8, 256 + 256 tokens) on `devices` H100s, micro-batch 16."""
    cfg = compose_config(["recipe=grpo_gsm8k", "data=gsm8k_sample", "hardware=h100",
                          f"hardware.devices_per_node={devices}", "grpo.micro_batch_size=16"])
    return dict(cfg.model.hf_config), dict(cfg.hardware), build(GRPOTask, cfg.grpo, "grpo")


def _layout(**axes: int) -> ParallelConfig:
    return ParallelConfig(**{"dp": 1, "fsdp": 1, "tp": 1, "pp": 1, "ep": 1, "cp": 1, **axes})


def _gather_s(hf: dict, hardware: dict, workload: dict, devices: int) -> float:
    result = simulate(hf, hardware, {"dp": devices}, {**workload, "zero": True, "shard_weights": True}, stack="xla")
    return sum(row["time_s"] for row in result.breakdown_rows() if row["name"] == "sharded_weight_gather")


@pytest.mark.parametrize("devices", [2, 4])
def test_a_rollout_on_the_fsdp_mesh_gathers_the_weights_every_token_and_replicas_win(devices):
    hf, hardware, task = _recipe(devices)
    fsdp, replicas = _layout(fsdp=devices), _layout(dp=devices)
    same = predict_step(hf, hardware, fsdp, devices, task)  # the rollout in the update's layout
    apart = predict_step(hf, hardware, fsdp, devices, task, replicas)
    rollout = {name: p["preflight_prefill_s"] + p["preflight_decode_s"] for name, p in (("fsdp", same), ("dp", apart))}
    assert rollout["fsdp"] > 1.5 * rollout["dp"]
    assert same["preflight_predicted_step_s"] > apart["preflight_predicted_step_s"]
    # per token, not once: the decode phase pays max_new_tokens gathers, the prefill one
    prompt, new, rows = task.max_prompt_tokens, task.max_new_tokens, task.rows_per_step
    step = _gather_s(hf, hardware, {"mode": "decode", "batch": rows, "context_len": prompt + new // 2}, devices)
    assert same["preflight_decode_s"] - apart["preflight_decode_s"] == pytest.approx(new * step)
    prefill = _gather_s(hf, hardware, {"mode": "prefill", "batch": task.prompts_per_step, "seq_len": prompt}, devices)
    assert same["preflight_prefill_s"] - apart["preflight_prefill_s"] == pytest.approx(prefill)
    assert same["preflight_train_s"] == pytest.approx(apart["preflight_train_s"])  # the update is the same


def test_a_rollout_with_fsdp_on_its_own_devices_gathers_too():
    hf, hardware, task = _recipe(4)
    update = _layout(fsdp=2)
    on_fsdp = predict_step(hf, hardware, update, 2, task, _layout(fsdp=2), rollout_devices=2)
    on_replicas = predict_step(hf, hardware, update, 2, task, _layout(dp=2), rollout_devices=2)
    assert on_fsdp["preflight_decode_s"] > 1.5 * on_replicas["preflight_decode_s"]
