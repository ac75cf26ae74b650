"""The decode MLP block, XLA against the fused Pallas kernels (benchmarks/decode_mlp_kernels.py), per layer.

    python -m framework.backends.maxtext.benchmarks.decode_mlp_probe              # Qwen2.5-0.5B shapes, GPU
    python -m framework.backends.maxtext.benchmarks.decode_mlp_probe --grid full  # more block sizes
    python -m framework.backends.maxtext.benchmarks.decode_mlp_probe --tiny       # CPU check (interpreted)

At each row count one jitted function applies the block (RMSNorm -> gate/up -> silu * up -> down ->
+ residual) for `layers` different weight sets in sequence, python-unrolled as the decode step runs
its layers; it is called `calls` times per repeat, and a repeat's median over `repeats` (after a
warm-up) divided by calls x layers is a layer's microseconds. XLA's version is the model's math in jnp;
each Pallas configuration (norm_gate_up's blocks, then the down projection's variant, splits, blocks)
is checked against it: max |difference| after one layer and after all layers; first_call_s includes
the compile. Configurations starting after --budget-s (shared by the row counts) are skipped. One JSON on stdout.
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from framework.backends.maxtext.benchmarks.decode_mlp_kernels import down_residual, norm_gate_up

QWEN = {"width": 896, "features": 4864, "layers": 24, "rows": (128, 16), "dtype": "bfloat16", "calls": 20}
TINY = {"width": 128, "features": 256, "layers": 2, "rows": (16, 5), "dtype": "float32", "calls": 2}
EPS = 1e-6
GATE_UP_DEFAULT = {"block_m": 128, "block_n": 64, "block_k": 128, "num_warps": 4}
DOWN_DEFAULT = {"variant": "partials", "splits": 19, "block_m": 128, "block_n": 128, "block_k": 128, "num_warps": 4}
# Each entry changes the default of one kernel; the last config of a row count joins both kernels' best.
GATE_UP_GRID = {
    "small": [{}, {"block_n": 32}, {"num_warps": 8}, {"block_n": 128, "block_k": 64, "num_warps": 8},
              {"block_m": 64}],
    "full": [{}, {"block_n": 32}, {"num_warps": 8}, {"block_n": 128, "block_k": 64, "num_warps": 8},
             {"block_m": 64}, {"block_k": 64}, {"block_n": 32, "num_warps": 2}, {"block_n": 128, "num_warps": 8},
             {"num_stages": 3}, {"block_m": 64, "block_n": 32}],
}
DOWN_GRID = {
    "small": [{}, {"block_n": 64}, {"splits": 38}, {"splits": 8, "block_n": 64, "block_k": 32},
              {"variant": "atomic"}, {"variant": "atomic", "block_n": 64}, {"variant": "atomic", "splits": 38}],
    "full": [{}, {"block_n": 64}, {"splits": 38}, {"splits": 8, "block_n": 64, "block_k": 32},
             {"splits": 2}, {"splits": 4, "block_k": 64}, {"num_warps": 8}, {"block_n": 32, "splits": 38},
             {"variant": "atomic"}, {"variant": "atomic", "block_n": 64}, {"variant": "atomic", "splits": 38},
             {"variant": "atomic", "splits": 8, "block_n": 64, "block_k": 32}, {"variant": "atomic", "num_warps": 8}],
}
TINY_DOWN = {"splits": 2, "block_n": 64, "block_k": 64}  # F=256 has no 19 parts


def random_layers(shape: dict, seed: int = 0) -> list[dict]:
    rng = np.random.default_rng(seed)
    width, features, dtype = shape["width"], shape["features"], jnp.dtype(shape["dtype"])

    def normal(*dims, scale):
        return jnp.asarray(rng.normal(size=dims) * scale, dtype)

    return [{"scale": normal(width, scale=0.1) + 1, "gate": normal(width, features, scale=width ** -0.5),
             "up": normal(width, features, scale=width ** -0.5), "down": normal(features, width, scale=features ** -0.5)}
            for _ in range(shape["layers"])]


def xla_block(x, w):
    """The model's MLP block (transformer.RMSNorm, MLP, DecoderLayer's residual add) in jnp."""
    x32 = x.astype(jnp.float32)
    normed = w["scale"].astype(x.dtype) * (x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, -1, keepdims=True) + EPS)).astype(x.dtype)
    return x + (jax.nn.silu(normed @ w["gate"]) * (normed @ w["up"])) @ w["down"]


def pallas_block(x, w, gate_up: dict, down: dict):
    hidden = norm_gate_up(x, w["scale"], w["gate"], w["up"], EPS, **gate_up)
    return down_residual(hidden, w["down"], x, **down)


def layers_fn(block):
    def run(x, layers):
        for w in layers:  # unrolled, like the decode step's layers
            x = block(x, w)
        return x
    return jax.jit(run)


def time_us(fn, x, layers, calls: int, repeats: int) -> float:
    """A layer's microseconds: the median repeat of `calls` calls over calls x layers."""
    jax.block_until_ready(fn(x, layers))
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            out = fn(x, layers)
        jax.block_until_ready(out)
        times.append(time.perf_counter() - start)
    return statistics.median(times) / (calls * len(layers)) * 1e6


