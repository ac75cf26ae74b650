"""Write simulator output: per-op breakdowns as CSV + Markdown, sweeps as a PNG."""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from pathlib import Path



def write_breakdown(rows: Sequence[dict], path_csv: str | Path, path_md: str | Path) -> None:
    """`SimResult.breakdown_rows()` as a CSV file and a Markdown table with each op's share of time."""
    columns = _columns(rows)
    with open(path_csv, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(rows)
    total = sum(_number(r.get("time_s")) or 0.0 for r in rows)
    md_columns = columns + (["time_%"] if "time_s" in columns else [])
    lines = ["| " + " | ".join(md_columns) + " |", "|" + "---|" * len(md_columns)]
    for row in rows:
        cells = [_format(row.get(c)) for c in columns]
        if "time_s" in columns:
            share = (_number(row.get("time_s")) or 0.0) / total * 100 if total else 0.0
            cells.append(f"{share:.1f}")
        lines.append("| " + " | ".join(cells) + " |")
    Path(path_md).write_text("\n".join(lines) + "\n")


def plot_sweep(rows: Sequence[dict], out_png: str | Path, varied: Sequence[str] = ()) -> Path:
    """Throughput and memory per device for each job of a sweep, one bar per row.

    rows: dicts with the summary metrics `status`, `tokens_per_s_per_device`, `memory_per_device_gb`,
    `fits` and optionally `memory_capacity_gb` (strings are fine, e.g. read back from CSV), and the
    config keys the sweep varied. varied: those keys (the sweep summary's, e.g. `parallel.tp`); each
    bar is labelled with their values, named by the key's last part (`tp=2 ep=8`). Invalid layouts
    are marked with an x and no bar; layouts that do not fit get a hatched red bar."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Patch

    labels = _labels(rows, varied)
    positions = list(range(len(rows)))
    valid = [str(r.get("status")) == "ok" for r in rows]
    fits = [_flag(r.get("fits")) for r in rows]
    colors = ["tab:blue" if ok and fit else "tab:red" for ok, fit in zip(valid, fits)]
    hatches = ["" if fit else "//" for fit in fits]

    fig, (top, bottom) = plt.subplots(2, 1, sharex=True, figsize=(max(6.0, 0.45 * len(rows) + 2), 7))
    for axis, key, ylabel in (
        (top, "tokens_per_s_per_device", "tokens/s per device"),
        (bottom, "memory_per_device_gb", "memory per device (GB)"),
    ):
        heights = [(_number(r.get(key)) or 0.0) if ok else 0.0 for r, ok in zip(rows, valid)]
        bars = axis.bar(positions, heights, color=colors)
        for bar, hatch in zip(bars, hatches):
            bar.set_hatch(hatch)
        invalid = [p for p, ok in zip(positions, valid) if not ok]
        axis.plot(invalid, [0.0] * len(invalid), "x", color="gray", markersize=9, markeredgewidth=2)
        axis.set_ylabel(ylabel)
        axis.grid(axis="y", alpha=0.3)
    capacities = {_number(r.get("memory_capacity_gb")) for r in rows} - {None}
    for capacity in capacities:
        bottom.axhline(capacity, color="black", linestyle="--", linewidth=1)
    bottom.set_xticks(positions)
    bottom.set_xticklabels(labels, rotation=60, ha="right", fontsize=8)
    legend = [
        Patch(color="tab:blue", label="fits"),
        Patch(facecolor="tab:red", hatch="//", label="does not fit"),
        plt.Line2D([], [], marker="x", color="gray", linestyle="", label="invalid layout"),
    ]
    if capacities:
        legend.append(plt.Line2D([], [], color="black", linestyle="--", label="device memory"))
    # above the plot, so it never hides a bar
    top.legend(handles=legend, fontsize=8, loc="lower right", bbox_to_anchor=(1.0, 1.0), ncol=len(legend),
               frameon=False)
    top.set_title("Simulated sweep", loc="left")
    fig.tight_layout()
    out_png = Path(out_png)
    fig.savefig(out_png, dpi=120)
    plt.close(fig)
    return out_png


def _labels(rows: Sequence[dict], varied: Sequence[str]) -> list[str]:
    return [" ".join(f"{k.rsplit('.', 1)[-1]}={r.get(k)}" for k in varied) or str(i) for i, r in enumerate(rows)]


def _columns(rows: Sequence[dict]) -> list[str]:
    columns: list[str] = []
    for row in rows:
        columns.extend(k for k in row if k not in columns)
    return columns


def _number(value) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number


def _flag(value) -> bool:
    return value is True or str(value).strip().lower() in ("true", "1", "yes")


def _format(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return "" if value is None else str(value)
