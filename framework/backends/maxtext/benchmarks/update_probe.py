"""The GRPO update with and without a KL reference (grpo.beta), timed alternately, with the host's dispatch time.

    python -m framework.backends.maxtext.benchmarks.update_probe --model qwen2_5_1_5b_instruct --micro-batch 64
    python -m framework.backends.maxtext.benchmarks.update_probe --profile DIR   # + one beta-free update's kernels
    python -m framework.backends.maxtext.benchmarks.update_probe --tiny           # CPU check

`PolicyUpdate.start` / `run` as the trainer calls them, on random rollouts of prompts x generations rows of
prompt + new tokens (every token real): `beta0` without a reference, `beta` with grpo.beta 0.04 and a frozen copy
of the weights (one log-prob pass per micro-batch before the accumulation). `dispatch_ms` is how long `start`
held the host before it returned (what the trainer logs as update_dispatch_time_s); `ms` the whole update.
With --profile, one update without beta is traced (the training phase alone; kernels named by their source lines
from XLA's HLO dump; session 23's call B, at f91735b, traced the beta update): the GPU's busy time beside the wall time
says whether the devices idle while the host dispatches. --idle-s leaves the devices idle before each update, as a
rollout's memory-bound decode leaves them cooler than back-to-back updates (the card's clocks under a sustained load).
--zero-advantages adds `beta0_zero`: the same program on all-zero advantages, so every gradient is zero, as in a
recipe run on a random-init model (no reward); the card multiplies zeros at a higher clock under its power cap.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import statistics
import time

from framework.backends.maxtext.benchmarks.decode_probe import hlo_sources, kernel_table
from framework.backends.maxtext.benchmarks.grpo_step import OPTIONS, grpo_task, model_config, random_model
from framework.backends.maxtext.benchmarks.shapes import parse_args
from framework.core.parallel import ParallelConfig

BETA = 0.04


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(__doc__.splitlines()[0], argv, {**OPTIONS, "--profile": {"default": None, "help": "trace dir"},
                                                      "--idle-s": {"type": float, "default": 0.0,
                                                                   "help": "the devices idle this long before each "
                                                                           "update (a rollout's lighter load)"},
                                                      "--zero-advantages": {"action": "store_true",
                                                                            "help": "also time beta0 on all-zero "
                                                                                    "advantages (zero gradients)"}})
    if args.profile:  # every compiled program's HLO, so that the profile's kernels name their source lines
        os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                                   f" --xla_dump_to={args.profile}/hlo --xla_dump_hlo_as_text").strip()
    import jax
    import jax.numpy as jnp
    import numpy as np
    from flax import linen as nn

    from framework.backends.maxtext.sharding import DEFAULT_RULES, build_mesh
    from framework.backends.maxtext.trainers.update import PolicyUpdate, build_optimizer, learning_rate_schedule
    from framework.rl.advantages import compute_advantages

    mesh = build_mesh(ParallelConfig(dp=1, fsdp=-1, tp=1, pp=1, ep=1, cp=1))
    model, boxed, shardings, params = random_model(model_config(args), mesh)
    base = grpo_task(args)
    updates, states = {}, {}
    for name, beta in (("beta0", 0.0), ("beta", BETA)):
        task = dataclasses.replace(base, beta=beta)
        optimizer = build_optimizer(task.optimizer, learning_rate_schedule(task.optimizer, task.steps, 1))
        updates[name] = PolicyUpdate(model, task, optimizer, nn.unbox(boxed), shardings, mesh, DEFAULT_RULES)
        own = jax.tree.map(jnp.copy, params)
        states[name] = [own, updates[name].init_opt_state(own)]
    if args.zero_advantages:  # the program of beta0 on all-zero advantages (a random-init recipe's rewards)
        updates["beta0_zero"] = updates["beta0"]
        own = jax.tree.map(jnp.copy, params)
        states["beta0_zero"] = [own, updates["beta0"].init_opt_state(own)]
    ref_params = jax.tree.map(jnp.copy, params)
    rows, vocab = args.prompts * args.generations, model.config.vocab_size
    rng = np.random.default_rng(0)
    arrays = {"input_ids": rng.integers(1, vocab, (rows, args.prompt_tokens + args.new_tokens)).astype(np.int32),
              "attention_mask": np.ones((rows, args.prompt_tokens + args.new_tokens), np.int32),
              "completion_mask": np.ones((rows, args.new_tokens), np.float32),
              "advantages": compute_advantages(rng.random(rows).astype(np.float32), args.generations)}

    def one(name: str) -> tuple[float, float]:
        time.sleep(args.idle_s)
        started = time.perf_counter()
        batch = arrays | {"advantages": np.zeros(rows, np.float32)} if name == "beta0_zero" else arrays
        params_, opt_state, metrics = updates[name].start(*states[name], ref_params if name == "beta" else None,
                                                          batch)
        dispatched = time.perf_counter()
        metrics()
        jax.block_until_ready(params_)
        states[name] = [params_, opt_state]
        return time.perf_counter() - started, dispatched - started

    times = {name: [] for name in updates}
    for _ in range(args.warmup + args.steps):  # alternated, so that drift slows both alike
        for name in updates:
            times[name].append(one(name))
    timed = {name: t[args.warmup:] for name, t in times.items()}
    report = {"device": jax.devices()[0].device_kind, "model": args.model, "rows": rows,
              "micro_batch": args.micro_batch, "remat": args.remat, "idle_s": args.idle_s, "hardware": args.hardware,
              "generations": args.generations,
              "prompt_tokens": args.prompt_tokens, "new_tokens": args.new_tokens,
              "ms": {name: 1e3 * statistics.median(w for w, _ in t) for name, t in timed.items()},
              "dispatch_ms": {name: 1e3 * statistics.median(d for _, d in t) for name, t in timed.items()},
              "all_ms": {name: [round(1e3 * w, 1) for w, _ in t] for name, t in timed.items()}}
    if args.profile:
        with jax.profiler.trace(args.profile, create_perfetto_trace=True):
            report["profiled_ms"] = 1e3 * one("beta0")[0]
        programs = []
        for path in glob.glob(f"{args.profile}/hlo/*after_optimizations.txt"):
            with open(path) as dump:
                programs.append(hlo_sources(dump.read(), whole_op_name=True))
        report["kernels"] = kernel_table(args.profile, top=80, sources=merged_sources(programs))
    print(json.dumps(report, indent=1))
    return report


def merged_sources(programs: list[dict[str, str]]) -> dict[str, str]:
    """One {kernel name: source} over every compiled program's: XLA names fusions per program, so a name two
    programs give different sources (loop_multiply_fusion in the update and in a log-prob pass) says so
    rather than taking the last program's."""
    merged: dict[str, str] = {}
    for sources in programs:
        for name, source in sources.items():
            merged[name] = source if merged.get(name, source) == source else AMBIGUOUS
    return merged


AMBIGUOUS = "(several programs name a kernel so)"


if __name__ == "__main__":
    main()
