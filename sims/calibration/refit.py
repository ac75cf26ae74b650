"""Refit an efficiency table from saved measurement files, exactly and without a GPU.

    python -m sims.calibration.refit --hardware conf/hardware/h100.yaml --stack transformers \\
        --source "H100 80GB, torch 2.11, transformers 5.17, 2026-11-26" \\
        --out sims/calibration/tables/h100.json \\
        sims/benchmarks/results/h100_2026-11-26/microbench.json fp8/measurements.json coll/collectives_2.json

Every file is a JSON list of measurements (microbench.json, `microbench --measurements`) or an
object with a `measurements` list (sims.calibration.collectives). Kernel timings and collective
timings are told apart by their keys (sims/calibration/fit.py); the same files always give the
same table.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from sims.calibration.fit import fit_table
from sims.calibration.table import save_table
from sims.hardware import load_hardware_file
from sims.stacks import stacks


def read_measurements(files: list[str]) -> list[dict]:
    measurements = []
    for name in files:
        record = json.loads(Path(name).read_text())
        measurements += record["measurements"] if isinstance(record, dict) else record
    return measurements


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", help="measurement JSON files")
    parser.add_argument("--hardware", required=True, help="conf/hardware/*.yaml of the measured device")
    parser.add_argument("--stack", required=True, choices=tuple(stacks()), help="the software stack measured")
    parser.add_argument("--source", required=True, help="how and when it was measured (kept in the table)")
    parser.add_argument("--out", required=True, help="table to write")
    args = parser.parse_args()
    measurements = read_measurements(args.files)
    table = fit_table(measurements, load_hardware_file(args.hardware), source=args.source, stack=args.stack)
    save_table(table, args.out)
    print(f"wrote {args.out}: {len(measurements)} measurements, {len(table.gemm_measurements)} GEMM shapes, "
          f"{len(table.op_measurements)} op timings, {len(table.collectives)} collective fits")


if __name__ == "__main__":
    main()
