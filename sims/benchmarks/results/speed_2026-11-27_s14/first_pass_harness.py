"""First passes in one process: for each of the speed benchmark's 12 sweeps, the median over REPS first passes (every
cache cleared, the graph kept built, the heap collected) of the calling thread's CPU time per configuration, with one
simulate call per layout and, where the tree has it, with simulate_many. Run from a tree's root with PYTHONPATH=.:
    python first_pass_harness.py [REPS]"""
import gc, statistics, sys, time

import yaml

import sims
from sims import build_graph, simulate
from sims.benchmarks.speed import MODELS, REPO, WORKLOADS, sweep_points
from sims.builders import graph_and_counts
from sims.cache import clear_caches
from sims.hardware import hardware_spec, read_hardware_file
from sims.workload import layout_problem, parse_layout, parse_workload

reps = int(sys.argv[1]) if len(sys.argv) > 1 else 15
many = getattr(sims, "simulate_many", None)
hardware = read_hardware_file(REPO / "conf/hardware/h100.yaml")
hardware["efficiency_table"], hardware["nodes"] = None, 2
hw = hardware_spec(hardware)


def per_layout(hf, points):
    for layout, point in points:
        simulate(hf, hardware, layout, point)


def together(hf, points):
    many(hf, hardware, [layout for layout, _ in points], [point for _, point in points])


for model in MODELS:
    hf = yaml.safe_load((REPO / f"conf/model/{model}.yaml").read_text())["hf_config"]
    for workload in WORKLOADS:
        mode = workload["mode"]
        points = [(layout, {**workload, "batch": batch}) for layout, batch in sweep_points()]
        points = [(layout, point) for layout, point in points if layout_problem(
            build_graph(hf, mode).meta, hw, parse_layout(layout), parse_workload(point)) is None]
        medians = []
        for run in (per_layout, together) if many else (per_layout,):
            seconds = []
            for _ in range(reps):
                clear_caches()
                graph_and_counts(hf, mode)
                gc.collect()
                start = time.thread_time()
                run(hf, points)
                seconds.append((time.thread_time() - start) / len(points))
            medians.append(f"{1e6 * statistics.median(seconds):7.1f}")
        print(f"{model:<18} {mode:<8} {len(points):>3} configs, us/config: per-layout {medians[0]} "
              f"simulate_many {medians[1] if many else '      -'}")
