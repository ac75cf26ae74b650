"""benchmarks/first_step.py through recipe_runs' `--cache`/`--cold`: the time to the first finished step of a cold
and a warm run (issue 15), as the GPU call measures it."""

from __future__ import annotations

import json

import pytest

from framework.backends.maxtext.benchmarks import recipe_runs
from framework.backends.maxtext.benchmarks.first_step import empty_cache, figures
from tests.conftest import REPO_ROOT


def _run_dir(root, startup_s, steps):
    root.mkdir()
    summary = {"success": True, "startup_s": startup_s,
               "result": {"metrics": {"aot_compile_s": 3.5, "model_ready_s": 0.0, "reward_mean": 0.1}}}
    (root / "summary.json").write_text(json.dumps(summary))
    rows = [{"step": 0, "eval_accuracy": 0.5}] + [{"step": i + 1, "step_time_s": step, "update_time_s": step / 2,
                                                  "compile_time_s": 0.0} for i, step in enumerate(steps)]
    (root / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))


def test_the_first_step_ends_after_the_startup_phases_and_step_1(tmp_path):
    _run_dir(tmp_path / "run", {"launch": 1.0, "prepare": 2.0, "setup": None, "init": 30.0}, [1.5, 0.9, 0.8])
    found = figures(tmp_path / "run", 40.123, cold=True, entries=(0, 7))
    assert found["first_step_ends_s"] == 34.5  # a phase not measured (None) counts as nothing, and is named
    assert found["startup_unmeasured"] == ["setup"]
    assert found["step_1_s"] == 1.5 and found["steps_2_on_s"] == [0.9, 0.8] and found["update_s"] == [0.75, 0.45, 0.4]
    assert found["timeline"] == {"aot_compile_s": 3.5, "model_ready_s": 0.0}  # not the training metrics
    assert found["wall_s"] == 40.12 and found["compile_cache_entries"] == {"before": 0, "after": 7}
    assert "error" in figures(tmp_path / "missing", 1.0, cold=False, entries=(0, 0))


def test_bad_cache_and_out_arguments_are_one_line_usage_errors(tmp_path, capsys):
    (tmp_path / "file").write_text("x")
    (tmp_path / "out" / "a").mkdir(parents=True)  # a run dir of an earlier call: its metrics would be appended to
    for argv, message in ((["--cold", "a"], "--cold needs --cache"),
                          (["--cache", str(tmp_path), "--cold", "b"], "--cold b: no such --run; runs: a"),
                          (["--cache", str(tmp_path / "file")], "is a file"),
                          (["--cache", str(tmp_path / "c")], "holds run 'a' of an earlier call"),
                          (["--run", "a", "x"], "--run a: named twice")):
        with pytest.raises(SystemExit) as exit_:
            recipe_runs.main(["--out", str(tmp_path / "out"), "--run", "a", "", *argv])
        assert exit_.value.code == 2 and message in capsys.readouterr().err


def test_a_cold_start_removes_only_the_run_caches(tmp_path):
    for name in ("jax", "models", "hub", "notes"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "entry").write_text("x")
    empty_cache(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["hub", "notes"]
    assert (tmp_path / "notes" / "entry").exists()


@pytest.mark.slow
def test_a_cold_run_starts_from_an_empty_cache_and_a_warm_one_reads_what_it_wrote(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    (cache / "jax").mkdir(parents=True)
    (cache / "jax" / "stale-cache").write_text("a stale program")
    (cache / "models").mkdir()
    monkeypatch.chdir(REPO_ROOT)
    out = tmp_path / "out"
    recipe_runs.main(["--cpu", "--steps", "2", "--out", str(out), "--cache", str(cache), "--cold", "cold",
                      "--run", "cold", "", "--run", "warm", ""])
    report = json.loads((out / "first_step.json").read_text())["runs"]
    cold, warm = report["cold"], report["warm"]
    assert cold["rc"] == 0 and warm["rc"] == 0 and not (cache / "jax" / "stale-cache").exists()
    assert cold["compile_cache_entries"]["before"] == 0 < cold["compile_cache_entries"]["after"]
    assert warm["compile_cache_entries"]["before"] == cold["compile_cache_entries"]["after"]
    assert cold["timeline"]["model_ready_s"] > 0 and warm["timeline"]["model_ready_s"] == 0  # built, then reused
    for name, found in report.items():
        summary = json.loads((out / name / "summary.json").read_text())
        step_1 = json.loads((out / name / "metrics.jsonl").read_text().splitlines()[0])["step_time_s"]
        assert found["first_step_ends_s"] == pytest.approx(sum(summary["startup_s"].values()) + step_1, abs=0.01)
        assert f"FIRST STEP ENDS {found['first_step_ends_s']} s" in (out / "summary.txt").read_text()
