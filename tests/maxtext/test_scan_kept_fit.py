"""benchmarks/scan_kept_fit.py: sims/stacks.yaml's xla scanned_update.kept_byte_passes is the fit of session 23's
profiled remat-minimal updates (their files are in the repo), so the shipped constant and its source cannot drift."""

from __future__ import annotations

import glob

import pytest

from framework.backends.maxtext.benchmarks.scan_kept_fit import fit, main
from framework.core.paths import REPO_ROOT
from sims.stacks import stack

CALL_G = REPO_ROOT / "framework/backends/maxtext/benchmarks/results/h200_2026-11-29_s23/call_g"


def test_the_shipped_kept_byte_passes_is_the_fit_of_the_profiled_updates():
    paths = sorted(glob.glob(f"{CALL_G}/*.json"))
    assert len(paths) == 5  # four profiles and the remat-none run that ran out of memory (skipped)
    assert round(fit(paths), 2) == stack("xla").scanned_update.kept_byte_passes


def test_a_folder_without_probe_reports_is_one_line(tmp_path, capsys):
    (tmp_path / "pass.json").write_text('{"ms": {"full": 1.0}}')  # another probe's report
    with pytest.raises(SystemExit) as exit_:
        main(["--fit", str(tmp_path)])
    assert exit_.value.code == 2 and f"no update_probe JSON under {tmp_path}" in capsys.readouterr().err
