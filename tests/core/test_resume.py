"""Resume rules: a run dir with checkpoints is resumed with the same setup or refused before any record is touched."""

from __future__ import annotations

import json

import pytest
from omegaconf import OmegaConf, open_dict

from framework.core.checkpoint import CheckpointPolicy, CheckpointStore
from framework.core.resume import run_fingerprint, set_by
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



def test_every_manifest_unreadable_is_refused_before_any_record_is_touched(run_dir):
    """Was a fresh start in the run dir: a second step 1.. appended to its metrics."""
    (run_dir / "checkpoints" / "step_2" / "manifest.json").write_text("{cut off")
    before = records(run_dir)
    result = Runtime(checkpointing_cfg(), run_dir, []).run()
    assert result.status == "refused" and "every checkpoint is damaged (steps 2;" in result.error
    assert records(run_dir) == before


def test_every_checksum_failing_is_refused_before_segments_jsonl_is_touched(run_dir):
    """Was a segments.jsonl row appended before the trainer's store refused (exit 2 all the same)."""
    (run_dir / "checkpoints" / "step_2" / "w.bin").write_bytes(b"flipped")
    before = {**records(run_dir), "segments.jsonl": (run_dir / "segments.jsonl").read_text()}
    result = Runtime(checkpointing_cfg(), run_dir, []).run()
    assert result.status == "refused" and "every checkpoint is damaged (steps 2;" in result.error
    assert {**records(run_dir), "segments.jsonl": (run_dir / "segments.jsonl").read_text()} == before


def test_a_file_where_the_checkpoints_go_is_refused_before_any_record_is_touched(run_dir):
    """Was exit 1 with FileExistsError at the first checkpoint save, after training up to it."""
    import shutil

    shutil.rmtree(run_dir / "checkpoints")
    (run_dir / "checkpoints").write_text("not a folder")
    before = records(run_dir)
    result = Runtime(checkpointing_cfg(), run_dir, []).run()
    assert result.status == "refused" and result.error.endswith("checkpoints: not a folder (the run's checkpoints "
                                                                "go there); move it away, or start in a new run "
                                                                "dir (hydra.run.dir=...)")
    assert records(run_dir) == before

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


# ---- keys a release added or removed since the checkpoint ---------------------------------------------------

def stepping_cfg(**knobs):
    """The recording backend's stepping trainer: a checkpoint each step, and the trainer's store checks the
    fingerprint again on resume; `knobs` are keys of its task block (what a release adds or removes)."""
    cfg = recording_cfg()
    with open_dict(cfg):
        cfg.task = {"name": "record_steps"}
        cfg.record_steps = {"checkpoint": {"every": 1, "keep": 10, "resume": True}, **knobs}
    return cfg


@pytest.fixture
def stepped(tmp_path):
    """A finished 5-step run whose config had `record_steps.old_knob` and no `new_knob`, `backend.new_knob`."""
    assert Runtime(stepping_cfg(old_knob=3), tmp_path, ["first"]).run().success
    return tmp_path


def last_segment(run_dir):
    return json.loads((run_dir / "segments.jsonl").read_text().splitlines()[-1])


def resume_warnings(caplog):
    return [r.getMessage() for r in caplog.records if r.levelname == "WARNING" and r.getMessage().startswith("resume:")]


def test_a_key_a_release_added_resumes_with_its_default_and_one_warning(stepped, caplog):
    cfg = stepping_cfg(old_knob=3, new_knob="auto")
    with open_dict(cfg):
        cfg.backend.new_knob = {"size": 2}
    result = Runtime(cfg, stepped, ["backend=recording"]).run()  # a group's option: the files give backend.*
    assert result.success, result.error
    lines = ["resume: backend.new_knob is not in the checkpoint's settings; resuming with the config files' {'size': 2}",
             "resume: record_steps.new_knob is not in the checkpoint's settings; resuming with the config files' 'auto'"]
    assert resume_warnings(caplog) == lines
    assert json.loads((stepped / "summary.json").read_text())["warnings"] == lines
    segment = last_segment(stepped)
    assert segment["resumed_from_step"] == 5 and segment["removed_keys"] == {}
    assert segment["new_keys"] == {"backend.new_knob": {"size": 2}, "record_steps.new_knob": "auto"}


