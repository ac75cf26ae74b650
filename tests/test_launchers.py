"""Multirun launchers: the presets take their resources from the hardware group, and a sweep of sim
jobs runs on the basic launcher and on submitit's local executor, one summary row per job, a failed
job marked failed while the others finish."""

from __future__ import annotations

import csv
import os
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


@pytest.mark.parametrize("launcher", ["local", "slurm", "submitit_local", "submitit_slurm", "basic"])
def test_every_launcher_preset_passes_the_sweep_start_check(launcher, monkeypatch):
    """framework/core/launcher.py refuses what submitit would fail on; no preset's own values (nulls of Hydra's
    submitit_local included) are refused, with SLURM present."""
    from framework.core import launcher as checks

    monkeypatch.setattr(checks.shutil, "which", lambda name: "/usr/bin/srun")
    monkeypatch.setattr(checks, "slurm_partitions", lambda: ["cpu", "gpu*"])
    cfg = compose_config(["hardware=h100", f"hydra/launcher={launcher}"], return_hydra_config=True)
    checks.check_launcher({key: cfg.hydra.launcher.get(key) for key in cfg.hydra.launcher})


def test_a_slurm_launcher_without_slurm_is_one_line_before_any_job(monkeypatch, tmp_path):
    """submitit said `RuntimeError: Could not detect "srun", are you indeed on a slurm cluster?` (exit 1)."""
    from framework.core import launcher as checks
    from framework.core.errors import ConfigError

    cfg = compose_config(["hardware=h100", "hydra/launcher=slurm"], return_hydra_config=True)
    params = {key: cfg.hydra.launcher.get(key) for key in cfg.hydra.launcher}
    monkeypatch.setattr(checks.shutil, "which", lambda name: None)
    with pytest.raises(ConfigError, match=r"^hydra/launcher: a SLURM launcher, and no SLURM on this machine \(srun is "
                                          r"not on PATH\); submit the sweep from a SLURM login node, or run its jobs "
                                          r"here with hydra/launcher=local$"):
        checks.check_launcher(params)
    monkeypatch.undo()
    if checks.shutil.which("srun") is None:  # the real command line, where this machine has no SLURM
        proc = sweep(["hydra/launcher=slurm"], SIM_SWEEP, tmp_path / "sweep")
        assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1
        assert proc.stderr.startswith("error: hydra/launcher: a SLURM launcher, and no SLURM on this machine")
        assert not (tmp_path / "sweep" / ".submitit").exists()


def fake_slurm(tmp_path: Path, sinfo: str) -> dict:
    """PATH with an srun and a sinfo whose body is `sinfo` (a shell script): SLURM's client as a machine has it."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in {"srun": "exit 0", "sinfo": sinfo}.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}"}


def test_a_slurm_client_that_reaches_no_controller_is_one_line_before_any_job(tmp_path):
    """srun on PATH and no reachable controller (this machine, 2026-11-29): sbatch's 4 lines, then
    `error: FailedJobError: ...` repeating them, exit 1, after the sweep dir was made."""
    env = fake_slurm(tmp_path, "echo 'sinfo: fatal: Could not establish a configuration source' >&2; exit 1")
    proc = run_cli(["-m", "hydra/launcher=slurm", *SIM_SWEEP, f"hydra.sweep.dir={tmp_path / 'sweep'}"], env=env)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.splitlines() == [
        "error: hydra/launcher: a SLURM launcher, and this machine's SLURM reaches no controller (sinfo: sinfo: fatal: "
        "Could not establish a configuration source); submit the sweep from a SLURM login node, or run its jobs here "
        "with hydra/launcher=local"]
    assert not (tmp_path / "sweep" / ".submitit").exists()


def test_a_partition_the_cluster_lacks_or_none_without_a_default_is_refused(monkeypatch, tmp_path):
    """sbatch's `invalid partition specified` / `No partition specified or system default partition`, after the sweep
    started (a FailedJobError of several lines, exit 1)."""
    from framework.core import launcher as checks
    from framework.core.errors import ConfigError

    monkeypatch.setenv("PATH", fake_slurm(tmp_path, "printf 'cpu\\ngpu*\\ngpu*\\n'")["PATH"])
    assert checks.slurm_partitions() == ["cpu", "gpu*"]
    for ok in (None, "gpu", "cpu,gpu"):
        checks.check_partition(ok, ["cpu", "gpu*"])
    with pytest.raises(ConfigError, match=r"^hydra.launcher.partition: 'gpu,nope': nope is no partition of this "
                                          r"cluster; valid: one of \['cpu', 'gpu'\] \(or a comma-separated list"):
        checks.check_partition("gpu,nope", ["cpu", "gpu*"])
    with pytest.raises(ConfigError, match=r"^hydra.launcher.partition: null, and this cluster has no default "
                                          r"partition; valid: one of \['cpu', 'gpu'\]$"):
        checks.check_partition(None, ["cpu", "gpu"])


def test_the_search_recipes_sweeper_passes_and_a_count_below_one_is_refused():
    from framework.core.errors import ConfigError
    from framework.core.launcher import check_sweeper

    cfg = compose_config(["recipe=sim_search"], return_hydra_config=True)
    sweeper = {key: cfg.hydra.sweeper.get(key) for key in cfg.hydra.sweeper}
    check_sweeper(sweeper)
    for key in ("n_trials", "n_jobs"):
        with pytest.raises(ConfigError, match=rf"^hydra.sweeper.{key}: 0 is out of range; valid: >= 1$"):
            check_sweeper({**sweeper, key: 0})


def test_a_partition_from_sbatch_partition_or_additional_parameters_is_the_one_checked(monkeypatch, tmp_path):
    """sbatch takes SBATCH_PARTITION (or --partition from additional_parameters) where the launcher sets none: a
    cluster with no default partition runs such jobs, and a wrong one there is named; another cluster (`clusters`)
    has partitions this sinfo does not list."""
    from framework.core import launcher as checks
    from framework.core.errors import ConfigError

    monkeypatch.setattr(checks.shutil, "which", lambda name: f"/usr/bin/{name}")
    monkeypatch.setattr(checks, "slurm_partitions", lambda: ["cpu", "gpu"])
    slurm = {"_target_": "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher", "partition": None}
    monkeypatch.setenv("SBATCH_PARTITION", "gpu")
    checks.check_launcher({**slurm, "additional_parameters": {}})
    monkeypatch.setenv("SBATCH_PARTITION", "nope")
    with pytest.raises(ConfigError, match=r"^SBATCH_PARTITION \(environment\): 'nope': nope is no partition"):
        checks.check_launcher({**slurm, "additional_parameters": {}})
    monkeypatch.delenv("SBATCH_PARTITION")
    checks.check_launcher({**slurm, "additional_parameters": {"partition": "cpu"}})
    with pytest.raises(ConfigError, match=r"^hydra.launcher.additional_parameters.partition: 'nope': nope is no"):
        checks.check_launcher({**slurm, "additional_parameters": {"partition": "nope"}})
    checks.check_launcher({**slurm, "partition": "elsewhere", "additional_parameters": {"clusters": "other"}})
    with pytest.raises(ConfigError, match=r"^hydra.launcher.partition: null, and this cluster has no default"):
        checks.check_launcher({**slurm, "additional_parameters": {}})
