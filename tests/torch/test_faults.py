"""backend=torch under faults (issue 11): a non-finite loss fails the run with the last good checkpoint kept;
SIGTERM/SIGINT checkpoint at the next step boundary and the rerun resumes there (real TRL runs on a CPU)."""

from __future__ import annotations

import pytest

from tests.conformance import (check_non_finite_stops, check_one_rank_signal_stops_every_rank,
                               check_signal_stops_and_resumes)

# learning_rate 1e30 without warmup: step 1 (loss from the initial weights) is finite and saved, its update
# blows the LoRA weights up, and step 2's loss and grad norm are NaN
NAN_AT_STEP_2 = {
    "sft": ["recipe=sft_torch_cpu"],
    "dpo": ["recipe=dpo_torch_cpu", "dpo.max_prompt_length=48", "dpo.max_completion_length=128"],
}


@pytest.mark.parametrize("task", ["sft", "dpo"])
def test_a_non_finite_loss_fails_the_run_and_keeps_the_last_good_checkpoint(task, tmp_path):
    overrides = [*NAN_AT_STEP_2[task], f"{task}.steps=4", f"{task}.checkpoint.every=1", f"{task}.eval.every=0",
                 f"{task}.optimizer.learning_rate=1e30", f"{task}.optimizer.warmup_steps=0", f"{task}.export_hf=false"]
    assert check_non_finite_stops(tmp_path, overrides) == 2


@pytest.mark.slow
@pytest.mark.parametrize("signal_name", ["SIGTERM", "SIGINT"])
def test_a_signal_checkpoints_at_the_step_boundary_and_the_run_resumes(signal_name, tmp_path):
    overrides = ["recipe=sft_torch_cpu", "sft.steps=500", "sft.checkpoint.every=1000", "sft.eval.every=0",
                 "sft.export_hf=false"]
    check_signal_stops_and_resumes(tmp_path, overrides, "sft.steps", signal_name)


@pytest.mark.slow
def test_a_signal_to_one_rank_stops_both_ranks_at_one_checkpoint(tmp_path):
    overrides = ["recipe=sft_torch_cpu", "sft.steps=500", "sft.checkpoint.every=1000", "sft.eval.every=0",
                 "sft.export_hf=false", "parallel.dp=-1", "parallel.fsdp=1"]
    check_one_rank_signal_stops_every_rank(tmp_path, overrides, "sft.steps", timeout_s=300)
