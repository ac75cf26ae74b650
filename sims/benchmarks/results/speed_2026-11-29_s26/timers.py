# Thread-time timers around the named sims functions (every module binding of each patched) during each sweep's first
# pass, in the benchmark's order (every cache cleared before each model); medians over REPS (code warm after the
# first), and the first rep. Usage: PYTHONPATH=TREE OPENBLAS_NUM_THREADS=1 python timers.py REPS MODEL[,MODEL]
# NAME[,NAME...] (a wrapper costs about 0.5-1 us a call: the figures are upper bounds, for shares, not for sums)
import sys, time, statistics, yaml, functools, types
from sims.benchmarks import speed
from sims.benchmarks.speed import REPO, WORKLOADS
from sims.hardware import read_hardware_file
from sims.cache import clear_caches
import sims
mods = [m for n, m in sys.modules.items() if n.startswith("sims") and isinstance(m, types.ModuleType)]
hardware = read_hardware_file(REPO / "conf/hardware/h100.yaml"); hardware["efficiency_table"]=None; hardware["nodes"]=2
T, N = {}, {}
names = sys.argv[3].split(",")
for name in names:
    owner = [m for m in mods if getattr(m, name, None) is not None and getattr(getattr(m, name), "__module__", "") == m.__name__]
    f = getattr(owner[0], name)
    def g(*a, _f=f, _n=name, **k):
        t = time.thread_time_ns()
        try: return _f(*a, **k)
        finally: T[_n] = T.get(_n, 0) + time.thread_time_ns() - t; N[_n] = N.get(_n, 0) + 1
    for m in mods:
        if getattr(m, name, None) is f: setattr(m, name, g)
reps = int(sys.argv[1]); models = sys.argv[2].split(",")
res = {}
for rep in range(reps):
    for model in models:
        clear_caches()
        hf = yaml.safe_load((REPO / f"conf/model/{model}.yaml").read_text())["hf_config"]
        for w in WORKLOADS:
            T.clear(); N.clear()
            first, _, _ = speed.measure(hf, hardware, w, 0.0)
            res.setdefault((model, w["mode"]), []).append((first, dict(T), dict(N)))
for (m, mode), v in res.items():
    print(f"{m} {mode}: first pass median {1e6*statistics.median(x[0] for x in v):.1f} us/config (cold {1e6*v[0][0]:.1f})")
    for k in sorted(names, key=lambda k: -statistics.median(x[1].get(k,0) for x in v)):
        print(f"   {k:28} {statistics.median(x[1].get(k,0) for x in v)/1e3:8.1f} us  calls {v[-1][2].get(k,0):4}  (cold {v[0][1].get(k,0)/1e3:8.1f})")
