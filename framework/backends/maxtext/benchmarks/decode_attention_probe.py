"""The Pallas decode-attention kernel's settings at a rollout's shapes: GPU time per layer for each setting.

    python -m framework.backends.maxtext.benchmarks.decode_attention_probe             # Qwen2.5-0.5B shapes, GPU
    python -m framework.backends.maxtext.benchmarks.decode_attention_probe --tiny      # CPU check (interpreted)

Until session 18 models/decode_attention.py called jax's `gqa` with block_k = CACHE_BLOCK, k_splits =
kernel_splits(slots) and jax's default warps and stages (the shared-prefix cascade, models/prefix_cache.py, still
does; a plain decode step now runs our own kernel, docs/benchmarks.md "Session 18"). Here that call, on 24 layers'
different caches (as a decode step reads them: rows' live slots from their left padding to the current token),
is timed for a grid of those settings; the first entry is the cascade's setting. Prints one JSON: us per layer per setting, the fastest, and the
largest difference from the current setting's output.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import time

from framework.backends.maxtext.models.decode_attention import CACHE_BLOCK
from framework.backends.maxtext.models.prefix_cache import kernel_splits

LAYERS = 24
FULL = {"rows": 128, "heads": 14, "kv_heads": 2, "head_dim": 64, "slots": 512, "live_to": 384}
TINY = {"rows": 4, "heads": 4, "kv_heads": 2, "head_dim": 16, "slots": 128, "live_to": 96}
GRID = {"block_k": (32, 64, 128), "k_splits": (1, 2, 4, 8), "num_warps": (2, 4, 8), "num_stages": (1, 2)}


def settings(slots: int, tiny: bool) -> list[dict]:
    current = {"block_k": CACHE_BLOCK, "k_splits": kernel_splits(slots), "num_warps": None, "num_stages": 2}
    if tiny:
        return [current, {**current, "k_splits": 1}]
    grid = [dict(zip(GRID, values)) for values in itertools.product(*GRID.values())]
    return [current] + [s for s in grid if slots % (s["block_k"] * s["k_splits"]) == 0]


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--calls", type=int, default=20, help="timed calls per repeat")
    parser.add_argument("--budget-s", type=float, default=240.0, help="start no setting after this many seconds")
    args = parser.parse_args(argv)
    import jax
    import jax.numpy as jnp
    from jax.experimental.pallas.ops.gpu.decode_attention import gqa

    shape = TINY if args.tiny else FULL
    rows, heads, kv_heads, dim, slots = (shape[k] for k in ("rows", "heads", "kv_heads", "head_dim", "slots"))
    dtype = jnp.float32 if args.tiny else jnp.bfloat16
    keys = jax.random.split(jax.random.key(0), 3 * LAYERS + 1)
    q = [jax.random.normal(keys[i], (rows, heads, dim), dtype) for i in range(LAYERS)]
    # The cache layout [rows, KV heads, slots, head_dim]; gqa's own swap cancels the one below, as in the model.
    k = [jax.random.normal(keys[LAYERS + i], (rows, kv_heads, slots, dim), dtype) for i in range(LAYERS)]
    v = [jax.random.normal(keys[2 * LAYERS + i], (rows, kv_heads, slots, dim), dtype) for i in range(LAYERS)]
    # Left padding of 0..half the prompt bucket, live up to the current token (the sampler's layout).
    start = jax.random.randint(keys[-1], (rows,), 0, shape["live_to"] // 3).astype(jnp.int32)
    stop = jnp.full((rows,), shape["live_to"], jnp.int32)
    interpret = jax.default_backend() != "gpu"

    def layers(setting: dict):
        @jax.jit
        def run(q, k, v):
            return [gqa(q[i], k[i].swapaxes(1, 2), v[i].swapaxes(1, 2), start, stop, interpret=interpret, **setting)
                    for i in range(LAYERS)]
        return run

    report = {"device": jax.devices()[0].device_kind, "shape": shape, "layers": LAYERS, "settings": []}
    began, reference = time.perf_counter(), None
    for setting in settings(slots, args.tiny):
        if time.perf_counter() - began > args.budget_s:
            report["settings"].append({**setting, "skipped": "budget"})
            continue
        try:
            run = layers(setting)
            compiled = time.perf_counter()
            out = jax.block_until_ready(run(q, k, v))
            first_s = time.perf_counter() - compiled
            repeats = []
            for _ in range(5):
                t0 = time.perf_counter()
                for _ in range(args.calls):
                    out = run(q, k, v)
                jax.block_until_ready(out)
                repeats.append((time.perf_counter() - t0) / args.calls / LAYERS * 1e6)
        except Exception as exc:  # a setting Triton refuses (registers, shared memory): recorded, the rest run
            report["settings"].append({**setting, "error": str(exc).splitlines()[0][:200]})
            continue
        reference = reference or out
        diff = max(float(jnp.max(jnp.abs(a.astype(jnp.float32) - b.astype(jnp.float32)))) for a, b in zip(out, reference))
        report["settings"].append({**setting, "us_per_layer": round(statistics.median(repeats), 2),
                                   "first_call_s": round(first_s, 2), "max_abs_diff_vs_current": diff})
    timed = [s for s in report["settings"] if "us_per_layer" in s]
    report["current"] = timed[0] if timed else None
    report["best"] = min(timed, key=lambda s: s["us_per_layer"]) if timed else None
    print(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
