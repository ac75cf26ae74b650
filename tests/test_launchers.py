"""Multirun launchers: the presets take their resources from the hardware group, and a sweep of sim
jobs runs on the basic launcher and on submitit's local executor, one summary row per job, a failed
job marked failed while the others finish."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from hydra.utils import instantiate

from framework.core.records import read_summary
from tests.conftest import compose_config, run_cli

SIM_SWEEP = ["task=sim", "backend=sim", "model=qwen3_8b", "hardware=h100", "parallel.tp=1,2"]
RESOURCE_KEYS = ["gpus_per_node", "tasks_per_node", "cpus_per_task", "mem_gb"]


def launcher_params(overrides: list[str]) -> dict:
    """What the launcher hands to submitit: Hydra instantiates hydra.launcher the same way."""
    cfg = compose_config(overrides, return_hydra_config=True)
    return instantiate(cfg.hydra.launcher).params


def summary_rows(sweep_dir: Path) -> list[dict]:
    with (sweep_dir / "sweep_summary.csv").open(newline="", encoding="utf-8") as f:
        return list(csv.DictReader(f))


def sweep(launcher_overrides: list[str], job_overrides: list[str], sweep_dir: Path):
    return run_cli(["-m", *launcher_overrides, *job_overrides, f"hydra.sweep.dir={sweep_dir}"], timeout=300)


@pytest.mark.parametrize("hardware", ["h100", "cpu", "tpu_v5p"])
def test_slurm_preset_takes_resources_from_hardware(hardware):
    params = launcher_params(["hydra/launcher=slurm", f"hardware={hardware}"])
    spec = compose_config([f"hardware={hardware}"]).hardware
    assert {k: params[k] for k in RESOURCE_KEYS} == {k: spec.launcher[k] for k in RESOURCE_KEYS}
    assert params["nodes"] == spec.nodes
    assert params["partition"] is None and params["setup"] == [] and params["additional_parameters"] == {}


def test_slurm_preset_follows_hardware_overrides_and_its_own():
    params = launcher_params(["hydra/launcher=slurm", "hardware=h100", "hardware.nodes=4",
                              "hardware.launcher.gpus_per_node=4", "hydra.launcher.mem_gb=1",
                              "hydra.launcher.partition=gpu", "+hydra.launcher.additional_parameters.exclusive=true"])
    assert (params["nodes"], params["gpus_per_node"], params["mem_gb"]) == (4, 4, 1)
    assert params["partition"] == "gpu" and params["additional_parameters"] == {"exclusive": True}


def test_local_preset_runs_one_node_with_hardware_resources():
    params = launcher_params(["hydra/launcher=local", "hardware=h100", "hardware.nodes=2"])
    spec = compose_config(["hardware=h100"]).hardware
    assert params["nodes"] == 1  # submitit's local executor refuses more
    assert {k: params[k] for k in RESOURCE_KEYS} == {k: spec.launcher[k] for k in RESOURCE_KEYS}


# The local preset would start tasks_per_node (8 for h100) copies of each sim job; one is enough here.
LAUNCHERS = {
    "basic": [],
    "submitit_local": ["hydra/launcher=submitit_local"],
    "local": ["hydra/launcher=local", "hydra.launcher.tasks_per_node=1"],
}


@pytest.mark.parametrize("launcher", ["basic", "local"])  # submitit_local: in the failing sweep below
def test_sim_sweep_runs_on_launcher(launcher, tmp_path):
    proc = sweep(LAUNCHERS[launcher], SIM_SWEEP, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    for job in ("0", "1"):
        assert read_summary(tmp_path / job)["status"] == "ok"
    rows = summary_rows(tmp_path)
    assert [(r["job"], r["parallel.tp"], r["status"]) for r in rows] == [("0", "1", "ok"), ("1", "2", "ok")]
    assert all(float(r["latency_s"]) > 0 for r in rows)
    submitit_logs = list(tmp_path.glob(".submitit/*/*_log.out"))
    assert len(submitit_logs) == (0 if launcher == "basic" else 2)  # the jobs really went through submitit


# sim.mode=generate composes (sim.mode is a plain string) and is rejected inside the job.
FAILING_SWEEP = ["task=sim", "backend=sim", "model=qwen3_8b", "hardware=h100", "sim.mode=decode,generate,prefill"]


def test_failed_job_is_a_failed_row_and_the_sweep_exits_non_zero(tmp_path):
    proc = sweep(LAUNCHERS["submitit_local"], FAILING_SWEEP, tmp_path)
    rows = {r["sim.mode"]: r for r in summary_rows(tmp_path)}
    assert [rows[m]["status"] for m in ("decode", "generate", "prefill")] == ["ok", "failed", "ok"]
    assert "sim.mode" in rows["generate"]["error"]
    assert [read_summary(tmp_path / job)["status"] for job in ("0", "1", "2")] == ["ok", "failed", "ok"]
    assert len(list(tmp_path.glob(".submitit/*/*_log.out"))) == 3
    assert proc.returncode != 0
    assert "1 of 3 jobs failed" in proc.stderr
