"""The sim backend from the command line, for real: task=calibrate on this CPU, the sim_sweep
recipe, and a single invalid layout."""

from __future__ import annotations

import csv
import json

import pytest
import yaml

from framework.backends.sim.adapter import SimAdapter
from framework.backends.sim.config import SimTask
from framework.core.errors import ConfigError
from sims import simulate
from sims.calibration.table import load_table
from tests.conftest import REPO_ROOT, compose_config, run_cli

TINY_CALIBRATION = [
    "task=calibrate", "hardware=cpu", "model=tiny_qwen3", "calibrate.dtype=fp32", "calibrate.prefill=[[1,16],[2,32]]",
    "calibrate.decode=[[2,32]]", "calibrate.warmup=0", "calibrate.repeats=2", "calibrate.copy_mb=1",
]


def config(name: str) -> dict:
    return yaml.safe_load((REPO_ROOT / f"conf/{name}.yaml").read_text())


def test_calibrate_on_this_cpu_writes_a_table_that_changes_predictions(tmp_path):
    pytest.importorskip("torch")
    table_path = tmp_path / "tables" / "cpu.json"
    proc = run_cli([*TINY_CALIBRATION, f"calibrate.output={table_path}", f"hydra.run.dir={tmp_path}/run"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "ok" and summary["metrics"]["table"] == str(table_path)
    assert summary["metrics"]["launch_floor_us"] > 0 and summary["metrics"]["copy_tb_s"] > 0
    logged = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(logged) == summary["metrics"]["measurements"]  # one line per timed kernel
    assert {"q_proj", "attention", "rotary", "lm_head", "copy", "launch"} <= {row["benchmark"] for row in logged}

    table = load_table(table_path)
    assert table.gemm_measurements and table.op_measurements and "qk_norm" in table.ops
    cpu, model = config("hardware/cpu"), config("model/tiny_qwen3")["hf_config"]
    workload = {"mode": "prefill", "batch": 2, "seq_len": 48, "dtype": "fp32"}
    default = simulate(model, cpu, {}, workload)
    calibrated = simulate(model, {**cpu, "efficiency_table": str(table_path)}, {}, workload)
    assert calibrated.status == "ok" and calibrated.latency_s != default.latency_s


def test_calibrate_rejects_unknown_benchmarks_in_one_line(tmp_path):
    proc = run_cli([*TINY_CALIBRATION, "calibrate.benchmarks=[gemm,conv]", f"hydra.run.dir={tmp_path}"])
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: calibrate.benchmarks: ['conv']; valid: gemm, moe, router, attention, norm, elementwise, embedding, "
        "copy, launch"
    ]


def test_sim_sweep_recipe_rows_plot_and_invalid_layouts(tmp_path):
    # 4 sequences cannot be split over the 8 replicas that tp=1 leaves (dp=-1): those 4 jobs are invalid rows
    proc = run_cli(["-m", "recipe=sim_sweep", "sim.batch=4", f"hydra.sweep.dir={tmp_path}"])
    assert proc.returncode == 0, proc.stderr[-2000:]
    with (tmp_path / "sweep_summary.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == 16
    assert (tmp_path / "sweep_plot.png").stat().st_size > 10_000
    invalid = [r for r in rows if r["status"] == "invalid"]
    assert sorted(r["sim.tp"] for r in invalid) == ["1"] * 4
    assert all("batch=4 is not divisible by dp*microbatches=8" in r["error"] for r in invalid)
    assert all(r["status"] == "ok" and float(r["tokens_per_s_per_device"]) > 0 for r in rows if r["sim.tp"] != "1")


def test_sim_sweep_recipe_fills_the_node_with_valid_layouts():
    job = SimAdapter().convert_config(compose_config(["recipe=sim_sweep"]))
    devices = job.hardware["devices_per_node"] * job.hardware["nodes"]
    for tp in (1, 2, 4, 8):
        for ep in (1, 2, 4, 8):
            job.task.tp, job.task.ep = tp, ep
            layout = job.task.layout(devices)
            assert layout["tp"] * layout["dp"] == devices == 8
            assert simulate(job.hf_config, job.hardware, layout, job.task.workload()).status == "ok", (tp, ep)


def test_dp_minus_one_takes_the_remaining_devices():
    task = SimTask("decode", 8, 16, 16, tp=2, dp=-1, ep=1, pp=2, microbatches=1, recompute=False, dtype="bf16")
    assert task.layout(devices=16)["dp"] == 4
    task.tp = 32
    assert task.layout(devices=16)["dp"] == 1  # no room: one replica, and the layout check reports the excess
    task.dp = -2
    with pytest.raises(ConfigError, match=r"sim.dp: -2 is not valid; expected an integer >= 1, or -1"):
        task.layout(devices=16)


def test_a_single_invalid_layout_exits_2_with_one_line(tmp_path):
    proc = run_cli(["task=sim", "model=qwen3_30b_a3b", "hardware=h100", "sim.tp=3", f"hydra.run.dir={tmp_path}"])
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == ["error: tp=3 does not divide num_attention_heads=32"]
    assert json.loads((tmp_path / "summary.json").read_text())["status"] == "invalid"
