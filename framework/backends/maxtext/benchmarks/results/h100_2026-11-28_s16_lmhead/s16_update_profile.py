"""Session 16: GPU time per kernel of one GRPO update (after warm-up steps), with each kernel's HLO shape/op/line.
Run from a tree's root: python3 .../s16_update_profile.py --hardware h100 --micro-batch 128 --remat minimal OUT.json"""
import json, sys
import jax
from framework.backends.maxtext.benchmarks import grpo_step
from framework.backends.maxtext.benchmarks.decode_probe import hlo_sources, kernel_table
from framework.backends.maxtext.benchmarks.shapes import parse_args

out_path = sys.argv[-1]
args = parse_args("profile", sys.argv[1:-1], grpo_step.OPTIONS)
task, config, params, opt_state, sampler, update = grpo_step.build_components(args)
rng = jax.random.key(0)
for step in range(2):
    params, opt_state, timing, _ = grpo_step.run_step(task, sampler, update, params, opt_state, rng, step)
    print("step", step, timing, flush=True)
captured = {}
real_accumulate = update.accumulate
def capture(*a):
    captured.setdefault("args", a)
    return real_accumulate(*a)
update.accumulate = capture
real_run = update.run
def traced(*a, **k):
    with jax.profiler.trace("/tmp/update_trace", create_perfetto_trace=True):
        out = real_run(*a, **k); jax.block_until_ready(out)
    return out
update.run = traced
params, opt_state, timing, _ = grpo_step.run_step(task, sampler, update, params, opt_state, rng, 2)
print("profiled step", timing, flush=True)
hlo = real_accumulate.lower(*captured["args"]).compile().as_text()
table = kernel_table("/tmp/update_trace", top=60, sources=hlo_sources(hlo))
json.dump({"timing": timing, "kernels": {k: v for k, v in table.items() if "GPU" in k or "gpu" in k.lower()}},
          open(out_path, "w"), indent=0)
for name, t in table.items():
    if "GPU" in name or "gpu" in name.lower():
        print(name, round(t["total_us"]), "us", t["events"], "events")
        for row in t["top"][:40]:
            print("  ", row)
