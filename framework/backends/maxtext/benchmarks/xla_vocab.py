"""The `xla` stack's vocabulary head as the GRPO update and log-prob passes run it: models/vocab_projection.py.

    python3 -m framework.backends.maxtext.benchmarks.xla_vocab --out $OUT/vocab     # GPU, 2-4 minutes
    python -m framework.backends.maxtext.benchmarks.xla_vocab --tiny --out /tmp/vocab   # CPU check, seconds

`completion_log_probs` projects `chunk` completion positions of every row at a time through `target_log_probs`:
forward, the logits GEMM then two reductions over them (the max; the exponentials' sum with the entropy's) and the
target's logit; backward, the logits recomputed, d logits written in one pass, then d hidden and d kernel. The
simulator holds this as two rows: `lm_head` (a GEMM) and the log-softmax over the vocabulary (`cross_entropy`;
the log-prob pass's `log_probs` row reads its forward). Four timings per [batch, chunk] chunk, each in
xla_kernels' compiled loop: the GEMM alone (`jnp.dot` in the compute dtype), the GEMM with its jax.vjp (two GEMMs),
and the update's own head (trainers/update.chunked_log_probs over two chunks, per chunk) alone and with its jax.vjp:
over one chunk XLA would share the forward's logits GEMM with the backward's recompute, which the update's
separate forward and backward chunk loops do not. The records the table takes (microbench.py's format):
  lm_head                        the GEMM alone
  lm_head_forward_backward       the GEMM's vjp plus one GEMM more: the backward's recompute of the logits
  cross_entropy                  the head less the GEMM alone
  cross_entropy_forward_backward the head's vjp less lm_head_forward_backward
so that the two rows add up to the measured head, forward and forward + backward. The weights are in the compute
dtype (the layers' calibration does the same; a float32 master copy is cast per chunk, not counted here). The
table refitted with these in place of session 13's chunk records (the pre-session-16 head under jax.checkpoint on
float32 logits): sims/calibration/tables/refit.yaml.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from sims import predict_op
from sims.train_work import loss_work

STACK = "xla"
CHUNKS = 2  # chunks per timed head: the forward's and the backward's chunk loops stay apart, as in the update
# (conf/model, micro-batch rows): the recipes' micro-batches (0.5B 128, 1.5B 64, Qwen3-8B 16) and smaller ones,
# so the curves span the rows the layouts' sweeps use; Llama-3.2-1B: another vocabulary and hidden size.
FULL = {"models": (("qwen2_5_0_5b_instruct", (128, 64, 32, 16)), ("qwen2_5_1_5b_instruct", (64, 32, 16)),
                   ("llama3_2_1b", (64, 16)), ("qwen3_8b", (16, 8))),
        "chunk": 128, "dtype": "bfloat16", "repeats": 5, "target_s": 3e-3}
TINY = {"models": (("tiny_qwen2", (2, 1)),), "chunk": 8, "dtype": "float32", "repeats": 3, "target_s": 2e-4}


def head_benches(kernels, b: int, chunk: int) -> dict:
    """{name: Bench}: the GEMM of one [b, chunk] chunk alone and with its vjp; the update's chunked head
    (trainers/update.chunked_log_probs) over CHUNKS chunks alone and with its vjp."""
    import jax
    import jax.numpy as jnp

    from framework.backends.maxtext.benchmarks.xla_backward import with_backward
    from framework.backends.maxtext.benchmarks.xla_kernels import Bench
    from framework.backends.maxtext.models.vocab_projection import head_kernel
    from framework.backends.maxtext.trainers.update import chunked_log_probs

    c = kernels.config
    head = "embed_tokens" if c.tie_word_embeddings else "lm_head"

    def weights():  # the parameter as the model holds it (the tied embedding [V, H]); head_kernel transposes it
        return kernels.fresh({head: kernels.params[head]})

    def project(x, params):
        return jnp.dot(x, head_kernel(c, params).astype(x.dtype))

    def log_probs(x, params, targets):
        return chunked_log_probs(x, head_kernel(c, params), targets, 1.0, chunk, lambda logits: logits)

    def head_args():
        targets = jax.random.randint(kernels._split(), (b, CHUNKS * chunk), 0, c.vocab_size)
        return kernels.randn(b, CHUNKS * chunk, c.hidden_size), weights(), targets

    gemm = Bench(project, lambda: (kernels.randn(b, chunk, c.hidden_size), weights()))
    heads = Bench(log_probs, head_args)
    return {"gemm": gemm, "gemm_vjp": with_backward(gemm), "head": heads, "head_vjp": with_backward(heads)}


def chunk_records(kernels, hf_config: dict, hardware: dict, b: int, chunk: int, dtype: str, timer, log) -> list:
    """The four records of one chunk (module docstring), each with the timings it came from."""
    benches = head_benches(kernels, b, chunk)
    rows, vocab, hidden = b * chunk, kernels.config.vocab_size, kernels.config.hidden_size
    point = {"mode": "train", "batch": b, "seq_len": chunk, "kv_len": chunk, "tokens": rows, "dtype": dtype}
    work = predict_op(hf_config, hardware, {"mode": "train", "batch": b, "seq_len": chunk, "dtype": dtype},
                      "lm_head", stack=STACK)
    flops, nbytes = loss_work(rows, vocab, 1, 4 if dtype == "fp32" else 2)
    gemm_s, loss_s = work["time_s"], nbytes / (hardware["hbm_tb_s"] * 1e12)
    estimates = {"gemm": gemm_s, "gemm_vjp": 3 * gemm_s, "head": gemm_s + loss_s, "head_vjp": 4 * gemm_s + 3 * loss_s}
    touched = {"gemm": work["bytes"], "gemm_vjp": 3 * work["bytes"], "head": work["bytes"] + nbytes,
               "head_vjp": 4 * work["bytes"] + 3 * nbytes}
    per_chunk = {"gemm": 1, "gemm_vjp": 1, "head": CHUNKS, "head_vjp": CHUNKS}  # the head's times: per chunk
    us = {name: timer.time(bench, per_chunk[name] * touched[name], per_chunk[name] * estimates[name]).time_us
          / per_chunk[name] for name, bench in benches.items()}
    parts = {"timing": "xla_fori_loop", "timed_us": us}
    head = {**point, "op": "lm_head", "op_class": "gemm", "flops": work["flops"], "bytes": work["bytes"],
            "m": rows, "n": vocab, "k": hidden}
    loss = {**point, "op": "cross_entropy", "op_class": "elementwise", "own_op_only": True, "flops": flops,
            "bytes": nbytes}
    head_both = us["gemm_vjp"] + us["gemm"]
    records = [
        {**head, "benchmark": "lm_head", "time_us": us["gemm"], **parts},
        {**_pair(head), "benchmark": "lm_head_forward_backward", "time_us": head_both, **parts,
         "derived": "the GEMM's vjp + the GEMM (the backward recomputes the logits)"},
        {**loss, "benchmark": "cross_entropy", "time_us": us["head"] - us["gemm"], **parts,
         "derived": "the chunked head - the GEMM"},
        {**_pair(loss), "benchmark": "cross_entropy_forward_backward", "time_us": us["head_vjp"] - head_both,
         **parts, "derived": "the chunked head's vjp - lm_head_forward_backward"},
    ]
    log(f"{hf_config.get('model_type', '?'):<8} {b:>4} x {chunk}: gemm {us['gemm']:9.1f}  vjp {us['gemm_vjp']:9.1f}  "
        f"head {us['head']:9.1f}  vjp {us['head_vjp']:9.1f} us  -> log-softmax {records[2]['time_us']:8.1f}, "
        f"its backward {records[3]['time_us'] - records[2]['time_us']:8.1f} us")
    if min(records[2]["time_us"], records[3]["time_us"] - records[2]["time_us"]) <= 0:
        # the head timed at or below its GEMMs (session 24 call A: XLA shared the recompute over one chunk): no
        # log-softmax to record; a clamped 0 would enter the table as a measurement
        log(f"{b} x {chunk}: the head not above its GEMMs' time: its log-softmax records left out")
        records = records[:2]
    return records


def _pair(forward: dict) -> dict:
    """A forward record's fields for its forward + backward record (derive_backward pairs them)."""
    drop = ("op_class", "m", "n", "k", "own_op_only")
    return {**{k: v for k, v in forward.items() if k not in drop}, "backward_of": forward["op_class"]}


