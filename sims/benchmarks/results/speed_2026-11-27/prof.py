"""First-pass time per configuration in one process (median of REPS passes, every cache cleared, graph kept); --prof adds cProfile: PYTHONPATH=. python prof.py MODEL MODE [REPS] [--prof]"""
import sys, cProfile, pstats, gc, time, yaml, statistics
sys.path.insert(0, ".")
from sims import simulate, build_graph
from sims.cache import clear_caches
from sims.builders import graph_and_counts
from sims.hardware import hardware_spec, read_hardware_file
from sims.workload import layout_problem, parse_layout, parse_workload
from sims.benchmarks.speed import sweep_points, WORKLOADS, REPO
model, mode = sys.argv[1], sys.argv[2]; reps = int(sys.argv[3]) if len(sys.argv) > 3 else 25
hardware = read_hardware_file(REPO / "conf/hardware/h100.yaml"); hardware["efficiency_table"] = None; hardware["nodes"] = 2
hf = yaml.safe_load((REPO / f"conf/model/{model}.yaml").read_text())["hf_config"]
workload = next(w for w in WORKLOADS if w["mode"] == mode)
hw = hardware_spec(hardware)
points = [(l, {**workload, "batch": b}) for l, b in sweep_points()]
points = [(l, p) for l, p in points if layout_problem(build_graph(hf, mode).meta, hw, parse_layout(l), parse_workload(p)) is None]
def run():
    gc.collect(); s = time.thread_time()
    for l, p in points: simulate(hf, hardware, l, p)
    return time.thread_time() - s
times = []
for r in range(reps):
    clear_caches(); graph_and_counts(hf, mode); times.append(run())
print(f"{model} {mode}: {len(points)} configs, first pass median {1e6*statistics.median(times)/len(points):.1f} us/config")
if "--prof" in sys.argv:
    pr = cProfile.Profile()
    for r in range(10):
        clear_caches(); graph_and_counts(hf, mode); pr.enable(); run(); pr.disable()
    pstats.Stats(pr).sort_stats("tottime").print_stats(30)
