"""The `xla` stack's training kernels: each node's backward next to its forward, the update's chunked
vocabulary log-prob, the gradient accumulation and the optimizer step, as the maxtext backend runs them.

    python3 -m framework.backends.maxtext.benchmarks.xla_backward --out $OUT/xla_bwd \\
        --base sims/benchmarks/results/h100_2026-11-26_s10_xla2/microbench.json      # GPU, 2-3 minutes
    python -m framework.backends.maxtext.benchmarks.xla_backward --tiny --out /tmp/xla_bwd   # CPU check

For every training workload of the plan the `xla` graph is bound to it (mode train) and each node the
update runs is timed twice in xla_kernels' compiled loop: its forward (the same Bench the forward
calibration times) and forward + backward (`with_backward`: jax.vjp of the Bench with random output
cotangents, the gradient taken with respect to every floating input and weight, the forward's outputs
kept so XLA cannot drop it). Attention goes through Attention._packed (cuDNN in bf16 on GPU), as the
update's passes do. `sims.calibration.train_bench.derive_backward` turns the pairs into backward
measurements (backward = pair - forward, kept with the forward time: the table stores ratios).

The vocabulary head, one [batch, chunk] chunk as the update runs it (models/vocab_projection.py), comes from
benchmarks/xla_vocab.py: `lm_head` and `cross_entropy` records whose sums are the head's measured forward and
forward + backward (until session 24 the head was timed as it ran before session 16, under jax.checkpoint on
float32 logits: the shipped session-13 records); the simulator scales both by their FLOPs and bytes to the
step's rows. Once per model: `grad_accumulate` (the update's jax.tree.map(jnp.add) of float32 gradients, one
micro-batch) and `optimizer_step` (optax clip_by_global_norm + adamw on float32 master weights, the update's
optimizer), over the model's parameters. Remat is not timed here: the simulator adds the recompute
`minimal`/`full` run from the forward times (config.REMAT_WORKLOADS).

With --base (a forward calibration's microbench.json, same card) the table is refitted from the
forward measurements plus these: <hardware>_xla.json in --out.
"""

from __future__ import annotations

import argparse
import json
import time
from dataclasses import replace
from pathlib import Path

from sims import predict_op
from sims.builders import build_graph
from sims.calculator import OP_CLASS, bind_dims
from sims.calibration.fit import fit_table
from sims.calibration.table import save_table
from sims.calibration.train_bench import derive_backward, parameter_shapes
from sims.train_work import GRAD_ACCUMULATE_BYTES, TRAIN_BACKWARD_FACTOR, optimizer_bytes_per_param
from sims.workload import Layout, parse_workload

from framework.backends.maxtext.benchmarks.xla_calibrate import model_config, timing_fields, timing_session
from framework.backends.maxtext.benchmarks.xla_vocab import chunk_records
from framework.core.paths import CONF_DIR

STACK = "xla"
TRAINED = ("gemm", "attention", "norm", "elementwise", "embedding")


def train(batch: int, seq_len: int) -> dict:
    return {"mode": "train", "batch": batch, "seq_len": seq_len}


# Most needed first: the recipe's micro-batch (128 x 512) of Qwen2.5-0.5B, then 16 x 512 (the layouts'
# micro-batch), then a Qwen3-8B layer; chunk: the recipe's logprob_chunk_size. (name, conf, workloads, whether
# the update's accumulation and optimizer are timed: over the whole model's float32 parameters, so not for the
# 8B, whose two 8B-parameter trees alone do not fit an 80 GB card: 2026-11-27's run ran out of memory there.)
FULL = {
    "models": (("qwen2_5_0_5b", "qwen2_5_0_5b_instruct", (train(128, 512), train(16, 512)), True),
               ("qwen3_8b", "qwen3_8b", (train(16, 512),), False)),
    "chunk": 128, "dtype": "bfloat16", "param_dtype": "float32", "repeats": 5, "target_s": 3e-3,
    "budget_s": 150.0,
}
TINY = {
    "models": (("tiny_qwen2", "tiny_qwen2", (train(2, 32), train(1, 16)), True),),
    "chunk": 8, "dtype": "float32", "param_dtype": "float32", "repeats": 3, "target_s": 2e-4,
    "budget_s": float("inf"),
}


