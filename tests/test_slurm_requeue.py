"""SLURM preemption on the real local SLURM: submitit's preempt signal (SIGUSR2, as sent `signal_delay_s`
before a time limit) makes a GRPO job checkpoint at its step boundary and requeue itself; the requeued job
resumes in the same job dir and ends bit-identical to its twin job of the same sweep that was not
signalled (same final checkpoint file for file, same deterministic metrics rows) (issue 11). Needs a controller: `eval "$(bash .ci/slurm_up.sh)"`."""

from __future__ import annotations

import pytest

from tests.conformance import check_preempted_job_resumes_like_its_twin
from tests.test_slurm import SLURM_LAUNCHER, slurm_controller  # noqa: F401 - the fixture

pytest.importorskip("jax")
pytestmark = [pytest.mark.slurm, pytest.mark.slow]

STEPS = 400  # long enough to be signalled mid-run


def test_preempted_grpo_job_checkpoints_requeues_and_resumes(slurm_controller, tmp_path):  # noqa: F811
    launcher = [a.replace("mem_gb=1", "mem_gb=6").replace("timeout_min=5", "timeout_min=20") for a in SLURM_LAUNCHER]
    args = [*launcher, "recipe=grpo_arithmetic_cpu", f"grpo.steps={STEPS}", "grpo.checkpoint.every=100000",
            "grpo.export_hf=false", "progress=false",
            "grpo.checkpoint.keep=2,3"]  # two jobs that compute the same (keep may change on resume, too)
    check_preempted_job_resumes_like_its_twin(tmp_path, args, STEPS)