def test_segments_jsonl_names_the_step_resumed_after_a_fallback_past_a_damaged_newest(stepped):
    """Was the damaged newest step (5): the runtime read its manifest without checking the files' checksums."""
    (stepped / "checkpoints" / "step_5" / "w.txt").write_text("flipped")
    result = Runtime(stepping_cfg(old_knob=3), stepped, []).run()
    assert result.success and result.metrics["resumed_from_step"] == 4
    assert last_segment(stepped)["resumed_from_step"] == 4


@pytest.mark.parametrize("override", ["record_steps.new_knob=auto", "+record_steps.new_knob=auto",
                                      "record_steps={new_knob: auto}"])
def test_a_new_key_set_on_the_command_line_is_refused_naming_the_way_to_allow_it(stepped, override):
    before = records(stepped)
    runtime = Runtime(stepping_cfg(old_knob=3, new_knob="auto"), stepped, [override])
    result = runtime.run()
    assert result.status == "refused" and "\n" not in result.error
    assert "saved by a different setup: record_steps.new_knob (not in the checkpoint, now 'auto')" in result.error
    assert f"set by the override {override!r}: drop it" in result.error
    assert "allow it with '+task.resume_may_change=[record_steps.new_knob]'" in result.error  # the task has no list
    assert records(stepped) == before

    allowed = stepping_cfg(old_knob=3, new_knob="auto")
    with open_dict(allowed):
        allowed.task.resume_may_change = ["record_steps.new_knob"]  # the way the line names
    assert Runtime(allowed, stepped, [override, "task.resume_may_change=[record_steps.new_knob]"]).run().success


def test_which_override_sets_a_key():
    assert set_by("model.hf_config.extra.x", ["+hardware@model.hf_config.extra=cpu"])  # a group placed at a package
    assert set_by("a.b", ["+hardware@_global_=cpu"])  # at the root: it may set any key
    assert set_by("backend.adapter.x", ["backend={adapter: {x: 1}}"]) and set_by("backend.adapter", ["~backend"])
    assert set_by("backend.adapter.x", ["backend=maxtext", "+hardware@model=cpu", "backend.adapter.y=1"]) is None


@pytest.mark.parametrize("plus", ["", "+", "++"])
def test_a_group_at_a_package_sets_its_keys_with_or_without_plus(plus):
    """One rule for `group@pkg=option` whether '+' adds the group or not: the package (Hydra's: `_global_` and the
    empty package and `_here_` are the root, `_global_.a` is `a`) holds what the command line set; at its own place a group's
    option is files."""
    for package in ("model", "_global_.model"):
        override = f"{plus}hardware@{package}=cpu"
        assert set_by("model.hf_config.x", [override]) == override and set_by("model", [override]) == override
        assert set_by("backend.adapter.x", [override]) is None and set_by("hardware.name", [override]) is None
    for package in ("_global_", "", "_here_"):  # _here_: the primary config's package, the root on the command line
        override = f"{plus}hardware@{package}=cpu"
        assert set_by("backend.adapter.x", [override]) == override and set_by("a", [override]) == override
    assert set_by("hardware.name", [f"{plus}hardware=cpu"]) is None


def test_a_key_a_release_removed_resumes_with_one_warning(stepped, caplog):
    result = Runtime(stepping_cfg(), stepped, []).run()
    assert result.success, result.error
    assert resume_warnings(caplog) == [
        "resume: record_steps.old_knob (saved 3) is no longer in the config; resuming without it"]
    assert last_segment(stepped)["removed_keys"] == {"record_steps.old_knob": 3}


