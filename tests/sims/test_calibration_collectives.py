"""The collectives script for real: two gloo processes on this CPU, then the fit into a table."""

import json
import shutil
import subprocess
import sys

import pytest
from sims_helpers import REPO, hardware, model_config

from sims import simulate
from sims.calibration.table import load_table
from sims.comm import COLLECTIVES

pytest.importorskip("torch")


def test_measure_with_torchrun_then_fit_into_a_table(tmp_path):
    measure = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "-m",
               "sims.calibration.collectives", "measure", "--cpu", "--max-bytes", "16384", "--repeats", "2",
               "--warmup", "1", "--out", str(tmp_path / "out")]
    done = subprocess.run(measure, cwd=REPO, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    record = json.loads((tmp_path / "out" / "collectives_2.json").read_text())
    rows = record["measurements"]
    assert {r["collective"] for r in rows} == set(COLLECTIVES) and record["environment"]["backend"] == "gloo"
    assert sorted({r["bytes"] for r in rows if r["collective"] == "all_reduce"}) == [1024, 2048, 4096, 8192, 16384]
    for r in rows:
        assert r["time_us"] > 0 and r["group"] == 2 and r["link"] == "intra_node" and r["timing"] == "perf_counter"
        assert r["algbw_gb_s"] == pytest.approx(r["bytes"] / r["time_us"] / 1e3)

    table = tmp_path / "h100.json"
    shutil.copy(REPO / "sims/calibration/tables/h100.json", table)
    fit = [sys.executable, "-m", "sims.calibration.collectives", "fit", "--hardware", "conf/hardware/h100.yaml",
           "--table", str(table), str(tmp_path / "out" / "collectives_2.json")]
    done = subprocess.run(fit, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    fitted = load_table(table)
    assert {(c.collective, c.group) for c in fitted.collectives} == {(c, 2) for c in COLLECTIVES}
    assert fitted.gemm_measurements == load_table(REPO / "sims/calibration/tables/h100.json").gemm_measurements
    again = subprocess.run(fit, cwd=REPO, capture_output=True, text=True, timeout=120)  # refit: same table
    assert again.returncode == 0 and load_table(table) == fitted
    # gloo on a CPU is far slower than NVLink: the tp all-reduce slows down accordingly
    cfg, decode = model_config("qwen3_8b"), {"mode": "decode", "batch": 8, "context_len": 1024}
    shipped = simulate(cfg, hardware("h100"), {"tp": 2}, decode)
    measured = simulate(cfg, hardware("h100", efficiency_table=str(table)), {"tp": 2}, decode)
    assert measured.latency_s > shipped.latency_s