def with_backward(bench):
    """The bench's forward, then the vjp of all its floating inputs and shared arrays (random output
    cotangents, made once per argument set). Returns (outputs, gradients): the forward stays."""
    import jax
    import jax.numpy as jnp

    from framework.backends.maxtext.benchmarks.xla_kernels import Bench

    def split(args):
        leaves, tree = jax.tree.flatten(args)
        floating = [jnp.issubdtype(leaf.dtype, jnp.floating) for leaf in leaves]
        return leaves, tree, floating

    shared_count = len(bench.shared)

    def forward_backward(*args):  # (*inputs, cotangents, *shared): the shared arrays stay arguments
        split_at = len(args) - shared_count
        *inputs, cotangents = args[:split_at]
        leaves, tree, floating = split((tuple(inputs), tuple(args[split_at:])))

        def of_floats(*floats):
            it = iter(floats)
            merged = [next(it) if f else leaf for leaf, f in zip(leaves, floating)]
            ins, shared = jax.tree.unflatten(tree, merged)
            return bench.fn(*ins, *shared)

        outputs, vjp = jax.vjp(of_floats, *(leaf for leaf, f in zip(leaves, floating) if f))
        return outputs, vjp(cotangents)

    def make_args():
        args = bench.make_args()
        shapes = jax.eval_shape(lambda *a: bench.fn(*a, *bench.shared), *args)
        key = jax.random.key(len(jax.tree.leaves(shapes)))
        cotangents = jax.tree.map(lambda s: jax.random.normal(key, s.shape, s.dtype), shapes)
        return (*args, cotangents)

    alternative = with_backward(bench.alternative) if bench.alternative is not None else None
    return Bench(forward_backward, make_args, shared=bench.shared, alternative=alternative, form=bench.form)


def update_benches(shapes, param_dtype: str):
    """(grad_accumulate, optimizer_step) Benches over float parameters of `shapes`, as the update runs them."""
    import jax
    import jax.numpy as jnp
    import optax

    from framework.backends.maxtext.benchmarks.xla_kernels import Bench

    dtype = jnp.dtype(param_dtype)
    calls = iter(range(10**9))  # every tree its own random values

    def tree(scale: float) -> list:
        keys = jax.random.split(jax.random.key(next(calls)), len(shapes))
        return [scale * jax.random.normal(key, s, dtype) for key, s in zip(keys, shapes)]

    accumulate = Bench(lambda grads, step_grads: jax.tree.map(jnp.add, grads, step_grads),
                       lambda: (tree(1.0), tree(1.0)), carry=lambda args, out: (out, args[1]))
    optimizer = optax.chain(optax.clip_by_global_norm(1.0),
                            optax.adamw(1e-6, weight_decay=0.1, mask=lambda p: jax.tree.map(lambda x: x.ndim >= 2, p)))

    def step(params, state, grads):
        updates, state = optimizer.update(grads, state, params)
        return optax.apply_updates(params, updates), state

    def make_args():
        params = tree(0.02)
        return params, optimizer.init(params), tree(1e-3)

    return (accumulate, Bench(step, make_args, carry=lambda args, out: (*out, args[2])))


