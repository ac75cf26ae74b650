"""The GRPO preflight simulates an fsdp update as it runs: weights gathered and gradients reduce-scattered every
micro-batch (workload.shard_weights, sims/scan_update.py), not once per step as a ZeRO-1 optimizer."""

from __future__ import annotations

from framework.backends.maxtext.trainers.preflight import train_workload
from framework.core.build import build
from framework.tasks.grpo import GRPOTask
from tests.conftest import compose_config


def test_fsdp_shards_the_weights_and_plain_data_parallel_does_not():
    cfg = compose_config(["recipe=grpo_gsm8k", "data=gsm8k_sample", "grpo.micro_batch_size=16"])
    task = build(GRPOTask, cfg.grpo, "grpo")
    assert train_workload(task, 16, True, "none")["shard_weights"] is True
    assert train_workload(task, 16, False, "none")["shard_weights"] is False