def fits(shape: dict, gate_up: dict, down: dict) -> bool:
    """Whether both kernels' blocks and splits divide the shape (the grids are written for Qwen's)."""
    width, features = shape["width"], shape["features"]
    part = features // down["splits"]
    return (features % gate_up["block_n"] == 0 and width % gate_up["block_k"] == 0 and width % down["block_n"] == 0
            and features % down["splits"] == 0 and part % down["block_k"] == 0)


def configs(grid: str, shape: dict, tiny: bool) -> list[tuple[dict, dict]]:
    """Each kernel's variations with the other at its default; those that don't divide the shape left out."""
    down_default = {**DOWN_DEFAULT, **(TINY_DOWN if tiny else {})}
    candidates = ([({**GATE_UP_DEFAULT, **g}, down_default) for g in GATE_UP_GRID[grid]]
                  + [(GATE_UP_DEFAULT, {**down_default, **d}) for d in DOWN_GRID[grid][1:]])
    unique = [c for i, c in enumerate(candidates) if c not in candidates[:i]]
    return [c for c in unique if fits(shape, *c)]


def measure(x, layers: list[dict], reference_one, reference_all, gate_up: dict, down: dict, calls: int,
            repeats: int, deadline: float) -> dict:
    entry = {"gate_up": gate_up, "down": down}
    if time.monotonic() > deadline:  # the GPU's time is shared: skip what doesn't fit --budget-s
        entry["error"] = "skipped: past --budget-s"
        return entry
    try:
        fn = layers_fn(functools.partial(pallas_block, gate_up=gate_up, down=down))
        one = pallas_block(x, layers[0], gate_up, down)
        entry["max_abs_diff_1_layer"] = float(jnp.max(jnp.abs(one.astype(jnp.float32) - reference_one.astype(jnp.float32))))
        start = time.perf_counter()
        every = jax.block_until_ready(fn(x, layers))
        entry["first_call_s"] = round(time.perf_counter() - start, 2)  # compile included
        entry["max_abs_diff_all_layers"] = float(jnp.max(jnp.abs(every.astype(jnp.float32) - reference_all.astype(jnp.float32))))
        entry["us"] = round(time_us(fn, x, layers, calls, repeats), 2)
    except Exception as error:  # a configuration Triton refuses: report it, time the rest
        entry["error"] = f"{type(error).__name__}: {str(error).splitlines()[0][:300]}"
    return entry


def probe_rows(rows: int, shape: dict, args, layers: list[dict]) -> dict:
    deadline = time.monotonic() + args.budget_s / len(shape["rows"])  # each row count its share
    x = jnp.asarray(np.random.default_rng(rows).normal(size=(rows, shape["width"])), shape["dtype"])
    xla = layers_fn(xla_block)
    reference = (jax.jit(xla_block)(x, layers[0]), xla(x, layers))
    report = {"xla_us": round(time_us(xla, x, layers, shape["calls"], args.repeats), 2)}
    candidates = configs(args.grid, shape, args.tiny)
    entries = [measure(x, layers, *reference, *c, shape["calls"], args.repeats, deadline) for c in candidates]
    timed = [e for e in entries if "us" in e]
    gate_ups = [e for e in timed if e["down"] == candidates[0][1]]
    downs = [e for e in timed if e["gate_up"] == GATE_UP_DEFAULT]
    if gate_ups and downs:  # both kernels' best together, unless already timed
        pair = (min(gate_ups, key=lambda e: e["us"])["gate_up"], min(downs, key=lambda e: e["us"])["down"])
        if pair not in [(e["gate_up"], e["down"]) for e in entries]:
            entries.append(measure(x, layers, *reference, *pair, shape["calls"], args.repeats, deadline))
    report["configs"] = entries
    report["max_abs_xla_output"] = float(jnp.max(jnp.abs(reference[1].astype(jnp.float32))))
    timed = [e for e in entries if "us" in e]
    if timed:
        report["best"] = min(timed, key=lambda e: e["us"])
        report["speedup_vs_xla"] = round(report["xla_us"] / report["best"]["us"], 3)
    return report


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="tiny shapes, interpreted kernels (a CPU check)")
    parser.add_argument("--grid", choices=("small", "full"), default="small", help="how many block configurations")
    parser.add_argument("--repeats", type=int, default=5, help="timed repeats (the median is reported)")
    parser.add_argument("--budget-s", type=float, default=170,
                        help="seconds, shared by the row counts: configurations starting later are skipped")
    args = parser.parse_args(argv)
    shape = TINY if args.tiny else QWEN
    layers = random_layers(shape)
    report = {"device": str(jax.devices()[0].device_kind), "shape": shape, "grid": args.grid,
              "rows": {rows: probe_rows(rows, shape, args, layers) for rows in shape["rows"]}}
    print(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
