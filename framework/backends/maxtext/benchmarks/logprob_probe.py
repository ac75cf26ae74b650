"""Where a GRPO log-prob pass's time goes: the update's reference / old-log-prob forward timed alone, in parts.

    python -m framework.backends.maxtext.benchmarks.logprob_probe --model qwen2_5_1_5b_instruct --micro-batch 64
    python -m framework.backends.maxtext.benchmarks.logprob_probe --profile DIR   # + GPU time per kernel
    python -m framework.backends.maxtext.benchmarks.logprob_probe --tiny           # CPU check

The pass is `trainers/update.completion_log_probs` as `PolicyUpdate.log_probs` compiles it: the scanned layers over
prompt + completion, then the vocabulary projection and log-softmax over the completion's positions,
logprob_chunk_size at a time. Variants, each timed alternately in compiled calls (median of --steps after --warmup):
  full          the pass with float32 master weights (the recipe's grpo.param_dtype), every token real
  full_bf16     the same with the weights cast to bfloat16 first (what the pass would cost without the casts)
  full_padded   float32 weights, prompts left-padded to the bucket (lengths uniform over [P/4, P]) as rollouts are
  hidden        the layers alone (final-norm hidden states, no vocabulary projection), float32 weights
Each is printed beside the simulator's prediction of the same pass (sims, the xla stack, the card's shipped table:
the preflight's "forward" phase, and a prefill without the log-prob head for `hidden`).
"""

from __future__ import annotations

import json
import statistics
import time

from framework.backends.maxtext.benchmarks.decode_probe import hlo_sources, kernel_table
from framework.backends.maxtext.benchmarks.grpo_step import OPTIONS, model_config, random_model
from framework.backends.maxtext.benchmarks.shapes import parse_args
from framework.core.parallel import ParallelConfig
from framework.core.paths import load_conf

EXTRA = {**OPTIONS, "--profile": {"default": None, "help": "trace dir"},
         "--chunk": {"type": int, "default": 128, "help": "logprob_chunk_size"}}


def programs(model, args):
    """{variant: (jitted function, argument builder)} of the pass and its parts."""
    import functools

    import jax
    import jax.numpy as jnp
    import numpy as np

    from framework.backends.maxtext.models.rope import positions_from_mask
    from framework.backends.maxtext.models.transformer import Transformer
    from framework.backends.maxtext.trainers.update import completion_log_probs

    rows, prompt, new = args.micro_batch, args.prompt_tokens, args.new_tokens
    vocab = model.config.vocab_size
    rng = np.random.default_rng(0)
    ids = jnp.asarray(rng.integers(1, vocab, (rows, prompt + new)), jnp.int32)
    ones = jnp.ones(ids.shape, jnp.int32)
    lengths = rng.integers(max(1, prompt // 4), prompt + 1, rows)
    padded = jnp.asarray(np.arange(prompt + new)[None, :] >= (prompt - lengths)[:, None], jnp.int32)
    log_probs = jax.jit(functools.partial(completion_log_probs, model, completion_length=new, temperature=1.0,
                                          chunk_size=args.chunk))

    @jax.jit
    def hidden(params, input_ids, mask):
        out, _ = model.apply({"params": params}, input_ids, positions_from_mask(mask), mask,
                             method=Transformer.hidden_states)
        return out

    return {"full": (log_probs, lambda p, pb: (p, ids, ones)),
            "full_bf16": (log_probs, lambda p, pb: (pb, ids, ones)),
            "full_padded": (log_probs, lambda p, pb: (p, ids, padded)),
            "hidden": (hidden, lambda p, pb: (p, ids, ones))}


def predictions(args) -> dict:
    """The simulator's ms for each variant: the preflight's forward phase (scanned, log-prob head, float32 master
    weights; full_bf16 on bfloat16 weights) and the layers'."""
    from sims import simulate

    hf_config = load_conf("model", args.model)["hf_config"]
    hardware = load_conf("hardware", args.hardware)["hardware"]
    base = {"mode": "prefill", "batch": args.micro_batch, "seq_len": args.prompt_tokens + args.new_tokens,
            "dtype": "bf16", "scanned": True}
    head = {"loss_len": args.new_tokens, "logits_chunk": args.chunk}
    full = simulate(hf_config, hardware, {"tp": 1}, {**base, **head, "param_dtype": "fp32"}, stack="xla")
    full_bf16 = simulate(hf_config, hardware, {"tp": 1}, {**base, **head}, stack="xla")
    layers = simulate(hf_config, hardware, {"tp": 1}, {**base, "param_dtype": "fp32"}, stack="xla")
    rows = {row["name"]: round(1e3 * row["time_s"], 3) for row in full.rows}
    return {"full": 1e3 * full.latency_s, "full_bf16": 1e3 * full_bf16.latency_s,
            "hidden": 1e3 * (layers.latency_s - _row_s(layers, "lm_head")), "rows_ms": rows}


def _row_s(result, name: str) -> float:
    return sum(row["time_s"] for row in result.rows if row["name"] == name)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(__doc__.splitlines()[0], argv, EXTRA)
    import jax
    import jax.numpy as jnp

    from framework.backends.maxtext.sharding import build_mesh

    model, _, _, params = random_model(model_config(args),
                                       build_mesh(ParallelConfig(dp=1, fsdp=-1, tp=1, pp=1, ep=1, cp=1)))
    params_bf16 = jax.jit(lambda p: jax.tree.map(lambda x: x.astype(jnp.bfloat16), p))(params)
    variants = programs(model, args)
    times = {name: [] for name in variants}
    for _ in range(args.warmup + args.steps):  # alternated, so that drift slows all alike
        for name, (function, arguments) in variants.items():
            call_args = arguments(params, params_bf16)
            jax.block_until_ready(call_args)
            started = time.perf_counter()
            jax.block_until_ready(function(*call_args))
            times[name].append(time.perf_counter() - started)
    predicted = predictions(args) if not args.tiny else {}
    report = {"device": jax.devices()[0].device_kind, "model": args.model, "rows": args.micro_batch,
              "prompt_tokens": args.prompt_tokens, "new_tokens": args.new_tokens, "chunk": args.chunk,
              "ms": {name: 1e3 * statistics.median(t[args.warmup:]) for name, t in times.items()},
              "spread": {name: (max(t[args.warmup:]) - min(t[args.warmup:])) / statistics.median(t[args.warmup:])
                         for name, t in times.items()},
              "predicted_ms": {k: v for k, v in predicted.items() if k != "rows_ms"},
              "predicted_rows_ms": predicted.get("rows_ms", {})}
    if args.profile:
        function, arguments = variants["full"]
        call_args = arguments(params, params_bf16)
        with jax.profiler.trace(args.profile, create_perfetto_trace=True):
            for _ in range(2):
                jax.block_until_ready(function(*call_args))
        hlo = function.lower(*call_args).compile().as_text()
        report["kernels"] = kernel_table(args.profile, top=60, sources=hlo_sources(hlo))
    print(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
