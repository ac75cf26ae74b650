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
    assert summary["versions"]["recording-lib"] == "1.0" and summary["versions"]["hydra-core"].startswith("1.3")
    report = json.loads((tmp_path / "patches.json").read_text())
    assert report["counts"] == {"applied": 3, "skipped": 0, "failed": 0}
    assert OmegaConf.load(tmp_path / "overrides.yaml") == ["backend=recording"]
    assert json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[0])["loss"] == 1.5
    env = json.loads((tmp_path / "env.json").read_text())
    assert {"host", "packages", "git", "python", "accelerators"} <= set(env)
    assert env["backend"] == {"name": "recording", "libraries": summary["versions"]}
    assert env["distributed"]["world_size"] == 1


def test_the_summary_says_what_each_phase_before_the_first_step_took(tmp_path, monkeypatch):
    import time

    setup = recording_backend.RecordingTrainer.setup
    monkeypatch.setattr(recording_backend.RecordingTrainer, "setup", lambda self: (time.sleep(0.3), setup(self)))
    from framework.core import env_info

    monkeypatch.setattr(env_info, "_LAUNCH_TAKEN", False)  # as in a fresh process
    for job in ("first", "second"):  # a sweep runs its jobs in one process
        assert Runtime(recording_cfg(), tmp_path / job, ["backend=recording"]).run().success
    first, second = (json.loads((tmp_path / job / "summary.json").read_text())["startup_s"] for job in ("first", "second"))
    assert set(first) == {"launch", "prepare", "setup", "init"}
    assert first["setup"] >= 0.3 > first["init"] >= 0 and first["prepare"] >= 0
    assert first["launch"] > 0  # this process started before the runtime (Linux /proc)
    assert second["launch"] is None and second["setup"] >= 0.3  # the earlier job's time is not the second's launch


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
    assert skipped == {"recording.before": "recording-lib 0.9 not in >=1.0"}
    before = next(p for p in report["patches"] if p["id"] == "recording.before")
    assert before["requires"]["recording-lib"] == {"installed": "0.9", "constraint": ">=1.0"}


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
    assert result.error == ("task=grpo does not run on backend=recording (it runs task=record|record_steps); "
                            "task=grpo runs on backend=maxtext")
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


def test_backend_name_must_match_the_adapter(tmp_path):
    cfg = recording_cfg()
    cfg.backend.name = "recorder"
    result = Runtime(cfg, tmp_path, []).run()
    assert result.error.startswith("backend.name: 'recorder' but its adapter RecordingAdapter is 'recording'")


def test_run_context_carries_the_distributed_environment(tmp_path, monkeypatch):
    seen = {}
    monkeypatch.setattr(recording_backend.RecordingTrainer, "setup",
                        lambda self: seen.update(rank=self.run.rank, local=self.run.local_rank, main=self.run.is_main,
                                                 fingerprint=self.run.fingerprint))
    monkeypatch.setenv("RANK", "3")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "4")
    Runtime(recording_cfg(), tmp_path, []).run()
    assert (seen["rank"], seen["local"], seen["main"]) == (3, 1, False)
    assert seen["fingerprint"]["seed"] == 0 and "logger" not in seen["fingerprint"]


def test_summary_block_shows_status_key_metrics_warnings_and_run_dir(tmp_path, monkeypatch, capsys):
    from framework.core.outcome import print_outcome
    from framework.core.result import TrainingResult

    def run_train(self):
        return TrainingResult(success=True, metrics={"loss": 1.5, "noise": 2}, warnings=["layout does not fit"])

    monkeypatch.setattr(recording_backend.RecordingTrainer, "run_train", run_train)
    cfg = recording_cfg()
    with open_dict(cfg):
        cfg.task.key_metrics = ["loss", "absent"]
    runtime = Runtime(cfg, tmp_path, [])
    result = runtime.run()
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["warnings"] == ["layout does not fit"] and summary["run_dir"] == str(tmp_path)
    print_outcome(runtime.summary(result))
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("ok: task=record backend=recording model=tiny_qwen2 hardware=cpu in ")
    assert lines[1:] == ["  loss  1.5", "  warning: layout does not fit", f"  run dir: {tmp_path}"]


def test_backend_name_is_derived_from_the_adapter_class():
    from framework.core.validation import backend_tasks

    for backend in backend_tasks():
        cfg = compose_config([f"backend={backend}"])
        assert cfg.backend.name == backend  # ${backend_name:...} reads the adapter's `name` without importing it


def test_require_modules_names_the_missing_packages_and_the_extra():
    from framework.core.adapter import require_modules
    from framework.core.errors import BackendError

    require_modules("sim", {"json": "json"}, "dev")  # installed: no error
    with pytest.raises(BackendError, match=r"backend=x needs no-such-pkg: pip install -e '\.\[extra\]'"):
        require_modules("x", {"json": "json", "no_such_pkg.sub": "no-such-pkg"}, "extra")


def test_a_backend_configs_background_work_is_closed_when_the_run_fails_before_its_trainer(tmp_path, monkeypatch):
    """convert_config may start work (maxtext: the model build); with no trainer to clean up, the runtime closes it."""
    class Closable(dict):
        def close(self):
            recording_backend.CALLS.append("config.close")

    def no_trainer(self, task_name):
        raise RuntimeError("boom before the trainer")

    monkeypatch.setattr(recording_backend.RecordingAdapter, "convert_config", lambda self, cfg: Closable(fail_in=""))
    monkeypatch.setattr(recording_backend.RecordingAdapter, "load_trainer_class", no_trainer)
    result = Runtime(recording_cfg(), tmp_path, []).run()
    assert not result.success and "boom before the trainer" in result.error
    assert recording_backend.CALLS[-1] == "config.close"
