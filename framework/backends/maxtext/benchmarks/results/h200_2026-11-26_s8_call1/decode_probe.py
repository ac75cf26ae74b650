"""Probe: where the rollout's time goes. Times Sampler.generate for several row counts, prints JSON;
counts kernels (fusions, custom calls) in the compiled while body. XLA_FLAGS set by the caller."""
import json, os, re, statistics, sys, time
import jax, jax.numpy as jnp, numpy as np
from framework.backends.maxtext.benchmarks.grpo_step import model_config, random_model
from framework.backends.maxtext.benchmarks.shapes import parse_args
from framework.backends.maxtext.sampler import Sampler, SamplingParams, _generate
from framework.backends.maxtext.sharding import build_mesh
from framework.core.parallel import ParallelConfig

args = parse_args("probe", sys.argv[1:], {"--remat": {"default": "none"}, "--attention": {"default": "auto"},
                                          "--tag": {"default": "default"}})
config = model_config(args)
mesh = build_mesh(ParallelConfig(dp=1, fsdp=-1, tp=1, pp=1, ep=1, cp=1))
model, boxed, shardings, params = random_model(config, mesh)
sampler = Sampler(model, eos_token_ids=[config.vocab_size], pad_token_id=0, prompt_bucket=args.prompt_tokens)
out = {"tag": args.tag, "xla_flags": os.environ.get("XLA_FLAGS", ""), "device": jax.devices()[0].device_kind}
for prompts in (args.prompts, 2):
    sampling = SamplingParams(max_new_tokens=args.new_tokens, temperature=1.0, num_samples=args.generations)
    rng = np.random.default_rng(0)
    ids = rng.integers(1, config.vocab_size, (prompts, args.prompt_tokens)).tolist()
    t0 = time.perf_counter(); jax.block_until_ready(sampler.generate(params, ids, jax.random.key(0), sampling))
    compile_s = time.perf_counter() - t0
    times = []
    for i in range(4):
        t0 = time.perf_counter()
        jax.block_until_ready(sampler.generate(params, ids, jax.random.key(i + 1), sampling))
        times.append(time.perf_counter() - t0)
    rows = prompts * args.generations
    s = statistics.median(times)
    out[f"rows{rows}"] = {"first_s": compile_s, "s": s, "tokens_per_s": rows * args.new_tokens / s,
                          "ms_per_token_step": 1e3 * s / args.new_tokens}
    if prompts == args.prompts:
        p_ids, p_mask = sampler.left_pad(ids)
        hlo = _generate.lower(sampler.model, params, p_ids, p_mask, jax.random.key(0), sampler._eos_array(),
                              np.int32(0), sampling=sampling).compile().as_text()
        open(f"/tmp/results/decode_{args.tag}.hlo.txt", "w").write(hlo)
        out["hlo_fusions"] = len(re.findall(r"= \S+ fusion\(", hlo))
        out["hlo_custom_calls"] = len(re.findall(r"custom-call\(", hlo))
        out["hlo_while"] = len(re.findall(r" while\(", hlo))
print(json.dumps(out, indent=1))
