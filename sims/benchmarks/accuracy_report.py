"""What an accuracy run reports: the summary of errors per kind of case, as a Markdown table
(docs/benchmarks.md) and printed."""

from __future__ import annotations

import statistics


def summarise(cases: list[dict]) -> dict:
    done = [c for c in cases if "error_calibrated" in c]
    out = {"cases": len(cases), "measured": len(done), "failed": [c["name"] for c in cases if "error" in c]}
    for label in ("default", "calibrated"):
        kinds = ("gemm", "attention", "moe_block", "model")
        groups = {"all": done, **{kind: [c for c in done if c["kind"] == kind] for kind in kinds}}
        out[label] = {
            group: {"median_abs_error": statistics.median(errors), "worst_abs_error": max(errors), "cases": len(errors)}
            for group, members in groups.items()
            if (errors := [abs(c[f"error_{label}"]) for c in members if c.get("held_out", True)])
        }
    return out


def markdown(report: dict) -> str:
    """The cases and the summary as Markdown tables (what docs/benchmarks.md shows)."""
    lines = ["| case | measured (us) | eager (us) | built-in | calibrated | held out |", "|---|---|---|---|---|---|"]
    for c in report["cases"]:
        if "error_calibrated" not in c:
            lines.append(f"| {c['name']} | failed: {c.get('error', '?')} | | | | |")
            continue
        eager = f"{c['eager_us']:.0f}" if "eager_us" in c else ""
        lines.append(f"| {c['name']} | {c['time_us']:.1f} | {eager} | {c['error_default']:+.1%} | "
                     f"{c['error_calibrated']:+.1%} | {'yes' if c['held_out'] else 'no'} |")
    lines += ["", "| held-out cases | built-in: median / worst abs. error | calibrated: median / worst |",
              "|---|---|---|"]
    summary = report["summary"]
    for group, stats in summary["calibrated"].items():
        default = summary["default"][group]
        lines.append(f"| {group} ({stats['cases']}) | {default['median_abs_error']:.1%} / "
                     f"{default['worst_abs_error']:.1%} | {stats['median_abs_error']:.1%} / "
                     f"{stats['worst_abs_error']:.1%} |")
    return "\n".join(lines) + "\n"


def print_table(cases: list[dict], summary: dict) -> None:
    print(f"\n{'case':<52} {'measured':>11} {'default':>9} {'calib.':>9}  held-out")
    for c in cases:
        if "error_calibrated" not in c:
            print(f"{c['name']:<52} {'failed: ' + c.get('error', '?')[:60]}")
            continue
        print(f"{c['name']:<52} {c['time_us']:>9.1f}us {c['error_default']:>+9.1%} {c['error_calibrated']:>+9.1%}  "
              f"{'yes' if c['held_out'] else 'no'}")
    for label in ("default", "calibrated"):
        for group, stats in summary[label].items():
            print(f"{label:<10} {group:<9} median |error| {stats['median_abs_error']:6.1%}  "
                  f"worst {stats['worst_abs_error']:6.1%}  ({stats['cases']} cases)")