def measure(name: str, hf_config: dict, hardware: dict, plan: dict, workloads, timer, platform: str, log,
            deadline: float, update: bool = True) -> list[dict]:
    """Forward and forward + backward records of every trained node at every workload, the vocabulary
    chunk's, then the model's gradient accumulation and optimizer step (microbench.py's format)."""
    from framework.backends.maxtext.benchmarks.xla_kernels import XlaKernels

    dtype = "bf16" if plan["dtype"] == "bfloat16" else "fp32"
    kernels = XlaKernels(hf_config, plan["dtype"], platform)
    records, seen = [], set()

    def time_pair(bench, forward: dict, estimate_s: float) -> None:
        if time.perf_counter() > deadline:
            log(f"{forward['op']:<30} {forward['batch']}x{forward['seq_len']} skipped: time budget spent")
            return
        try:
            both = timer.time(with_backward(bench), 3 * forward["bytes"], (1 + TRAIN_BACKWARD_FACTOR) * estimate_s)
            if both.form:  # the forward in the form whose forward + backward was kept: one form per pair
                bench = bench if bench.form == both.form else bench.alternative
            fwd = replace(timer.time(replace(bench, alternative=None), forward["bytes"], estimate_s), form=both.form)
        except Exception as error:  # noqa: BLE001 - one kernel that fails to build must not lose the run
            log(f"{forward['op']:<30} FAILED: {type(error).__name__}: {str(error)[:300]}")
            return
        pair = {k: v for k, v in forward.items() if k not in ("op_class", "m", "n", "k", "own_op_only")}
        records.append({**forward, **timing_fields(fwd)})
        records.append({**pair, "benchmark": f"{forward['op']}_forward_backward", "backward_of": forward["op_class"],
                        **timing_fields(both)})
        log(f"{forward['op']:<30} {forward['batch']}x{forward['seq_len']:<6} forward {fwd.time_us:10.1f} us"
            f"  +backward {both.time_us:10.1f} us  ratio {(both.time_us - fwd.time_us) / fwd.time_us:5.2f}")

    for raw in workloads:
        workload = {**raw, "dtype": dtype}
        parsed = parse_workload(workload)
        graph = build_graph(hf_config, "train", STACK)
        dims = bind_dims(graph, Layout(), parsed)
        point = {"mode": "train", "batch": parsed.batch, "seq_len": parsed.query_len, "kv_len": parsed.kv_len,
                 "tokens": int(dims["tokens"])}
        for node in graph.nodes:
            if node.is_comm or OP_CLASS[node.op_type] not in TRAINED or node.name == "lm_head":
                continue
            work = predict_op(hf_config, hardware, workload, node.name, stack=STACK)
            key = (node.name, work["flops"], work["bytes"])
            bench = None if key in seen else kernels.bench(node, dims)
            if bench is None:
                continue
            seen.add(key)
            record = {"benchmark": node.name, "op": node.name, "op_class": work["op_class"], "dtype": dtype,
                      **point, "flops": work["flops"], "bytes": work["bytes"]}
            if node.op_type == "gemm":
                record.update(m=int(dims["tokens"]), n=node.weights[0][1], k=node.weights[0][0])
            time_pair(bench, record, work["time_s"])
        if time.perf_counter() < deadline and ("vocab", parsed.batch) not in seen:  # one chunk per batch
            seen.add(("vocab", parsed.batch))
            try:
                records += chunk_records(kernels, hf_config, hardware, parsed.batch, plan["chunk"], dtype, timer, log)
            except Exception as error:  # noqa: BLE001 - as time_pair: a head that fails to build keeps the rest
                log(f"lm_head/cross_entropy {parsed.batch}x{plan['chunk']} FAILED: {type(error).__name__}: {error}")
    return records + (update_records(name, hf_config, hardware, plan, timer, log) if update else [])


def update_records(name: str, hf_config: dict, hardware: dict, plan: dict, timer, log) -> list[dict]:
    """The gradient accumulation (per micro-batch) and the optimizer step over the model's parameters."""
    shapes = parameter_shapes(build_graph(hf_config, "train", STACK))
    params = sum(_numel(s) for s in shapes)
    dtype = "bf16" if plan["dtype"] == "bfloat16" else "fp32"
    accumulate, step = update_benches(shapes, plan["param_dtype"])
    rows = [(accumulate, {"benchmark": "grad_accumulate", "op": "grad_accumulate", "op_class": "elementwise",
                          "own_op_only": True, "flops": float(params), "bytes": float(params * GRAD_ACCUMULATE_BYTES)}),
            (step, {"benchmark": "optimizer_step", "op": "optimizer_step", "op_class": "optimizer",
                    "flops": 10.0 * params, "bytes": float(params * optimizer_bytes_per_param(dtype))})]
    records = []
    for bench, record in rows:
        estimate_s = record["bytes"] / (hardware["hbm_tb_s"] * 1e12)
        try:
            timing = timer.time(bench, record["bytes"], estimate_s)
        except Exception as error:  # noqa: BLE001 - keep the rest of the run
            log(f"{name} {record['op']:<24} FAILED: {type(error).__name__}: {str(error)[:300]}")
            continue
        records.append({**record, "dtype": dtype, "params": params, **timing_fields(timing)})
        log(f"{name} {record['op']:<24} {params / 1e6:8.1f} M params {timing.time_us:10.1f} us")
    return records


