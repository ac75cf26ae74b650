# The garbage collections inside each sweep's first pass (the benchmark's single first pass, speed.measure, in its
# order) and their thread time. Usage: PYTHONPATH=TREE OPENBLAS_NUM_THREADS=1 python gc_first_pass.py
import gc, time, yaml
from sims.benchmarks import speed
from sims.benchmarks.speed import REPO, WORKLOADS
hardware = speed.read_hardware_file(REPO / "conf/hardware/h100.yaml"); hardware["efficiency_table"]=None; hardware["nodes"]=2
acc = {"on": False, "t": 0, "n": 0}; start = [0]
def cb(phase, info):
    if not acc["on"]: return
    if phase == "start": start[0] = time.thread_time_ns()
    else: acc["t"] += time.thread_time_ns() - start[0]; acc["n"] += 1
gc.callbacks.append(cb)
orig = speed.simulate_many
calls = [0]
def first_only(*a, **k):
    calls[0] += 1
    acc["on"] = calls[0] == 1
    try: return orig(*a, **k)
    finally: acc["on"] = False
speed.simulate_many = first_only
for model in speed.MODELS:
    hf = yaml.safe_load((REPO / f"conf/model/{model}.yaml").read_text())["hf_config"]
    for w in WORKLOADS:
        acc["t"] = acc["n"] = 0; calls[0] = 0
        first, _, _ = speed.measure(hf, hardware, w, 0.0)
        print(f"{model:16} {w['mode']:8} first pass {first*1e6:6.1f} us/cfg; gc in it: {acc['n']} collections, {acc['t']/1e3:6.1f} us")
