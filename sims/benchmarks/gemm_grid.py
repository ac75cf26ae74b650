"""Plain GEMMs on a grid of shapes, for a table whose GEMMs should not depend on the calibration models alone.

    python -m sims.benchmarks.gemm_grid --out $OUT/gemm_grid.json      # one GPU, about a minute
    python -m sims.benchmarks.gemm_grid --tiny --out /tmp/grid.json     # CPU check, seconds

A calibration run times the GEMMs of its models (Qwen2.5-0.5B, Qwen3-8B, Qwen3-30B-A3B) at their shapes
only, so another model's GEMM reads its efficiency off the nearest of those: Llama-3.1-8B's down projection
(k = 14,336) off Qwen3-8B's (k = 12,288), whose cuBLAS kernel runs at another fraction of the bandwidth.
This times y = F.linear(x, W), x [m, k] and W [n, k] in bfloat16 (what transformers' and plain torch's
nn.Linear run), for n and k on a grid of powers of two and 1.5 x powers of two and m on the calibration
workloads' row counts, as CUDA-graph replays like every calibration kernel. The sizes leave out the
accuracy runs' held-out shapes (3,584, 14,336, 18,944; their m values 16, 32, 256, 512, 2,048), so those
stay held out. The records are GEMM kernels without an `op` (sims/calibration/fit.py): they join the
table's `gemm_measurements` (but at a shape a model's node was timed at, `_gemm_shapes`) and the GEMM class
fit, and name no IR node. No shipped table takes them (docs/simulator.md, "A fifth held-out H200 run").
"""

from __future__ import annotations

import argparse
import json
import os
import random
from pathlib import Path

SIZES = (1024, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576)
ROWS = (1, 8, 64, 128, 1024, 4096, 16384)
MAX_FLOPS = 2**42  # the largest GEMM timed (about 6 ms on an H100): the rest of the grid runs in a minute
TINY_SIZES = (32, 64)
TINY_ROWS = (1, 8)


def shapes(sizes: tuple[int, ...], rows: tuple[int, ...]) -> list[tuple[int, int, int]]:
    """(m, n, k) of the grid, smallest work first, without those over MAX_FLOPS."""
    grid = [(m, n, k) for m in rows for n in sizes for k in sizes if 2 * m * n * k <= MAX_FLOPS]
    return sorted(grid, key=lambda s: (s[0] * s[1] * s[2], s))


def record(m: int, n: int, k: int, time_us: float, spread: float, mode: str) -> dict:
    """A GEMM kernel measurement as sims.calibration.fit reads it (bf16: 2 bytes an element)."""
    return {"benchmark": "gemm_grid", "op_class": "gemm", "dtype": "bf16", "m": m, "n": n, "k": k,
            "flops": 2.0 * m * n * k, "bytes": 2.0 * (m * k + n * k + m * n),
            "time_us": time_us, "spread": spread, "timing": mode}


def measure(device: str, grid: list[tuple[int, int, int]], repeats: int) -> list[dict]:
    import torch
    import torch.nn.functional as F

    from sims.calibration.timing import rotations, time_call

    out = []
    for m, n, k in grid:
        def args():
            return (torch.randn(m, k, device=device, dtype=torch.bfloat16),
                    torch.randn(n, k, device=device, dtype=torch.bfloat16))

        arg_sets = [args() for _ in range(rotations(2.0 * (m * k + n * k + m * n), device))]
        timing = time_call(F.linear, arg_sets, device, repeats=repeats)
        del arg_sets
        out.append(record(m, n, k, timing.time_us, timing.spread, timing.mode))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=os.path.join(os.environ.get("OUT", "."), "gemm_grid.json"))
    parser.add_argument("--tiny", action="store_true", help="tiny shapes on the CPU: checks the script in seconds")
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda, cpu with --tiny)")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--shuffle", type=int, default=None, metavar="SEED",
                        help="time the shapes in a random order (seeded), not smallest first")
    args = parser.parse_args()
    device = args.device or ("cpu" if args.tiny else "cuda")
    grid = shapes(TINY_SIZES, TINY_ROWS) if args.tiny else shapes(SIZES, ROWS)
    if args.shuffle is not None:  # big GEMMs one after another may time the card's clock under its power cap
        random.Random(args.shuffle).shuffle(grid)
    records = measure(device, grid, args.repeats)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(records, indent=1) + "\n")
    print(f"wrote {args.out} ({len(records)} GEMM shapes)")


if __name__ == "__main__":
    main()
