"""First passes in one process: for each of the speed benchmark's 12 sweeps, the median over REPS first passes
(every cache cleared, the graph kept built, the heap collected) of the calling thread's CPU time per configuration.
Run from a tree's root with PYTHONPATH=. so that tree's sims is imported:  python first_pass_harness.py [REPS]"""
import gc, statistics, sys, time

import yaml

from sims import build_graph, simulate
from sims.benchmarks.speed import MODELS, REPO, WORKLOADS, sweep_points
from sims.builders import graph_and_counts
from sims.cache import clear_caches
from sims.hardware import hardware_spec, read_hardware_file
from sims.workload import layout_problem, parse_layout, parse_workload

reps = int(sys.argv[1]) if len(sys.argv) > 1 else 15
hardware = read_hardware_file(REPO / "conf/hardware/h100.yaml")
hardware["efficiency_table"], hardware["nodes"] = None, 2
hw = hardware_spec(hardware)
for model in MODELS:
    hf = yaml.safe_load((REPO / f"conf/model/{model}.yaml").read_text())["hf_config"]
    for workload in WORKLOADS:
        mode = workload["mode"]
        points = [(layout, {**workload, "batch": batch}) for layout, batch in sweep_points()]
        points = [(layout, point) for layout, point in points if layout_problem(
            build_graph(hf, mode).meta, hw, parse_layout(layout), parse_workload(point)) is None]
        seconds = []
        for _ in range(reps):
            clear_caches()
            graph_and_counts(hf, mode)
            gc.collect()
            start = time.thread_time()
            for layout, point in points:
                simulate(hf, hardware, layout, point)
            seconds.append((time.thread_time() - start) / len(points))
        median = statistics.median(seconds)
        print(f"{model:<18} {mode:<8} {len(points):>3} configs {1e6 * median:7.1f} us/config {1 / median:>8.0f} configs/s")
