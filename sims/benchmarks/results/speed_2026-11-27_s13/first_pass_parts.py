import sys, time, gc, yaml, statistics
from sims import simulate, build_graph
from sims.builders import graph_and_counts
from sims.cache import clear_caches
from sims.hardware import hardware_spec, read_hardware_file
from sims.workload import layout_problem, parse_layout, parse_workload
from sims.benchmarks.speed import sweep_points, WORKLOADS, REPO
import sims.vector_cost as vc, sims.step as st, sims.memory as mem, sims.op_columns as oc, sims.partition as pa
model, mode = sys.argv[1], sys.argv[2]
hardware = read_hardware_file(REPO / "conf/hardware/h100.yaml"); hardware["efficiency_table"] = None; hardware["nodes"] = 2
hf = yaml.safe_load((REPO / f"conf/model/{model}.yaml").read_text())["hf_config"]
workload = next(w for w in WORKLOADS if w["mode"] == mode)
points = [(l, {**workload, "batch": b}) for l, b in sweep_points()]
graph_and_counts(hf, mode); hw = hardware_spec(hardware)
points = [(l, p) for l, p in points if layout_problem(build_graph(hf, mode).meta, hw, parse_layout(l), parse_workload(p)) is None]
def run():
    gc.collect(); t = time.thread_time()
    for l, p in points: simulate(hf, hardware, l, p)
    return time.thread_time() - t
def clear(names):
    for n in names:
        obj = eval(n)
        if hasattr(obj, "_caches"):
            for _, c in obj._caches.values(): c.clear()
        else: obj.clear()
sets = {"all": None, "none": [], "vc": ["vc._CACHES"], "step": ["st._STEP_CACHES", "st._MODEL_FLOPS"], "mem": ["mem._MEMO", "mem._LAYER_KINDS"],
        "cols": ["oc._COLUMNS"], "part": ["pa._STAGE_SPLITS"], "five": ["vc._CACHES", "st._STEP_CACHES", "st._MODEL_FLOPS", "mem._MEMO", "mem._LAYER_KINDS", "oc._COLUMNS", "pa._STAGE_SPLITS"], "vcmem": ["vc._CACHES", "mem._MEMO"]}
res = {k: [] for k in sets}
for rep in range(25):
    for k, names in sets.items():
        if names is None: clear_caches(); graph_and_counts(hf, mode)
        else: run(); clear(names)
        res[k].append(run())
n = len(points)
for k, v in res.items(): print(f"{k:5} {1e6*statistics.median(v)/n:7.1f} us/config")
