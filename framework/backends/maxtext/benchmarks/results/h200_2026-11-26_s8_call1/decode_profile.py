"""Probe: a kernel-level profile of one Sampler.generate (16 prompts x 8 samples, 256 + 256 tokens)."""
import collections, glob, gzip, json, os, sys, time
import jax, numpy as np
from framework.backends.maxtext.benchmarks.grpo_step import model_config, random_model
from framework.backends.maxtext.benchmarks.shapes import parse_args
from framework.backends.maxtext.sampler import Sampler, SamplingParams
from framework.backends.maxtext.sharding import build_mesh
from framework.core.parallel import ParallelConfig

args = parse_args("profile", sys.argv[1:], {"--remat": {"default": "none"}, "--attention": {"default": "auto"},
                                            "--tag": {"default": "profile"}})
config = model_config(args)
mesh = build_mesh(ParallelConfig(dp=1, fsdp=-1, tp=1, pp=1, ep=1, cp=1))
model, boxed, shardings, params = random_model(config, mesh)
sampler = Sampler(model, eos_token_ids=[config.vocab_size], pad_token_id=0, prompt_bucket=args.prompt_tokens)
sampling = SamplingParams(max_new_tokens=args.new_tokens, temperature=1.0, num_samples=args.generations)
ids = np.random.default_rng(0).integers(1, config.vocab_size, (args.prompts, args.prompt_tokens)).tolist()
for i in range(2):
    jax.block_until_ready(sampler.generate(params, ids, jax.random.key(i), sampling))
out_dir = f"/tmp/prof_{args.tag}"
t0 = time.perf_counter()
with jax.profiler.trace(out_dir, create_perfetto_trace=True):
    jax.block_until_ready(sampler.generate(params, ids, jax.random.key(5), sampling))
wall = time.perf_counter() - t0
path = glob.glob(f"{out_dir}/**/perfetto_trace.json.gz", recursive=True)[0]
trace = json.load(gzip.open(path))
events = trace["traceEvents"] if isinstance(trace, dict) else trace
names = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
by_pid = collections.defaultdict(lambda: collections.defaultdict(lambda: [0, 0.0]))
for e in events:
    if e.get("ph") == "X":
        row = by_pid[e["pid"]][e["name"][:90]]
        row[0] += 1
        row[1] += e.get("dur", 0.0)
report = {"tag": args.tag, "wall_s": wall, "processes": {}}
for pid, table in by_pid.items():
    total = sum(v[1] for v in table.values())
    top = sorted(table.items(), key=lambda kv: -kv[1][1])[:45]
    report["processes"][names.get(pid, str(pid))] = {"total_us": total, "events": sum(v[0] for v in table.values()),
                                                     "top": [[k, v[0], round(v[1], 1)] for k, v in top]}
print(json.dumps(report, indent=1))
