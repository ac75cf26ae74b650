"""The shipped tables are exactly what their saved measurements refit to."""

import json
import subprocess
import sys

import pytest
from sims_helpers import REPO


@pytest.mark.parametrize("card", ["h100", "h200"])
def test_shipped_tables_refit_exactly_from_their_measurements(card, tmp_path):
    shipped = json.loads((REPO / f"sims/calibration/tables/{card}.json").read_text())
    out = tmp_path / f"{card}.json"
    command = [sys.executable, "-m", "sims.calibration.refit", "--hardware", f"conf/hardware/{card}.yaml",
               "--stack", shipped["stack"], "--source", shipped["source"], "--out", str(out),
               f"sims/benchmarks/results/{card}_2026-11-26/microbench.json"]
    done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert json.loads(out.read_text()) == shipped
