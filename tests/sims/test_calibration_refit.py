"""The shipped tables are exactly what their saved measurements refit to (sims/calibration/tables/refit.yaml)."""

import json
import subprocess
import sys

import yaml
from sims_helpers import REPO


def test_shipped_tables_refit_exactly_from_their_measurements(tmp_path):
    done = subprocess.run([sys.executable, "-m", "sims.calibration.refit", "--shipped", "--out", str(tmp_path)],
                          cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    listed = yaml.safe_load((REPO / "sims/calibration/tables/refit.yaml").read_text())
    assert {"h100.json", "h200.json"} <= set(listed)
    for name in listed:
        shipped = json.loads((REPO / "sims/calibration/tables" / name).read_text())
        assert json.loads((tmp_path / name).read_text()) == shipped, name