def test_a_key_removed_on_the_command_line_is_refused(stepped):
    result = Runtime(stepping_cfg(), stepped, ["~record_steps.old_knob"]).run()
    assert result.status == "refused"
    assert "record_steps.old_knob (saved 3, not in this config)" in result.error
    assert "set by the override '~record_steps.old_knob'" in result.error


def test_a_key_allowed_to_change_now_is_not_compared_with_the_checkpoint(stepped, caplog):
    cfg = stepping_cfg(old_knob=4)
    with open_dict(cfg):
        cfg.task.resume_may_change = ["record_steps.old_knob"]
    result = Runtime(cfg, stepped, ["record_steps.old_knob=4", "task.resume_may_change=[record_steps.old_knob]"]).run()
    assert result.success, result.error
    assert resume_warnings(caplog) == [] and last_segment(stepped)["removed_keys"] == {}


def test_a_changed_value_is_refused_although_a_key_is_new(stepped):
    result = Runtime(stepping_cfg(old_knob=4, new_knob="auto"), stepped, []).run()
    assert result.status == "refused"
    assert "saved by a different setup: record_steps.old_knob (saved 3, now 4)" in result.error
    assert "use the checkpoint's value or a new run dir" in result.error


def test_through_the_cli_a_key_missing_from_an_older_checkpoint_resumes_unless_set_on_the_command_line(tmp_path):
    """run.py as a user runs it: Hydra's recorded command line tells a key the user set from the files' value."""
    from tests.conftest import run_cli
    from tests.core.test_faults import RECORDING

    command = [*RECORDING, "task.name=record_steps", "+record_steps.checkpoint={every: 1, keep: 10, resume: true}",
               "task.objective.metric=steps_completed", f"hydra.run.dir={tmp_path}", "progress=false"]
    first = run_cli(command)
    assert first.returncode == 0, first.stderr[-3000:]
    manifest = tmp_path / "checkpoints" / "step_5" / "manifest.json"
    older = json.loads(manifest.read_text())
    del older["fingerprint"]["sim"]["stack"]  # as a checkpoint written before conf/task/sim.yaml had it
    manifest.write_text(json.dumps(older))

    refused = run_cli([*command, "sim.stack=transformers"])
    assert refused.returncode == 2 and "sim.stack (not in the checkpoint, now 'transformers')" in refused.stderr
    assert "set by the override 'sim.stack=transformers'" in refused.stderr
    resumed = run_cli(command)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert "resume: sim.stack is not in the checkpoint's settings; resuming with the config files' 'transformers'" in resumed.stderr
    assert last_segment(tmp_path)["new_keys"] == {"sim.stack": "transformers"}


def test_a_run_dir_of_another_backend_task_or_model_is_refused_before_any_record_is_touched(tmp_path):
    """With no checkpoint nothing compared the config: a GRPO run into a sim run's dir appended its rows to the sim's
    metrics.jsonl and wrote its summary over the sim's (exit 0). The same kind of run again still appends a segment;
    a sweep's job dirs are not checked (a second sweep into a sweep dir reuses them)."""
    from tests.conftest import run_cli

    sim = ["backend=sim", "task=sim", "model=qwen3_8b", "hardware=h100", f"hydra.run.dir={tmp_path}"]
    assert run_cli(sim).returncode == 0
    before = records(tmp_path)
    proc = run_cli([*sim, "model=qwen3_30b_a3b"])
    assert proc.returncode == 2
    assert proc.stderr.splitlines() == [
        f"error: hydra.run.dir: {tmp_path} holds the records of a backend=sim task=sim model=qwen3_8b run and this one "
        "is backend=sim task=sim model=qwen3_30b_a3b: they would mix; start in a new run dir (leave hydra.run.dir out "
        "or give another)"]
    assert records(tmp_path) == before and len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 1
    assert run_cli([*sim, "sim.batch=2"]).returncode == 0  # the same kind: another segment
    assert len((tmp_path / "segments.jsonl").read_text().splitlines()) == 2
