"""The decode-attention kernel's sequence parts at decode shapes: GPU time per layer, against the path it replaced.

    python -m framework.backends.maxtext.benchmarks.decode_attention_probe             # Qwen2.5-0.5B heads, GPU
    python -m framework.backends.maxtext.benchmarks.decode_attention_probe --tiny      # CPU check (interpreted)

For each (rows, live slots) shape of Qwen2.5-0.5B's heads (rows' live slots from their left padding to the current
token, as the sampler lays them out), each setting attends and writes the new token's K/V: our kernel
(models/decode_attention.py) with the slots in 1, 2, 4 or 8 parts and in the parts `sequence_splits` picks ("auto"),
and the path before session 18: jax's `gqa` (split as the shared-prefix cascade splits it, prefix_cache.kernel_splits)
plus two cache writes. Timed as the xla calibration times kernels (xla_kernels.LoopTimer: many repetitions in one
compiled loop, enough argument sets to defeat the L2 cache, the cache carried and written in place). Prints one
JSON: us per call per setting and shape, and each setting's largest difference from parts=1.
"""

from __future__ import annotations

import argparse
import json
import time

from framework.backends.maxtext.models.decode_attention import CACHE_BLOCK, sequence_splits
from framework.backends.maxtext.models.prefix_cache import kernel_splits

# Qwen2.5-0.5B's heads; (rows, live slots) across the calibration's decode-attention grid
FULL = {"heads": 14, "kv_heads": 2, "head_dim": 64,
        "shapes": ((16, 2048), (8, 3072), (48, 3072), (16, 384), (128, 384), (48, 1280), (128, 1280))}
TINY = {"heads": 4, "kv_heads": 2, "head_dim": 16, "shapes": ((2, 200), (4, 96))}
SETTINGS = (1, 2, 4, 8, "auto", "gqa")  # parts=1 first: the others are compared with it


def bench(setting, shape: dict, rows: int, live_to: int):
    """(Bench, bytes the call reads) of one setting: the cache carried from repetition to repetition, written in
    place as the decode loop writes it."""
    import jax
    import jax.numpy as jnp
    from jax.experimental.pallas.ops.gpu.decode_attention import gqa

    from framework.backends.maxtext.benchmarks.xla_kernels import Bench
    from framework.backends.maxtext.models.decode_attention import decode_attention

    heads, kv_heads, dim = shape["heads"], shape["kv_heads"], shape["head_dim"]
    slots = -(-(live_to + 1) // CACHE_BLOCK) * CACHE_BLOCK
    dtype = jnp.float32 if jax.default_backend() != "gpu" else jnp.bfloat16
    seeds = iter(jax.random.split(jax.random.key(0), 1000))
    start = jax.random.randint(next(seeds), (rows,), 0, live_to // 3).astype(jnp.int32)  # left padding
    index = jnp.int32(live_to)

    def make_args():  # a fresh set: q, the cache's keys and values, the new token's k and v
        token = lambda heads_: jax.random.normal(next(seeds), (rows, 1, heads_, dim), dtype)  # noqa: E731
        cache = [jax.random.normal(next(seeds), (rows, kv_heads, slots, dim), dtype) for _ in range(2)]
        return (token(heads), *cache, token(kv_heads), token(kv_heads))

    def attend(q, cache_k, cache_v, k, v):
        if setting == "gqa":  # the cache written first, then attended up to and with the new token
            cache_k, cache_v = (jax.lax.dynamic_update_slice(buffer, entry.swapaxes(1, 2), (0, 0, index, 0))
                                for buffer, entry in ((cache_k, k), (cache_v, v)))
            out = gqa(q[:, 0], cache_k.swapaxes(1, 2), cache_v.swapaxes(1, 2), start, jnp.full((rows,), index + 1),
                      block_k=CACHE_BLOCK, k_splits=kernel_splits(slots), interpret=jax.default_backend() != "gpu")
            return out[:, None], cache_k, cache_v
        parts = None if setting == "auto" else setting
        return decode_attention(q, k, v, cache_k, cache_v, start, index, None, None, parts)

    live_bytes = 2 * rows * kv_heads * (live_to - float(start.mean())) * dim * jnp.dtype(dtype).itemsize
    return Bench(attend, make_args, carry=lambda args, out: (args[0], out[1], out[2], *args[3:])), live_bytes


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--budget-s", type=float, default=240.0, help="start no shape after this many seconds")
    args = parser.parse_args(argv)
    import jax
    import jax.numpy as jnp

    from framework.backends.maxtext.benchmarks.xla_kernels import LoopTimer

    shape = TINY if args.tiny else FULL
    cpu = jax.default_backend() == "cpu"
    timer = LoopTimer(cpu, repeats=3 if cpu else 7, target_s=1e-3 if cpu else 0.02)
    if not cpu:
        timer.warm_up()
    report = {"device": jax.devices()[0].device_kind, "heads": shape["heads"], "kv_heads": shape["kv_heads"],
              "head_dim": shape["head_dim"], "shapes": []}
    began = time.perf_counter()
    for rows, live_to in shape["shapes"]:
        entry = {"rows": rows, "live_to": live_to, "settings": {}}
        report["shapes"].append(entry)
        if time.perf_counter() - began > args.budget_s:
            entry["skipped"] = "budget"
            continue
        slots = -(-(live_to + 1) // CACHE_BLOCK) * CACHE_BLOCK
        entry["auto_parts"] = sequence_splits(rows * shape["kv_heads"], slots)
        reference = None
        for setting in SETTINGS:
            try:
                case, live_bytes = bench(setting, shape, rows, live_to)
                timing = timer.time(case, live_bytes, live_bytes / 4e12)
                out = jax.jit(case.fn)(*case.make_args())[0].astype(jnp.float32)
            except Exception as exc:  # a setting Triton refuses (registers, shared memory): recorded, the rest run
                entry["settings"][str(setting)] = {"error": str(exc).splitlines()[0][:200]}
                continue
            timed = {"us": round(timing.time_us, 2), "spread": round(timing.spread, 3)}
            reference = out if setting == 1 else reference
            if reference is not None:
                timed["max_abs_diff_vs_parts_1"] = float(jnp.max(jnp.abs(out - reference)))
            entry["settings"][str(setting)] = timed
        times = {name: s["us"] for name, s in entry["settings"].items() if "us" in s}
        entry["best"] = min(times, key=times.get) if times else None
    print(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
