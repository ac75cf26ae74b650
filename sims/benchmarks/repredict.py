"""Re-predict saved accuracy runs with a hardware file's shipped tables: no GPU, no measuring.

    python -m sims.benchmarks.repredict --hardware conf/hardware/h200.yaml \\
        sims/benchmarks/results/h200x4_2026-11-26/accuracy_transformers.json \\
        sims/benchmarks/results/h200x4_2026-11-26/accuracy_tp1.json ... [--out DIR]

A saved run is either the transformers accuracy benchmark's report (sims/benchmarks/accuracy.py:
GEMMs, attention, MoE experts modules, whole models) or a torch_fused one (sims/benchmarks/torch_fused.py:
whole plain-torch steps, tp or ep over the ranks). Each case is predicted with the built-in factors and
with the table the hardware file gives the run's stack (`efficiency_table`, a path or {stack: path}).
A transformers case counts as held out when none of the table's own measurement files (as
sims/calibration/tables/refit.yaml lists them) timed the same op at the same FLOPs and bytes;
whole steps are never calibration measurements. Prints one summary per file; --out writes each
re-predicted report (JSON and Markdown) under the saved file's name.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import yaml

from sims.benchmarks import accuracy, torch_fused
from sims.benchmarks.accuracy_report import summarise
from sims.calibration.refit import SHIPPED, entry_measurements
from sims.hardware import REPO_ROOT, read_hardware_file


def table_for(hardware: dict, stack: str) -> str | None:
    setting = hardware.get("efficiency_table")
    return setting.get(stack) if isinstance(setting, dict) else setting


def table_measurements(table: str) -> list[dict]:
    """The measurements a shipped table was refitted from (empty for a table refit.yaml does not list)."""
    shipped = Path(table).resolve().parent == SHIPPED.parent.resolve()
    spec = yaml.safe_load(SHIPPED.read_text()).get(Path(table).name) if shipped else None
    return [m for entry in spec["files"] for m in entry_measurements(entry)] if spec else []


def repredict(saved: dict, hardware: dict) -> dict:
    """The saved report with every prediction redone against `hardware`'s table for the run's stack."""
    stack = saved.get("stack", "transformers")
    named = table_for(hardware, stack)
    table = named and str(Path(named) if Path(named).is_absolute() else REPO_ROOT / named)
    builtin = {**hardware, "efficiency_table": None}
    cases = [{k: v for k, v in c.items() if not k.startswith(("predicted_", "error_"))} for c in saved["cases"]]
    if stack == "transformers":
        accuracy.mark_held_out(cases, table_measurements(table) if table else [])
        accuracy.predict(cases, accuracy.suite(False), builtin, table)
        summary = summarise(cases)
    else:
        torch_fused.predict(cases, saved["model"], builtin, table)
        summary = torch_fused.summarise(cases)
    return {**saved, "table": named, "summary": summary, "cases": cases}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="+", help="saved accuracy reports (accuracy*.json)")
    parser.add_argument("--hardware", required=True, help="conf/hardware/*.yaml whose tables predict")
    parser.add_argument("--out", help="folder for the re-predicted reports")
    args = parser.parse_args()
    hardware = read_hardware_file(args.hardware)
    for name in args.files:
        report = repredict(json.loads(Path(name).read_text()), hardware)
        markdown = (torch_fused if "stack" in report else accuracy).markdown(report)
        print(f"## {name} (table {report['table']})\n{markdown}")
        if args.out:
            out = Path(args.out)
            out.mkdir(parents=True, exist_ok=True)
            (out / Path(name).name).write_text(json.dumps(report, indent=1))
            (out / Path(name).with_suffix(".md").name).write_text(markdown)


if __name__ == "__main__":
    main()
