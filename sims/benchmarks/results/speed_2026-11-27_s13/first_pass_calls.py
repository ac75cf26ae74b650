"""Deterministic companion of the timings (a shared machine's load moves them by +-15%): Python function calls per
configuration in the first pass of each of the speed benchmark's sweeps (cProfile's count; numpy's ufuncs on arrays
are not counted), and the entries each named cache computes in that pass. Run from a tree's root with PYTHONPATH=."""
import collections, cProfile, gc, pstats

import yaml

from sims import build_graph, simulate
from sims.benchmarks.speed import MODELS, REPO, WORKLOADS, sweep_points
from sims.builders import graph_and_counts
from sims.cache import _ALL, clear_caches
from sims.hardware import hardware_spec, read_hardware_file
from sims.workload import layout_problem, parse_layout, parse_workload

hardware = read_hardware_file(REPO / "conf/hardware/h100.yaml")
hardware["efficiency_table"], hardware["nodes"] = None, 2
hw = hardware_spec(hardware)


def entry_kind(key):
    inner = key[1]
    if isinstance(inner, tuple) and inner and isinstance(inner[0], str):
        return inner[0]
    return "plan" if isinstance(inner, tuple) else str(inner)


for model in MODELS:
    hf = yaml.safe_load((REPO / f"conf/model/{model}.yaml").read_text())["hf_config"]
    for workload in WORKLOADS:
        mode = workload["mode"]
        points = [(layout, {**workload, "batch": batch}) for layout, batch in sweep_points()]
        points = [(layout, point) for layout, point in points if layout_problem(
            build_graph(hf, mode).meta, hw, parse_layout(layout), parse_workload(point)) is None]
        clear_caches()
        graph_and_counts(hf, mode)
        gc.collect()
        profile = cProfile.Profile()
        profile.enable()
        for layout, point in points:
            simulate(hf, hardware, layout, point)
        profile.disable()
        calls = pstats.Stats(profile).total_calls
        kinds = collections.Counter(entry_kind(key) for cache in list(_ALL) for key in cache._entries)
        print(f"{model:<18} {mode:<8} {len(points):>3} configs {calls / len(points):7.0f} calls/config  "
              + " ".join(f"{k}={v}" for k, v in sorted(kinds.items())))
