"""A real SLURM submission: a small sim sweep through hydra/launcher=slurm comes back with its results.

Needs a running controller (in CI, .ci/run starts one with .ci/slurm_up.sh; locally:
`eval "$(.ci/slurm_up.sh)"`). Skipped only when `sinfo` is missing or no controller answers.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest

from framework.core.records import read_summary
from tests.test_launchers import summary_rows, sweep

pytestmark = pytest.mark.slurm


START_HINT = 'start a local one with: eval "$(bash .ci/slurm_up.sh)"'


def _controller_problem() -> str | None:
    if shutil.which("sinfo") is None:
        return f"sinfo is not on PATH; {START_HINT}"
    proc = subprocess.run(["sinfo", "-h"], capture_output=True, text=True, timeout=60)
    if proc.returncode != 0:
        first_line = (proc.stderr.strip().splitlines() or [""])[0]
        return f"no SLURM controller answers sinfo ({first_line}); {START_HINT}"
    return None


@pytest.fixture(scope="module")
def slurm_controller():
    problem = _controller_problem()
    if problem:
        pytest.skip(problem)


# hardware=cpu: the preset then asks for 0 GPUs and 1 task per node, which the local node has.
SLURM_LAUNCHER = ["hydra/launcher=slurm", "hydra.launcher.partition=debug", "hydra.launcher.timeout_min=5",
                  "hydra.launcher.cpus_per_task=1", "hydra.launcher.mem_gb=1"]
SWEEP = ["task=sim", "backend=sim", "model=qwen3_8b", "hardware=cpu", "sim.batch=1,2,4"]


def test_sim_sweep_through_slurm(slurm_controller, tmp_path):
    proc = sweep(SLURM_LAUNCHER, SWEEP, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for job in ("0", "1", "2"):
        assert read_summary(tmp_path / job)["status"] == "ok"
    rows = summary_rows(tmp_path)
    assert [(r["job"], r["sim.batch"], r["status"]) for r in rows] == [("0", "1", "ok"), ("1", "2", "ok"), ("2", "4", "ok")]
    # one sbatch array: its script holds the preset's resources (from hardware=cpu and the overrides)
    scripts = list(tmp_path.glob(".submitit/*/*_submission.sh"))
    assert len(scripts) == 1
    script = scripts[0].read_text()
    for line in ["--array=0-2", "--partition=debug", "--cpus-per-task=1", "--mem=1GB", "--gpus-per-node=0",
                 "--ntasks-per-node=1", "--nodes=1", "--time=5"]:
        assert f"#SBATCH {line}" in script
    # each array task ran under SLURM: submitit's per-task logs carry the SLURM job id
    assert len(list(tmp_path.glob(".submitit/*_*/*_0_log.out"))) == 3
