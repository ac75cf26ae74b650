"""benchmarks/recipe_runs.py, the GPU calls' runner: how a run's words split and how runs are compared (its runs
themselves are the GPU recipe's; checked by hand with --cpu, docs/benchmarks.md)."""

from __future__ import annotations

import json

import pytest

from framework.backends.maxtext.benchmarks.recipe_runs import describe, main, ratios, split_run


def test_a_runs_words_split_into_environment_and_overrides_as_a_shell_would():
    env, overrides = split_run("CUDA_VISIBLE_DEVICES=0 XLA_FLAGS='--a=1 --b=2' grpo.rollout_lag=2 model=qwen3_8b")
    assert env == {"CUDA_VISIBLE_DEVICES": "0", "XLA_FLAGS": "--a=1 --b=2"}
    assert overrides == ["grpo.rollout_lag=2", "model=qwen3_8b"]


def _run(root, name, step, rows=()):
    (root / name).mkdir()
    metrics = {"measured_step_s": step, "preflight_predicted_step_s": 0.5}
    (root / name / "summary.json").write_text(json.dumps({"result": {"status": "ok", "metrics": metrics}}))
    (root / name / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))


def test_each_run_is_compared_with_the_first_and_never_with_another(tmp_path):
    _run(tmp_path, "one_gpu", 0.8)
    _run(tmp_path, "lag2", 0.2, [{"step_time_s": 0.2, "update_time_s": 0.19}])
    assert ratios(tmp_path, ["one_gpu", "lag2"])[1].endswith("-> 4.00x one_gpu")
    lines = ratios(tmp_path, ["missing", "one_gpu", "lag2"])  # no first run: no ratio at all
    assert lines[0] == "missing: no summary" and not any("x missing" in line for line in lines)
    described = describe(tmp_path / "lag2", "lag2")
    assert "measured / predicted 0.400" in described[1] and "(0.2, None, 0.19" in described[2]


def test_a_run_whose_updates_had_zero_gradients_says_so(tmp_path):
    # A random-init model earns no reward: with beta 0 every update's gradient is zero, and its GEMMs on zeros run
    # at a higher clock than a real update's (session 23): its time is flagged, not taken for a real update's.
    _run(tmp_path, "zero", 0.5, [{"grad_norm": 0.0}, {"grad_norm": 0.0}, {"grad_norm": 0.57}])
    _run(tmp_path, "real", 0.5, [{"grad_norm": 0.0}, {"grad_norm": 0.3}, {"grad_norm": 0.57}])
    assert describe(tmp_path / "zero", "zero")[-1] == (
        "zero NOTE: 2 of 3 updates had grad_norm 0 (all-zero gradients): their time is shorter than a real update's")
    assert not any("NOTE" in line for line in describe(tmp_path / "real", "real"))


@pytest.mark.parametrize("args, expected", [
    (["--steps", "0", "--run", "a", ""], "--steps: 0; valid: >= 1"),
    (["--limit-s", "-5", "--run", "a", ""], "--limit-s: -5; valid: >= 1"),
    (["--run", "a", 'grpo.seed="open'], "--run a: 'grpo.seed=\"open': No closing quotation"),
    (["--run", "../escape", ""], "--run ../escape: a run's name is its folder under --out"),
    (["--run", "..", ""], "--run ..: a run's name is its folder under --out")])
def test_options_that_would_trace_back_or_measure_nothing_are_one_line(args, expected, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["--cpu", "--out", str(tmp_path / "out"), *args])
    assert exit_.value.code == 2 and expected in capsys.readouterr().err
    assert not (tmp_path / "out").exists() and not (tmp_path / "escape.log").exists()


def test_an_out_that_is_a_file_is_one_line(tmp_path, capsys):
    (tmp_path / "out").write_text("")
    with pytest.raises(SystemExit) as exit_:
        main(["--cpu", "--out", str(tmp_path / "out"), "--run", "a", ""])
    assert exit_.value.code == 2 and "--out " + str(tmp_path / "out") + ": is a file" in capsys.readouterr().err
