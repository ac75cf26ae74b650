"""Held-out accuracy with and without the prefill-attention grid, on this run's cases and on session 9's.

    python sims/benchmarks/results/h100_2026-11-26_s10_prefill/compare.py > compare.md

Also writes <run>/prefill_grid.json, the prefill-grid points alone of each run's microbench.json.

Tables compared (transformers stack; torch_fused likewise with its own files):
  run+grid     fitted from this run's microbench.json (with the prefill grid: the surface)
  run-grid     the same measurements without the prefill-grid points (the curve, as before)
  before       the files the shipped table was fitted from before this run (session 9's kernels, session
               10's training kernels)
  before+grid  those plus this run's prefill-grid points: the table shipped since
A case is held out when the table's measurements never timed its op at the same FLOPs and bytes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from sims.benchmarks import accuracy, torch_fused
from sims.benchmarks.accuracy_report import summarise
from sims.calibration.fit import fit_table
from sims.calibration.microbench import PREFILL_GRID, WORKLOADS
from sims.calibration.refit import read_measurements
from sims.calibration.table import save_table
from sims.hardware import REPO_ROOT, read_hardware_file

HERE = Path(__file__).resolve().parent
S9 = REPO_ROOT / "sims/benchmarks/results/h100_2026-11-26_s9"
WORKLOAD_POINTS = {(w["batch"], w["seq_len"]) for w in WORKLOADS if w["mode"] == "prefill"}


def is_grid_point(m: dict) -> bool:
    """A prefill-attention point timed for the grid only (not also a calibration workload)."""
    point = (m.get("batch"), m.get("seq_len"))
    return m.get("op") == "attention" and m.get("mode") == "prefill" and point in set(PREFILL_GRID) - WORKLOAD_POINTS


TRAIN = REPO_ROOT / "sims/benchmarks/results/h100_2026-11-26_s10_train"
BEFORE_FILES = {  # what refit.yaml listed for each H100 table before this run
    "transformers": [S9 / "hf/microbench.json", S9 / "fp8/measurements.json", TRAIN / "microbench_transformers.json"],
    "torch_fused": [S9 / "fused_tp1/microbench.json", S9 / "moe_ep1/microbench.json", S9 / "fp8/measurements.json",
                    REPO_ROOT / "sims/benchmarks/results/h100x2_2026-11-26_s9/coll/collectives_2.json",
                    TRAIN / "microbench_torch_fused.json"],
}


def tables(stack: str, run_files: list[Path]) -> dict[str, list[dict]]:
    """Measurements per compared table; the run's fp8, collective and training files are the earlier ones."""
    run = read_measurements([str(f) for f in run_files + BEFORE_FILES[stack][len(run_files):]])
    before = read_measurements([str(f) for f in BEFORE_FILES[stack]])
    return {
        "run+grid": run,
        "run-grid": [m for m in run if not is_grid_point(m)],
        "before": before,
        "before+grid": before + [m for m in run if is_grid_point(m)],
    }


def row(name: str, label: str, cases: list[dict], summary: dict, key: str) -> str:
    by_name = {c["name"]: c for c in cases}
    focus = by_name.get(key)
    groups = [summary.get(group) for group in ("all", "attention", "model")]
    cells = [f"{g['median_abs_error']:.1%} / {g['worst_abs_error']:.1%} ({g['cases']})" if g else "" for g in groups]
    return f"| {name} | {label} | {' | '.join(cells)} | {focus['error_calibrated']:+.1%} |" if focus else (
        f"| {name} | {label} | {' | '.join(cells)} | |")


def transformers_rows(hardware: dict, label: str, saved: dict, measured: dict[str, list[dict]]) -> list[str]:
    out = []
    for name, measurements in measured.items():
        path = HERE / f"_{name}.json"
        save_table(fit_table(measurements, hardware, stack="transformers"), path)
        cases = [{k: v for k, v in c.items() if not k.startswith(("predicted_", "error_"))} for c in saved["cases"]]
        accuracy.mark_held_out(cases, measurements)
        accuracy.predict(cases, accuracy.suite(False), hardware, str(path))
        out.append(row(name, label, cases, summarise(cases)["calibrated"], "qwen3_8b_4l attention prefill b=8 s=512"))
        path.unlink()
    return out


def fused_rows(hardware: dict, label: str, saved: dict, measured: dict[str, list[dict]]) -> list[str]:
    out = []
    for name, measurements in measured.items():
        path = HERE / f"_{name}.json"
        save_table(fit_table(measurements, hardware, stack="torch_fused"), path)
        cases = [{k: v for k, v in c.items() if not k.startswith(("predicted_", "error_"))} for c in saved["cases"]]
        torch_fused.predict(cases, saved["model"], hardware, str(path))
        s = torch_fused.summarise(cases)["calibrated"]
        prefills = " ".join(f"{c['name'].split(' ', 1)[-1]} {c['error_calibrated']:+.1%}" for c in cases
                            if c["workload"]["mode"] == "prefill")
        out.append(f"| {name} | {label} | {s['median_abs_error']:.1%} / {s['worst_abs_error']:.1%} ({s['cases']}) | {prefills} |")
        path.unlink()
    return out


def write_grid_files() -> None:
    """<run>/prefill_grid.json: the prefill-grid points of each of this run's microbench.json (what
    refit.yaml adds to session 9's files)."""
    for folder in ("hf", "fused_tp1", "moe_ep1"):
        source = HERE / folder / "microbench.json"
        if source.exists():
            grid = [m for m in json.loads(source.read_text()) if is_grid_point(m)]
            (HERE / folder / "prefill_grid.json").write_text(json.dumps(grid, indent=1))


def main() -> None:
    write_grid_files()
    hardware = {**read_hardware_file(REPO_ROOT / "conf/hardware/h100.yaml"), "efficiency_table": None}
    print("transformers: calibrated median / worst abs. error (cases) over held-out cases\n")
    print("| table | cases of | all | attention | whole models | attention prefill 8x512 |\n|---|---|---|---|---|---|")
    measured = tables("transformers", [HERE / "hf/microbench.json"])
    for label, folder in (("this run", HERE / "hf"), ("session 9", S9 / "hf")):
        saved = json.loads((folder / "accuracy.json").read_text())
        print("\n".join(transformers_rows(hardware, label, saved, measured)))
    fused_runs = [HERE / d / "microbench.json" for d in ("fused_tp1", "moe_ep1") if (HERE / d / "microbench.json").exists()]
    if not fused_runs:
        return
    measured = tables("torch_fused", fused_runs)
    print("\ntorch_fused whole steps: calibrated median / worst abs. error (cases); prefill cases\n")
    print("| table | cases of | all | prefill cases |\n|---|---|---|---|")
    for label, report in (("this run", HERE / "fused_tp1/accuracy_tp1.json"), ("session 9", S9 / "fused_tp1/accuracy_tp1.json"),
                          ("this run", HERE / "moe_ep1/accuracy_ep1.json"), ("session 9", S9 / "moe_ep1/accuracy_ep1.json")):
        if report.exists():
            print("\n".join(fused_rows(hardware, f"{label} {report.parent.name}", json.loads(report.read_text()), measured)))


if __name__ == "__main__":
    sys.exit(main())
