"""The closing summary a person reads: status, key metrics, warnings, run dir."""

from __future__ import annotations

import logging
import sys

log = logging.getLogger("framework.core.runtime")
MAX_ROWS = 12  # key metrics shown; every metric is in summary.json


def _format(value) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def key_rows(summary: dict) -> list[tuple[str, str]]:
    """(name, value) of the task's key metrics present in the result, in the task's order."""
    metrics = summary.get("metrics") or {}
    names = [k for k in summary.get("key_metrics") or [] if k in metrics]
    if not names:  # a task without key_metrics: its first scalars
        names = [k for k, v in metrics.items() if isinstance(v, (int, float, bool))]
    return [(name, _format(metrics[name])) for name in names[:MAX_ROWS]]


def format_outcome(summary: dict) -> str:
    seconds = (summary.get("result") or {}).get("wall_time_s") or 0.0
    head = (f"{summary['status']}: task={summary['task']} backend={summary['backend']} model={summary['model']} "
            f"hardware={summary['hardware']} in {seconds:.1f}s")
    lines = [head]
    if summary.get("hardware_auto"):
        lines.append(f"  {summary['hardware_auto']}")
    rows = key_rows(summary)
    width = max((len(name) for name, _ in rows), default=0)
    lines += [f"  {name:<{width}}  {value}" for name, value in rows]
    lines += [f"  warning: {text}" for text in summary.get("warnings") or []]
    error = (summary.get("result") or {}).get("error")
    if error and summary["status"] != "ok":
        lines.append(f"  {summary['status']}: {error}")
    lines.append(f"  run dir: {summary['run_dir']}")
    return "\n".join(lines)


def print_outcome(summary: dict, block: bool = True) -> None:
    """A single run ends with the block on stdout; a sweep job logs one line (the sweep prints its table)."""
    if block:
        sys.stdout.write(format_outcome(summary) + "\n")
        sys.stdout.flush()
        return
    shown = ", ".join(f"{name}={value}" for name, value in key_rows(summary)[:6])
    warned = f" [{len(summary['warnings'])} warning(s)]" if summary.get("warnings") else ""
    log.info("%s: %s%s (run dir: %s)", summary["status"], shown, warned, summary["run_dir"])
