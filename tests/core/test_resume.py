"""Resume rules: a run dir with checkpoints is resumed with the same setup or refused before any record is touched."""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf, open_dict

from framework.core.checkpoint import CheckpointPolicy, CheckpointStore
from framework.core.resume import run_fingerprint
from framework.core.runtime import Runtime
from tests.core.test_runtime import recording_cfg


def checkpointing_cfg(**changes):
    cfg = recording_cfg()
    with open_dict(cfg):
        cfg.task.resume_may_change = ["record.steps"]
        cfg.record = {"steps": 4, "learning_rate": 0.1, "checkpoint": {"every": 2, "keep": 2, "resume": True}}
    for key, value in changes.items():
        OmegaConf.update(cfg, key, value)
    return cfg


@pytest.fixture
def run_dir(tmp_path):
    """A finished run with one checkpoint at step 2 (saved with the fingerprint of checkpointing_cfg())."""
    assert Runtime(checkpointing_cfg(), tmp_path, ["first"]).run().success
    store = CheckpointStore(tmp_path, CheckpointPolicy(2, 2, True), run_fingerprint(checkpointing_cfg()))
    store.save(2, lambda folder: (folder / "w.bin").write_bytes(b"w"), {"position": 2})
    return tmp_path


def records(run_dir):
    return {name: (run_dir / name).read_text() for name in ("config.yaml", "summary.json", "overrides.yaml")}


def test_a_changed_setting_is_refused_before_any_record_is_touched(run_dir):
    before = records(run_dir)
    runtime = Runtime(checkpointing_cfg(**{"record.learning_rate": 0.2}), run_dir, ["record.learning_rate=0.2"])
    result = runtime.run()
    assert result.status == "refused" and type(runtime.exception).__name__ == "CheckpointError"
    assert "saved by a different setup: record.learning_rate (saved 0.1, now 0.2)" in result.error
    assert "only these may change: record.steps" in result.error and "\n" not in result.error
    assert records(run_dir) == before


def test_resume_off_with_checkpoints_is_refused_and_names_the_way_out(run_dir):
    before = records(run_dir)
    result = Runtime(checkpointing_cfg(**{"record.checkpoint.resume": False}), run_dir, []).run()
    assert "holds checkpoints (latest: step 2) and record.checkpoint.resume=false" in result.error
    assert "record.checkpoint.resume=true, or start in a new run dir" in result.error
    assert records(run_dir) == before


def test_steps_below_the_checkpoint_are_refused(run_dir):
    result = Runtime(checkpointing_cfg(**{"record.steps": 1}), run_dir, []).run()
    assert result.error.startswith("record.steps: 1 is below the checkpoint's step 2")


def test_allowed_changes_resume_and_each_segment_is_recorded(run_dir):
    result = Runtime(checkpointing_cfg(**{"record.steps": 8, "progress": False}), run_dir,
                     ["record.steps=8", "progress=false"]).run()
    assert result.success, result.error
    segments = [json.loads(line) for line in (run_dir / "segments.jsonl").read_text().splitlines()]
    assert [(s["segment"], s["overrides"], s["resumed_from_step"]) for s in segments] == [
        (0, ["first"], None), (1, ["record.steps=8", "progress=false"], 2)]
    assert OmegaConf.load(run_dir / "config.yaml").record.steps == 8


def test_fingerprint_leaves_out_global_and_task_keys_that_may_change():
    fingerprint = run_fingerprint(checkpointing_cfg())
    assert "steps" not in fingerprint["record"] and fingerprint["record"]["learning_rate"] == 0.1
    assert not {"logger", "progress", "debug", "patches"} & set(fingerprint)
    assert "resume_may_change" not in fingerprint["task"]


def test_a_backend_declares_its_own_keys_that_may_change():
    from tests.conftest import compose_config

    a, b = (run_fingerprint(compose_config(["recipe=grpo_arithmetic_cpu", f"backend.adapter.cache_dir={d}"]))
            for d in ("/tmp/a", "/tmp/b"))
    assert a == b and "cache_dir" not in a["backend"]["adapter"]
