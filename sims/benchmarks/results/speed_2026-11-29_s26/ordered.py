# In one process: REPS times, every cache cleared, then each model's prefill, decode and train first passes in the
# benchmark's order (code warm after the first rep); the median us per configuration of each sweep.
import sys, time, gc, statistics, yaml
from sims.benchmarks import speed
from sims.benchmarks.speed import REPO, WORKLOADS
from sims.hardware import read_hardware_file
from sims.cache import clear_caches
import sims.api as api
hardware = read_hardware_file(REPO / "conf/hardware/h100.yaml"); hardware["efficiency_table"]=None; hardware["nodes"]=2
models = sys.argv[2:] or ["qwen3_8b"]
reps = int(sys.argv[1])
res = {}
for rep in range(reps):
    for model in models:
        clear_caches()
        hf = yaml.safe_load((REPO / f"conf/model/{model}.yaml").read_text())["hf_config"]
        for w in WORKLOADS:
            first, _, _ = speed.measure(hf, hardware, w, 0.0)
            res.setdefault((model, w["mode"]), []).append(first * 1e6)
for (m, mode), v in res.items():
    print(f"{m:16} {mode:8} median {statistics.median(v):6.1f} us/cfg  (cold {v[0]:6.1f})")
