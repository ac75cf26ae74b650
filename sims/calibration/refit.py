"""Refit an efficiency table from saved measurement files, exactly and without a GPU.

    python -m sims.calibration.refit --shipped            # every table in sims/calibration/tables/refit.yaml
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

import yaml

from framework.core.errors import ConfigError
from sims.calibration.fit import fit_table
from sims.calibration.table import EfficiencyTable, save_table
from sims.hardware import REPO_ROOT, read_hardware_file
from sims.stacks import stacks

SHIPPED = REPO_ROOT / "sims/calibration/tables/refit.yaml"


class RefitInputError(ValueError):
    """A measurement or hardware file that cannot be read: one line for the command line."""


def read_measurements(files: list[str]) -> list[dict]:
    measurements = []
    for name in files:
        try:
            record = json.loads(Path(name).read_text())
        except OSError as error:
            raise RefitInputError(f"{name}: cannot read it ({error.strerror})") from error
        except json.JSONDecodeError as error:
            raise RefitInputError(f"{name}: not JSON ({error.msg}, line {error.lineno})") from error
        rows = record.get("measurements") if isinstance(record, dict) else record
        if not isinstance(rows, list) or not all(isinstance(row, dict) for row in rows):
            raise RefitInputError(f"{name}: not a measurement file; valid: a JSON list of measurements "
                                  "(microbench.json) or an object with a 'measurements' list (collectives)")
        measurements += rows
    return measurements


def refit(files: list[str], hardware_file: str, stack: str, source: str) -> EfficiencyTable:
    measurements = read_measurements(files)
    if not measurements:
        raise RefitInputError(f"{', '.join(files)}: no measurements; a table fit from none would be empty")
    if not Path(hardware_file).is_file():
        raise RefitInputError(f"--hardware: {hardware_file} is not a file; valid: a conf/hardware/*.yaml path")
    named = ", ".join(files)
    if not any("op_class" in row or "collective" in row for row in measurements):
        raise RefitInputError(f"{named}: none of the {len(measurements)} measurements has an op_class (a kernel "
                              "timing) or a collective; nothing to fit")
    try:
        return fit_table(measurements, read_hardware_file(hardware_file), source=source, stack=stack)
    except KeyError as error:
        raise RefitInputError(f"{named}: a measurement has no {error}") from error
    except ConfigError as error:
        raise RefitInputError(f"{named}: {error}") from error


def refit_shipped(out_dir: Path) -> list[Path]:
    """Every shipped table as refit.yaml describes it, written into out_dir."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    specs = yaml.safe_load(SHIPPED.read_text())
    if not isinstance(specs, dict):
        raise RefitInputError(f"{SHIPPED.name}: valid: a mapping of table file names to {{{', '.join(SPEC_KEYS)}}}")
    for name, spec in specs.items():
        check_spec(name, spec)
        hardware_file = str(REPO_ROOT / spec["hardware"])
        measurements = [m for entry in spec["files"] for m in entry_measurements(entry)]
        try:
            table = fit_table(measurements, read_hardware_file(hardware_file), source=spec["source"],
                              stack=spec["stack"])
        except KeyError as error:  # as refit() says them: the table named, not a traceback
            raise RefitInputError(f"{SHIPPED.name}: {name}: a measurement has no {error}") from error
        except ConfigError as error:
            raise RefitInputError(f"{SHIPPED.name}: {name}: {error}") from error
        save_table(table, out_dir / name)
        written.append(out_dir / name)
    return written


SPEC_KEYS = ("hardware", "stack", "source", "files")


def check_spec(name, spec) -> None:
    """A refit.yaml table entry: its four keys, hardware a file, stack a known one, files a non-empty list (a string
    there was read a character at a time)."""
    valid = f"valid: {{{', '.join(SPEC_KEYS)}: [path or {{path, without_ops}}, ...]}}"
    if not isinstance(spec, dict) or set(spec) != set(SPEC_KEYS):
        raise RefitInputError(f"{SHIPPED.name}: {name}: {spec!r:.80}; {valid}")
    if not isinstance(spec["files"], list) or not spec["files"]:
        raise RefitInputError(f"{SHIPPED.name}: {name}: files: {spec['files']!r:.80}; {valid}")
    if not isinstance(spec["hardware"], str) or not (REPO_ROOT / spec["hardware"]).is_file():
        raise RefitInputError(f"{SHIPPED.name}: {name}: hardware: {spec['hardware']!r} is no file; valid: a "
                              f"conf/hardware/*.yaml path")
    if spec["stack"] not in stacks():
        raise RefitInputError(f"{SHIPPED.name}: {name}: stack: {spec['stack']!r}; valid: one of {sorted(stacks())}")


def entry_path(entry: str | dict) -> str:
    """A refit.yaml file entry's file, absolute: the entry is a path or {path, without_ops}."""
    return str(REPO_ROOT / (entry if isinstance(entry, str) else entry["path"]))


def entry_measurements(entry: str | dict) -> list[dict]:
    """A refit.yaml file entry's measurements: a path, or {path, without_ops}: the file less the ops a later
    file re-timed (their forward, forward + backward and derived backward records). A misspelt key or an op the
    file lacks is refused: either would keep the records meant to go, the table fitted as if they went."""
    path = entry if isinstance(entry, str) else entry.get("path") if isinstance(entry, dict) else None
    if not isinstance(path, str) or not path or (isinstance(entry, dict) and set(entry) - {"path", "without_ops"}):
        raise RefitInputError(f"{SHIPPED.name}: file entry {entry!r}: valid: a path, or "
                              f"{{path, without_ops: [op, ...]}}")
    ops = [] if isinstance(entry, str) else entry.get("without_ops")
    if not isinstance(ops, list) or not all(isinstance(op, str) for op in ops) or (isinstance(entry, dict) and not ops):
        raise RefitInputError(f"{SHIPPED.name}: {path}: without_ops: {ops!r}; valid: a non-empty list of op names "
                              f"(or the path alone)")  # a string was read a letter at a time, null a TypeError
    dropped = set(ops)
    measurements = read_measurements([entry_path(entry)])
    absent = sorted(dropped - {m.get("op") for m in measurements})
    if absent:
        raise RefitInputError(f"{SHIPPED.name}: {entry['path']}: without_ops {absent[0]!r} is no op of the file")
    return [m for m in measurements if m.get("op") not in dropped]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", help="measurement JSON files")
    parser.add_argument("--shipped", action="store_true", help=f"refit every table listed in {SHIPPED.name}")
    parser.add_argument("--hardware", help="conf/hardware/*.yaml of the measured device")
    parser.add_argument("--stack", choices=tuple(stacks()), help="the software stack measured")
    parser.add_argument("--source", help="how and when it was measured (kept in the table)")
    parser.add_argument("--out", help="table to write (with --shipped: a folder; default: the tables' own)")
    args = parser.parse_args()
    if args.shipped:
        try:
            written = refit_shipped(Path(args.out) if args.out else SHIPPED.parent)
        except RefitInputError as error:
            parser.error(str(error))
        for path in written:
            print(f"wrote {path}")
        return
    if not (args.files and args.hardware and args.stack and args.source and args.out):
        parser.error("give FILES, --hardware, --stack, --source and --out (or --shipped)")
    try:
        table = refit(args.files, args.hardware, args.stack, args.source)
    except RefitInputError as error:
        parser.error(str(error))
    save_table(table, args.out)
    print(f"wrote {args.out}: {len(table.gemm_measurements)} GEMM shapes, {len(table.op_measurements)} op "
          f"timings, {len(table.collectives)} collective fits")


if __name__ == "__main__":
    main()
