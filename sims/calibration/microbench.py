"""Measure kernels with torch on this machine's device and write an efficiency table.

    python -m sims.calibration.microbench --hardware conf/hardware/h100.yaml --out tables/h100.json
    python -m sims.calibration.microbench --hardware conf/hardware/cpu.yaml --device cpu --dtype fp32 \
        --quick --out cpu.json

Measures GEMMs over a grid of shapes (kept per shape for interpolation), SwiGLU (elementwise),
RMSNorm (norm), causal SDPA attention and embedding lookups, then fits the table with
sims.calibration.fit. Point a hardware file's `efficiency_table` at the output. fp8 GEMMs and
collectives are not measured here (collective measurements can be added to the list passed to
fit_table: see its docstring).
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from sims.calibration.fit import fit_table
from sims.calibration.table import save_table

TORCH_DTYPES = {"bf16": "bfloat16", "fp32": "float32"}
ELEMENT_BYTES = {"bf16": 2, "fp32": 4}


def gemm_shapes(quick: bool) -> list[tuple[int, int, int]]:
    """(m, n, k): decode-sized to prefill-sized token counts over typical projection widths."""
    if quick:
        return [(m, n, k) for m in (1, 16, 128) for n, k in ((256, 256), (512, 256))]
    widths = ((4096, 4096), (4096, 14336), (14336, 4096), (1024, 4096), (8192, 8192))
    return [(m, n, k) for m in (1, 8, 32, 128, 512, 2048, 8192) for n, k in widths]


def run_microbench(device: str = "cuda", dtype: str = "bf16", quick: bool = False) -> list[dict]:
    import torch
    import torch.nn.functional as F

    if dtype not in TORCH_DTYPES:
        raise ValueError(f"dtype {dtype!r} is not measured here; valid: {', '.join(TORCH_DTYPES)}")
    tdtype, size = getattr(torch, TORCH_DTYPES[dtype]), ELEMENT_BYTES[dtype]

    def sync() -> None:
        if device.startswith("cuda"):
            torch.cuda.synchronize()

    def timed_us(fn: Callable, *args, **kwargs) -> float:
        """Best mean over a few batches of calls (as timeit does): the least disturbed estimate."""
        repeat, batches = (5, 3) if quick else (20, 5)
        for _ in range(3):
            fn(*args, **kwargs)
        best = float("inf")
        for _ in range(batches):
            sync()
            start = time.perf_counter()
            for _ in range(repeat):
                fn(*args, **kwargs)
            sync()
            best = min(best, (time.perf_counter() - start) / repeat)
        return best * 1e6

    def tensor(*shape: int):
        return torch.randn(*shape, device=device, dtype=tdtype)

    def record(op_class: str, flops: float, elements: float, time_us: float, **shape) -> dict:
        return {
            "op_class": op_class,
            "dtype": dtype,
            **shape,
            "flops": flops,
            "bytes": elements * size,
            "time_us": time_us,
        }

    def swiglu(gate_up):
        half = gate_up.shape[-1] // 2
        return F.silu(gate_up[:, :half]) * gate_up[:, half:]

    out = []
    for m, n, k in gemm_shapes(quick):
        x, w = tensor(m, k), tensor(k, n)
        out.append(record("gemm", 2.0 * m * n * k, m * k + m * n + k * n, timed_us(torch.matmul, x, w), m=m, n=n, k=k))
    width = 512 if quick else 8192
    for rows in (1, 64, 1024) if quick else (1, 64, 1024, 8192):
        elements = rows * width
        out.append(record("elementwise", 5.0 * elements, 3 * elements, timed_us(swiglu, tensor(rows, 2 * width))))
        hidden, weight = tensor(rows, width), tensor(width)
        out.append(record("norm", 5.0 * elements, 2 * elements, timed_us(F.rms_norm, hidden, (width,), weight)))
        ids = torch.randint(0, 4 * width, (rows,), device=device)
        out.append(record("embedding", 0.0, 2 * elements, timed_us(F.embedding, ids, tensor(4 * width, width))))
    heads, head_dim = (4, 32) if quick else (32, 128)
    for seq in (64, 256) if quick else (512, 2048, 8192):
        q, k, v = (tensor(1, heads, seq, head_dim) for _ in range(3))
        flops = 2.0 * heads * seq * (seq + 1) / 2 * 2 * head_dim  # causal: seq*(seq+1)/2 query-key pairs
        time_us = timed_us(F.scaled_dot_product_attention, q, k, v, is_causal=True)
        out.append(record("attention", flops, 4 * heads * seq * head_dim, time_us))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hardware", required=True, help="conf/hardware/*.yaml of the device being measured")
    parser.add_argument("--out", required=True, help="efficiency table JSON to write")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bf16", choices=sorted(TORCH_DTYPES))
    parser.add_argument("--quick", action="store_true", help="a few small shapes (smoke test)")
    parser.add_argument("--measurements", help="also write the raw measurements to this JSON file")
    args = parser.parse_args()
    hardware = yaml.safe_load(Path(args.hardware).read_text())
    measurements = run_microbench(args.device, args.dtype, args.quick)
    if args.measurements:
        Path(args.measurements).write_text(json.dumps(measurements, indent=1))
    table = fit_table(measurements, hardware, source=f"sims.calibration.microbench on {args.device} ({args.dtype})")
    save_table(table, args.out)
    for name, eff in table.op_classes.items():
        print(f"{name:<12} compute {eff.compute:.3f}  memory {eff.memory:.3f}  floor {eff.floor_us:.1f} us")
    print(f"wrote {args.out} ({len(table.gemm_measurements)} GEMM shapes)")


if __name__ == "__main__":
    main()
