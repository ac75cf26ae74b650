"""The runtime owns the lifecycle: order, patches, cleanup on error, and the run directory contract."""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf, open_dict

from framework.core.runtime import Runtime
from tests.conftest import compose_config
from tests.core import recording_backend


def recording_cfg(**adapter_args):
    cfg = compose_config(["model=tiny_qwen2", "hardware=cpu"])
    with open_dict(cfg):
        cfg.backend = {"name": "recording", "adapter": {"_target_": "tests.core.recording_backend.RecordingAdapter", **adapter_args}}
        cfg.task = {"name": "record"}
        del cfg["sim"]
    return cfg


@pytest.fixture(autouse=True)
def clear_calls():
    recording_backend.CALLS.clear()


def test_lifecycle_order_and_records(tmp_path):
    runtime = Runtime(recording_cfg(), tmp_path, ["backend=recording"])
    result = runtime.run()
    assert result.success, result.error
    assert recording_backend.CALLS == [
        "prepare_backend", "convert_config", "patch:setup", "setup", "init",
        "patch:before_train", "run_train", "patch:after_train", "cleanup",
    ]
    for name in ("config.yaml", "overrides.yaml", "patches.json", "env.json", "metrics.jsonl", "summary.json"):
        assert (tmp_path / name).is_file(), name
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["metrics"] == {"loss": 1.5}
    assert summary["result"]["samples"] == 4 and summary["backend_version"] == "1.0"
    report = json.loads((tmp_path / "patches.json").read_text())
    assert report["counts"] == {"applied": 3, "skipped": 0, "failed": 0}
    assert OmegaConf.load(tmp_path / "overrides.yaml") == ["backend=recording"]
    assert json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])["loss"] == 1.5
    env = json.loads((tmp_path / "env.json").read_text())
    assert {"host", "packages", "git", "python", "accelerators"} <= set(env)


@pytest.mark.parametrize("stage", ["setup", "init", "run_train"])
def test_cleanup_runs_when_a_step_raises(tmp_path, stage):
    result = Runtime(recording_cfg(fail_in=stage), tmp_path, []).run()
    assert not result.success and f"boom in {stage}" in result.error
    assert recording_backend.CALLS[-1] == "cleanup"
    assert "patch:after_train" not in recording_backend.CALLS
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["status"] == "failed" and "boom" in summary["result"]["error"]
    assert "RuntimeError" in (tmp_path / "traceback.txt").read_text()
    recording_backend.CALLS.clear()
    assert Runtime(recording_cfg(), tmp_path, []).run().success  # e.g. a resume in the same run dir
    assert not (tmp_path / "traceback.txt").exists()


def test_version_filter_skips_with_reason(tmp_path):
    Runtime(recording_cfg(version="0.9"), tmp_path, []).run()
    assert "patch:before_train" not in recording_backend.CALLS
    report = json.loads((tmp_path / "patches.json").read_text())
    skipped = {p["id"]: p["reason"] for p in report["patches"] if p["status"] == "skipped"}
    assert skipped == {"recording.before": "backend version 0.9 not in >=1.0"}


def test_disable_patch_from_config(tmp_path):
    cfg = recording_cfg()
    cfg.patches.disable = ["recording.setup"]
    Runtime(cfg, tmp_path, []).run()
    assert "patch:setup" not in recording_backend.CALLS
    report = json.loads((tmp_path / "patches.json").read_text())
    assert {"id": "recording.setup", "status": "skipped"}.items() <= report["patches"][0].items()


def test_incompatible_task_names_the_valid_ones(tmp_path):
    cfg = recording_cfg()
    cfg.task.name = "grpo"
    result = Runtime(cfg, tmp_path, []).run()
    assert result.error == "task=grpo does not run on backend=recording; backend=recording runs task=record"
    assert recording_backend.CALLS == []  # nothing started


def test_only_rank_zero_writes_records(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_PROCID", "1")
    monkeypatch.setenv("SLURM_NTASKS", "2")
    result = Runtime(recording_cfg(), tmp_path, []).run()
    assert result.success and "run_train" in recording_backend.CALLS  # every rank trains
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # but writes nothing


def test_logger_rewind_drops_rows_after_the_restored_step(tmp_path):
    from framework.core.loggers import MetricLogger, read_metrics

    logger = MetricLogger(tmp_path)
    for step in (1, 2, 3, 4):
        logger.log({"loss": float(step)}, step=step)
    logger.rewind(2)
    logger.log({"loss": 30.0}, step=3)
    logger.close()
    assert [(r["step"], r["loss"]) for r in read_metrics(tmp_path / "metrics.jsonl")] == [(1, 1.0), (2, 2.0), (3, 30.0)]
