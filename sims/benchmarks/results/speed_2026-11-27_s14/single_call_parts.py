"""One simulate per layout over the Qwen3-30B-A3B prefill sweep, 40 first passes (every cache cleared) in one process:
mean wall time per configuration, and inside it the time of the main steps (wrapped; nested: costs_for includes _build_plan).
Run from a tree's root with PYTHONPATH=.: python single_call_parts.py"""
import gc, sys, time, yaml, collections
import sims.api as api, sims.step as step, sims.memory as memory, sims.vector_cost as vc
from sims import simulate
from sims.benchmarks.speed import REPO, WORKLOADS, sweep_points
from sims.builders import graph_and_counts, build_graph
from sims.cache import clear_caches
from sims.hardware import hardware_spec, read_hardware_file
from sims.workload import layout_problem, parse_layout, parse_workload
T = collections.Counter()
def wrap(mod, name):
    f = getattr(mod, name)
    def g(*a, **k):
        t = time.perf_counter(); r = f(*a, **k); T[name] += time.perf_counter() - t; return r
    setattr(mod, name, g)
for mod, name in [(api, "estimate_step"), (api, "estimate_memory"), (step, "_cost_stages"), (step, "costs_for"), (memory, "costs_for"), (vc, "_build_plan"), (step, "model_flops"), (api, "layout_problem"), (api, "graph_and_counts"), (api, "parse_layout"), (api, "parse_workload"), (api, "hardware_spec")]:
    wrap(mod, name)
hardware = read_hardware_file(REPO / "conf/hardware/h100.yaml"); hardware["efficiency_table"], hardware["nodes"] = None, 2
hw = hardware_spec(hardware)
hf = yaml.safe_load((REPO / f"conf/model/qwen3_30b_a3b.yaml").read_text())["hf_config"]
workload = WORKLOADS[0]; mode = workload["mode"]
points = [(l, {**workload, "batch": b}) for l, b in sweep_points()]
points = [(l, p) for l, p in points if layout_problem(build_graph(hf, mode).meta, hw, parse_layout(l), parse_workload(p)) is None]
total = 0
for rep in range(40):
    clear_caches(); graph_and_counts(hf, mode); gc.collect()
    t = time.perf_counter()
    for l, p in points: simulate(hf, hardware, l, p)
    total += time.perf_counter() - t
n = 40 * len(points)
print(f"total {1e6*total/n:.1f}", " ".join(f"{k}={1e6*v/n:.1f}" for k, v in T.most_common()))