def _numel(shape) -> int:
    total = 1
    for dim in shape:
        total *= int(dim)
    return total


def refit(base: list[dict], train_records: list[dict], hardware: dict, source: str, path: Path):
    """The table fitted from the forward calibration's records plus the training ones and their backward."""
    derived = derive_backward(train_records)
    fitted = fit_table([*base, *(r for r in train_records if r.get("op_class")), *derived], hardware,
                       source=source, stack=STACK)
    save_table(fitted, path)
    return fitted, derived


def _model_batches(spec: str) -> tuple:
    """--models' CONF:B,B as a plan's model: the layers' kernels only (no accumulation or optimizer step). Checked
    before the timing starts: a misspelt model failed once the models before it were timed."""
    conf, _, batches = spec.partition(":")
    if not (CONF_DIR / "model" / f"{conf}.yaml").is_file() or not all(b.isdigit() and int(b) > 0
                                                                       for b in batches.split(",")):
        raise argparse.ArgumentTypeError(f"{spec!r}: valid: CONF:B,B, a conf/model name and micro-batches >= 1")
    return conf, conf, tuple(train(int(b), 512) for b in batches.split(",")), False


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder for the JSON files")
    parser.add_argument("--tiny", action="store_true", help="tiny model and shapes (a CPU check, seconds)")
    parser.add_argument("--hardware", default=None, help="conf/hardware name (default: from the device)")
    parser.add_argument("--base", default=None, help="a forward calibration's microbench.json: refit the table")
    parser.add_argument("--budget-s", type=float, default=None, help="seconds the timing may take (default: plan's)")
    parser.add_argument("--models", nargs="+", default=None, metavar="CONF:B,B", type=_model_batches,
                        help="time these conf/model names at these micro-batches of 512 tokens instead of the plan's")
    args = parser.parse_args(argv)
    started = time.perf_counter()

    def log(message: str) -> None:
        print(f"[{time.perf_counter() - started:6.1f} s] {message}", flush=True)

    plan = TINY if args.tiny else FULL
    if args.models:
        plan = {**plan, "models": tuple(args.models)}
    env, hardware, timer = timing_session(args.hardware, plan, log)
    budget = args.budget_s or plan["budget_s"]
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    records = []
    total, done = sum(len(w) for _, _, w, _ in plan["models"]), 0
    for name, conf_name, workloads, update in plan["models"]:
        log(f"training kernels: {name}")
        done += len(workloads)
        deadline = started + budget * done / total  # each model its workloads' share of the budget
        records += [{**r, "model": name} for r in measure(name, model_config(conf_name, None), hardware, plan,
                                                           workloads, timer, env["platform"], log, deadline, update)]
        # with the derived backward measurements: a refit input as it is; written per model (a hang keeps the rest)
        (out / "train_microbench.json").write_text(json.dumps(records + derive_backward(records), indent=1))
    report = {"environment": env, "hardware": hardware["name"], "plan": "tiny" if args.tiny else "full",
              "records": len(records), "derived_backward": derive_backward(records)}
    if args.base:
        base = json.loads(Path(args.base).read_text())
        source = (f"xla_calibrate forward ({args.base}) + xla_backward training kernels on {env['device']}, "
                  f"jax {env['jax']}, {env['date']}, timed in compiled fori_loops")
        fitted, _ = refit(base, records, hardware, source, out / f"{hardware['name']}_{STACK}.json")
        log(f"wrote {out / (hardware['name'] + '_' + STACK + '.json')} "
            f"({len(fitted.backward_measurements)} backward measurements)")
    report["seconds"] = time.perf_counter() - started
    (out / "train_report.json").write_text(json.dumps(report, indent=1))
    for m in report["derived_backward"]:
        print(f"{m['op']:<30} b={m['batch']:<4} s={m['seq_len']:<5} forward {m['forward_us']:10.1f} us"
              f"  backward {m['time_us']:10.1f} us  ratio {m['time_us'] / m['forward_us']:.2f}")
    log(f"done, wrote {out}")
    return report


if __name__ == "__main__":
    main()
