"""Inclusive thread time per function during first passes (25 passes, timers included): PYTHONPATH=. python sections.py MODEL MODE"""
import sys, time, statistics
sys.argv = sys.argv[:3] + ["1"]
exec(open(__import__("os").path.join(__import__("os").path.dirname(__file__), "prof.py")).read().replace('if "--prof" in sys.argv:', 'if False:'))
import sims.vector_cost as vc, sims.step as st, sims.memory as mem, sims.op_columns as oc, sims.partition as pa, sims.api as api
totals = {}
def wrap(mod, name):
    f = getattr(mod, name)
    def timed(*a, **k):
        t = time.thread_time_ns(); r = f(*a, **k); totals[name] = totals.get(name, 0) + time.thread_time_ns() - t; return r
    setattr(mod, name, timed)
for mod, names in ((oc, ["_build_columns", "_work_coefficients"]), (vc, ["_efficiency", "_build_plan", "_collectives"]),
                   (st, ["_cost_stages", "_accumulate_rows", "_training_update_rows", "_loss_row", "_count_model_flops", "_stage_weights", "estimate_step"]),
                   (mem, ["_count_stage_params", "_training_activation_bytes", "_training_state_bytes", "estimate_memory", "_inference_activation_bytes", "_kv_cache_bytes"]),
                   (pa, ["_split_stages"]), (api, ["estimate_step", "estimate_memory"])):
    for n in names:
        if hasattr(mod, n): wrap(mod, n)
orig = vc.Plan.cost
def cost(self, ctx):
    t = time.thread_time_ns(); r = orig(self, ctx); totals["Plan.cost"] = totals.get("Plan.cost", 0) + time.thread_time_ns() - t; return r
vc.Plan.cost = cost
reps = 20; tot = 0
for r in range(reps):
    clear_caches(); graph_and_counts(hf, mode); tot += run()
n = len(points) * reps
print(f"total {1e6*tot/n:.1f} us/config (timers included)")
for k, v in sorted(totals.items(), key=lambda kv: -kv[1]): print(f"{k:28} {v/1e3/n:6.1f} us/config")
