# Timers (thread CPU time) around simulate_many's parts in the speed benchmark's own first passes, in its order.
# PYTHONPATH=$PWD OPENBLAS_NUM_THREADS=1 python sims/benchmarks/results/speed_2026-11-29_s24/phases.py [MODEL:MODE ...]
import sys, time, yaml
import sims.api as api, sims.vector_cost as vc, sims.op_columns as oc, sims.step as st, sims.memory as mem
from sims.benchmarks import speed
from sims.benchmarks.speed import REPO, MODELS, WORKLOADS
T = {}
def wrap(mod, name):
    f = getattr(mod, name)
    def g(*a, **k):
        t = time.thread_time(); r = f(*a, **k); T[name] = T.get(name, 0) + time.thread_time() - t; return r
    setattr(mod, name, g)
for m, names in ((api, ("cost_together","sum_stages_together","activations_together","_finish","finish_together","_prepare")),
                 (vc, ("_build_columns_x","_every_tp_arrays","_efficiency","_collectives","cost_bindings")),
                 (oc, ("_build_columns","_work_coefficients","_node_table","_element_counts")),
                 (st, ("estimate_step",)), (mem, ("estimate_memory",))):
    for n in names:
        if hasattr(m, n): wrap(m, n)
from sims.hardware import read_hardware_file
hardware = read_hardware_file(REPO / "conf/hardware/h100.yaml"); hardware["efficiency_table"]=None; hardware["nodes"]=2
only = sys.argv[1:]
for model in MODELS:
    hf = yaml.safe_load((REPO / f"conf/model/{model}.yaml").read_text())["hf_config"]
    for w in WORKLOADS:
        if only and f"{model}:{w['mode']}" not in only: continue
        T.clear()
        first, n, el = speed.measure(hf, hardware, w, 0.0)
        print(f"{model:16} {w['mode']:8} first {1e6*first:6.1f} us/cfg  ", "  ".join(f"{k}={1e3*v:.2f}" for k,v in T.items()))
