"""Time to the first finished step of a recipe run (issue 15), from its run dir: recipe_runs' `--cache`/`--cold`.

A run's first step ends `sum(startup_s) + step 1's step_time_s` after launch: `startup_s` (summary.json:
launch, prepare, setup, init) is everything before step 1. A cold run starts with the run's caches removed from its
cache directory (the run's CRUCIBLE_CACHE: model builds `<cache>/models`, JAX's persistent compilation cache
`<cache>/jax`; nothing else there is touched); the entries of
`<cache>/jax` before and after a run show what it compiled and wrote (a warm run reads them instead).
Caches outside that directory (the CUDA driver's, Triton's) are left alone: on a fresh machine they are empty.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

TIMELINE_PREFIXES = ("startup_", "model_", "aot_")
TIMELINE_KEYS = ("init_compile_time_s", "measured_step_s")


def compile_cache_entries(cache: Path) -> int:
    """Programs in the run's persistent JAX compilation cache (patches/devices.py: `<cache_dir>/jax`)."""
    folder = cache / "jax"
    return sum(1 for _ in folder.iterdir()) if folder.is_dir() else 0


RUN_CACHES = ("jax", "models")  # what a maxtext run keeps under its cache_dir (patches/devices.py, adapter.py)


def empty_cache(cache: Path) -> None:
    """Remove the run's caches under `cache` for a cold run: `<cache>/jax` and `<cache>/models` only, so a
    directory that also holds other things (another backend's builds, a user's files) keeps them."""
    for name in RUN_CACHES:
        if (cache / name).exists():
            shutil.rmtree(cache / name)  # a failure is an error: a half-emptied cache is not a cold start
    cache.mkdir(parents=True, exist_ok=True)


def check_cache(cache: Path) -> str | None:
    """Why `cache` cannot be a run's CRUCIBLE_CACHE (None: it can)."""
    if cache.exists() and not cache.is_dir():
        return f"--cache {cache}: is a file; name a directory (made if missing)"
    return None


def figures(run_dir: Path, wall_s: float, cold: bool, entries: tuple[int, int]) -> dict:
    """The first-step figures of one finished run (a run without summary.json gives its error)."""
    found = {"cold": cold, "wall_s": round(wall_s, 2), "compile_cache_entries": {"before": entries[0],
                                                                               "after": entries[1]}}
    try:
        summary = json.loads((run_dir / "summary.json").read_text())
        steps = [row for row in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())
                 if "step_time_s" in row]
    except (OSError, ValueError) as error:
        return {**found, "error": f"no summary ({error})"}
    metrics = summary.get("result", {}).get("metrics", {})
    startup = summary.get("startup_s") or {}
    phases = {key: round(value, 3) for key, value in startup.items() if value is not None}
    if missing := [key for key, value in startup.items() if value is None]:  # e.g. launch off Linux
        found["startup_unmeasured"] = missing
    step_1 = steps[0]["step_time_s"] if steps else None
    found.update(success=summary.get("success"), startup_s=phases, step_1_s=_rounded(step_1),
                 first_step_ends_s=round(sum(phases.values()) + step_1, 2) if step_1 is not None else None,
                 step_1_compile_s=_rounded(steps[0].get("compile_time_s")) if steps else None,
                 steps_2_on_s=[_rounded(row["step_time_s"]) for row in steps[1:]],
                 update_s=[_rounded(row.get("update_time_s")) for row in steps],
                 timeline={key: _rounded(value) for key, value in metrics.items()
                           if key.startswith(TIMELINE_PREFIXES) or key in TIMELINE_KEYS})
    if not summary.get("success"):
        found["error"] = summary.get("result", {}).get("error")
    return found


def lines(name: str, found: dict) -> list[str]:
    """The report's lines for one run's figures."""
    entries = found["compile_cache_entries"]
    head = (f"{name} ({'cold' if found['cold'] else 'warm'}): {found['wall_s']} s launch to exit, compile cache "
            f"entries {entries['before']} -> {entries['after']}")
    if "startup_s" not in found:
        return [f"{head}; {found['error']}"]
    unmeasured = f" (not measured: {', '.join(found['startup_unmeasured'])})" if found.get("startup_unmeasured") else ""
    out = [f"{head}; startup_s {found['startup_s']}{unmeasured} | step 1 {found['step_1_s']} s | FIRST STEP ENDS "
           f"{found['first_step_ends_s']} s after launch",
           f"{name} steps 2.. {found['steps_2_on_s']} | update {found['update_s']}",
           f"{name} timeline {found['timeline']}"]
    return out + ([f"{name} FAILED: {found['error']}"] if found.get("error") else [])


def _rounded(value):
    return round(value, 3) if isinstance(value, float) else value
