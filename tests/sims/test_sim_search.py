"""recipe=sim_search: run.py returns the task's objective, and the Optuna search (hydra-optuna-sweeper, seeded
TPE) finds the layout the exhaustive sweep ranks best over the same small space."""

import csv
import math

import pytest
import yaml

from framework.core.errors import ConfigError
from framework.core.result import TrainingResult
from framework.core.sweep import objective_value
from tests.conftest import run_cli

MAXIMIZE = {"metric": "tokens_per_s_per_device", "direction": "maximize"}
SPACE = ["parallel.tp=1,2,4,8", "parallel.ep=1,8", "sim.batch=256"]  # 8 layouts on an 8 x H100 node


def result(status="ok", success=True, **metrics) -> TrainingResult:
    return TrainingResult(success=success, metrics={"status": status, **metrics}, status=status)


def test_the_objective_is_the_metric_and_the_worst_value_when_a_layout_cannot_run_or_fit():
    assert objective_value(MAXIMIZE, result(tokens_per_s_per_device=812, fits=True)) == 812.0
    assert objective_value(MAXIMIZE, result(tokens_per_s_per_device=2500, fits=False)) == -math.inf
    assert objective_value(MAXIMIZE, result(status="invalid", fits=None)) == -math.inf
    minimize = {"metric": "latency_s", "direction": "minimize"}
    assert objective_value(minimize, result(latency_s=0.02, fits=False)) == math.inf
    assert objective_value(minimize, result(status="failed", success=False)) is None
    assert objective_value(None, result(latency_s=0.02)) == {"status": "ok", "latency_s": 0.02}
    with pytest.raises(ConfigError, match="task.objective.metric: 'speed' is not a number the task reports; valid: latency_s"):
        objective_value({"metric": "speed", "direction": "maximize"}, result(latency_s=0.02, fits=True))
    with pytest.raises(ConfigError, match="task.objective.direction: 'up'; valid: minimize, maximize"):
        objective_value({"metric": "latency_s", "direction": "up"}, result(latency_s=0.02))


def best_of(rows: list[dict]) -> tuple[dict, float]:
    fitting = [r for r in rows if r["status"] == "ok" and r["fits"] == "True"]
    best = max(fitting, key=lambda r: float(r["tokens_per_s_per_device"]))
    return {k: int(best[k]) for k in ("parallel.tp", "parallel.ep")}, float(best["tokens_per_s_per_device"])


@pytest.mark.slow
def test_search_finds_the_exhaustive_sweeps_best_layout(tmp_path):
    search = run_cli(["-m", "recipe=sim_search", *[s.replace("=", "=choice(", 1) + ")" for s in SPACE[:2]], SPACE[2],
                      "hydra.sweeper.n_trials=6", f"hydra.sweep.dir={tmp_path}/search"])
    assert search.returncode == 0, search.stderr[-3000:]
    sweep = run_cli(["-m", "recipe=sim_sweep", *SPACE, f"hydra.sweep.dir={tmp_path}/sweep"])
    assert sweep.returncode == 0, sweep.stderr[-3000:]
    found = yaml.safe_load((tmp_path / "search/optimization_results.yaml").read_text())
    rows = list(csv.DictReader((tmp_path / "sweep/sweep_summary.csv").open()))
    assert len(rows) == 8
    fastest = max(rows, key=lambda r: float(r["tokens_per_s_per_device"]))
    assert fastest["fits"] == "False"  # the penalty matters: the highest throughput does not fit
    params, value = best_of(rows)
    assert {k: found["best_params"][k] for k in params} == params
    assert found["best_value"] == pytest.approx(value)
    trials = list(csv.DictReader((tmp_path / "search/sweep_summary.csv").open()))
    assert len(trials) == 6  # 6 trials of the 8 layouts found it