def main(argv: list[str] | None = None) -> list[dict]:
    from framework.backends.maxtext.benchmarks.xla_calibrate import model_config, timing_session
    from framework.backends.maxtext.benchmarks.xla_kernels import XlaKernels
    from sims.calibration.train_bench import derive_backward

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for vocab_microbench.json")
    parser.add_argument("--tiny", action="store_true", help="tiny model and shapes (a CPU check, seconds)")
    parser.add_argument("--hardware", default=None, help="conf/hardware name (default: from the device)")
    args = parser.parse_args(argv)
    started = time.perf_counter()

    def log(message: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f} s] {message}", flush=True)

    plan = TINY if args.tiny else FULL
    env, hardware, timer = timing_session(args.hardware, plan, log)
    dtype = "bf16" if plan["dtype"] == "bfloat16" else "fp32"
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    records = []
    for name, batches in plan["models"]:
        hf_config = model_config(name, 1)
        kernels = XlaKernels(hf_config, plan["dtype"], env["platform"])
        for b in batches:
            records += [{**r, "model": name} for r in chunk_records(kernels, hf_config, hardware, b, plan["chunk"],
                                                                     dtype, timer, log)]
        (out / "vocab_microbench.json").write_text(json.dumps(records + derive_backward(records), indent=1))
    (out / "vocab_report.json").write_text(json.dumps({"environment": env, "hardware": hardware["name"],
                                                       "plan": "tiny" if args.tiny else "full",
                                                       "seconds": time.perf_counter() - started}, indent=1))
    log(f"done, wrote {out}")
    return records


if __name__ == "__main__":
    main()
