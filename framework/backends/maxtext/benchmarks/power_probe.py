"""A GEMM's time in short bursts and under a sustained load, on random and on all-zero operands.

    python -m framework.backends.maxtext.benchmarks.power_probe            # 1.5B gate/up shape, GPU
    python -m framework.backends.maxtext.benchmarks.power_probe --tiny     # CPU check

Why: an H200 holds its 700 W power cap under a sustained GEMM load by lowering the SM clock (session 23:
1.5 GHz in back-to-back GRPO updates, 1.9-2.0 GHz in the recipe's updates on all-zero gradients). A burst is
`--burst` GEMMs dispatched back to back after `--rest-s` idle (as a calibration times one kernel); the sustained
run is `--sustained-s` of them, its per-GEMM time read per window of `--window` GEMMs, so the decay with time shows.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="small shapes (a CPU check)")
    parser.add_argument("--shape", default="32768,1536,17920", help="M,K,N of the bfloat16 GEMM")
    parser.add_argument("--burst", type=int, default=5)
    parser.add_argument("--bursts", type=int, default=8)
    parser.add_argument("--rest-s", type=float, default=1.0)
    parser.add_argument("--sustained-s", type=float, default=4.0)
    parser.add_argument("--window", type=int, default=20)
    args = parser.parse_args(argv)
    if args.tiny:
        args.shape, args.bursts, args.rest_s, args.sustained_s, args.window = "64,32,48", 2, 0.01, 0.05, 5
    return args


def main(argv: list[str] | None = None) -> dict:
    args = parse(argv)
    import jax
    import jax.numpy as jnp

    m, k, n = (int(v) for v in args.shape.split(","))
    gemm = jax.jit(lambda x, w: x @ w)
    keys = jax.random.split(jax.random.key(0), 2)
    operands = {"random": (jax.random.normal(keys[0], (m, k), jnp.bfloat16),
                           jax.random.normal(keys[1], (k, n), jnp.bfloat16)),
                "zeros": (jnp.zeros((m, k), jnp.bfloat16), jnp.zeros((k, n), jnp.bfloat16))}
    report = {"device": jax.devices()[0].device_kind, "shape_mkn": [m, k, n], "tflop_per_gemm": 2 * m * k * n / 1e12,
              "burst": args.burst, "rest_s": args.rest_s, "window": args.window, "ms": {}, "sustained_ms": {}}
    for name, (x, w) in operands.items():
        jax.block_until_ready(gemm(x, w))  # compiled
        bursts = []
        for _ in range(args.bursts):
            time.sleep(args.rest_s)
            started = time.perf_counter()
            jax.block_until_ready([gemm(x, w) for _ in range(args.burst)])
            bursts.append((time.perf_counter() - started) / args.burst)
        report["ms"][f"{name}_burst"] = 1e3 * statistics.median(bursts)
        time.sleep(args.rest_s)
        windows, started = [], time.perf_counter()
        while time.perf_counter() - started < args.sustained_s:
            window_start = time.perf_counter()
            jax.block_until_ready([gemm(x, w) for _ in range(args.window)])
            windows.append(round(1e3 * (time.perf_counter() - window_start) / args.window, 4))
        report["sustained_ms"][name] = windows
        last_second = windows[-max(1, int(len(windows) / args.sustained_s)):]
        report["ms"][f"{name}_sustained_last_second"] = statistics.median(last_second)
    print(json.dumps(report, indent=1))
    return report


if __name__ == "__main__":
    main()
