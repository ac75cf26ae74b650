"""backend=mlx under faults (issue 11): a non-finite loss fails the run with the last good checkpoint kept;
SIGTERM/SIGINT checkpoint at the next step boundary and the rerun resumes there (real mlx-lm runs on a CPU)."""

from __future__ import annotations

import pytest

pytest.importorskip("mlx.core")
pytest.importorskip("mlx_lm")

from tests.conformance import check_non_finite_stops, check_signal_stops_and_resumes  # noqa: E402


@pytest.mark.parametrize("task", ["sft", "dpo"])
def test_a_non_finite_loss_fails_the_run_and_keeps_the_last_good_checkpoint(task, tmp_path, mlx_cache):
    # learning_rate 1e30 without warmup: step 1's loss (initial weights) is finite and saved, its update blows
    # the LoRA weights up, and step 2's loss and grad norm are NaN
    overrides = [f"recipe={task}_mlx_cpu", f"{task}.steps=4", f"{task}.checkpoint.every=1", f"{task}.eval.every=0",
                 f"{task}.optimizer.learning_rate=1e30", f"{task}.optimizer.warmup_steps=0", f"{task}.export_hf=false"]
    assert check_non_finite_stops(tmp_path, overrides, env={"CRUCIBLE_CACHE": str(mlx_cache)}) == 2


@pytest.mark.slow
@pytest.mark.parametrize("signal_name", ["SIGTERM", "SIGINT"])
def test_a_signal_checkpoints_at_the_step_boundary_and_the_run_resumes(signal_name, tmp_path, mlx_cache):
    overrides = ["recipe=sft_mlx_cpu", "sft.steps=1000", "sft.checkpoint.every=2000", "sft.eval.every=0",
                 "sft.export_hf=false"]
    check_signal_stops_and_resumes(tmp_path, overrides, "sft.steps", signal_name,
                                   env={"CRUCIBLE_CACHE": str(mlx_cache)})
