"""backend=megatron under faults (issue 11): a non-finite loss fails the run with the last good checkpoint kept;
SIGTERM/SIGINT checkpoint (dist_checkpointing) at the next step boundary and the rerun resumes there."""

from __future__ import annotations

import pytest

from tests.conformance import (check_non_finite_stops, check_one_rank_signal_stops_every_rank,
                               check_signal_stops_and_resumes)

RECIPE = ["recipe=pretrain_megatron_cpu", "pretrain.eval.every=0", "pretrain.export_hf=false",
          "backend.adapter.preflight=false"]


def _env(cache_dir) -> dict:
    return {"CRUCIBLE_CACHE": str(cache_dir), "OMP_NUM_THREADS": "1"}


def test_a_non_finite_loss_fails_the_run_and_keeps_the_last_good_checkpoint(tmp_path, cache_dir):
    # learning_rate 1e30 without warmup: step 1's loss (initial weights) is finite and saved, its update blows
    # every weight up, and step 2's loss and grad norm are NaN
    overrides = [*RECIPE, "pretrain.steps=4", "pretrain.checkpoint.every=1", "pretrain.optimizer.learning_rate=1e30",
                 "pretrain.optimizer.warmup_steps=0"]
    assert check_non_finite_stops(tmp_path, overrides, env=_env(cache_dir)) == 2


@pytest.mark.slow
@pytest.mark.parametrize("signal_name", ["SIGTERM", "SIGINT"])
def test_a_signal_checkpoints_at_the_step_boundary_and_the_run_resumes(signal_name, tmp_path, cache_dir):
    overrides = [*RECIPE, "pretrain.steps=2000", "pretrain.checkpoint.every=5000"]
    check_signal_stops_and_resumes(tmp_path, overrides, "pretrain.steps", signal_name, env=_env(cache_dir))


@pytest.mark.slow
def test_a_signal_to_one_rank_stops_both_ranks_at_one_checkpoint(tmp_path, cache_dir):
    overrides = [*RECIPE, "pretrain.steps=2000", "pretrain.checkpoint.every=5000"]  # dp=2
    check_one_rank_signal_stops_every_rank(tmp_path, overrides, "pretrain.steps", env=_env(cache_dir), timeout_s=300)
