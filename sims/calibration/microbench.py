"""Measure a model's kernels on this machine's accelerator and fit an efficiency table.

    python -m sims.calibration.microbench --hardware conf/hardware/h100.yaml \
        --model conf/model/qwen3_8b.yaml conf/model/qwen3_30b_a3b.yaml --out h100.json
    python -m sims.calibration.microbench --stack torch_fused --hardware conf/hardware/h100.yaml \
        --model conf/model/qwen3_8b.yaml --out h100_torch_fused.json
    python -m sims.calibration.microbench --hardware conf/hardware/cpu.yaml --model conf/model/tiny_qwen3.yaml \
        --device cpu --dtype fp32 --quick --out cpu.json

For every workload of the plan (prefill and decode points) the model's IR is bound to that
workload and each node is timed as transformers runs it (sims/calibration/kernels.py): GEMMs of
the model's real shapes (q/k/v/o, MLP gate/up/down, lm_head), the grouped expert GEMMs, the
router, attention (prefill and decode through torch SDPA; also on a batch x length grid of each),
norms, rotary, activations, the cache write, the embedding; plus a large copy (memory bandwidth)
and a one-element kernel (the launch floor). Each measurement carries the FLOPs and bytes the
simulator counts for that node (`sims.predict_op`), so `fit_table` turns time into efficiency in
the calculator's own terms. `python run.py task=calibrate` runs the same from Crucible's command line.
`--benchmarks backward` (not in the default set) times what a training step adds at training shapes:
each train-graph node forward and forward + backward, the loss, the gradient accumulation and the
optimizer step (sims/calibration/train_bench.py); the fitted table then holds backward measurements.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from sims.api import predict_op
from sims.hardware import read_hardware_file
from sims.builders import build_graph
from sims.calculator import OP_CLASS, bind_dims
from sims.calibration.fit import fit_table
from sims.calibration.kernels import Bench, HFKernels
from sims.calibration.kernels_fused import KERNELS_BY_STACK, kernels_for
from sims.calibration.table import save_table
from sims.calibration.timing import rotations, time_call
from sims.calibration.train_bench import derive_backward, train_items
from sims.workload import Layout, parse_workload

BENCHMARKS = ("gemm", "moe", "router", "attention", "norm", "elementwise", "embedding", "copy", "launch")
KINDS = (*BENCHMARKS, "backward")  # backward: training kernels (sims/calibration/train_bench.py), asked for by name
MIXED_LAUNCH_KERNELS = 8
MOE_BLOCK_OPS = ("experts_gate_up", "experts_act", "experts_down")
DERIVED_OPS = ("moe_permute", "moe_unpermute")  # the experts module's time beyond MOE_BLOCK_OPS
WORKLOADS = (
    {"mode": "prefill", "batch": 1, "seq_len": 128},
    {"mode": "prefill", "batch": 1, "seq_len": 1024},
    {"mode": "prefill", "batch": 4, "seq_len": 2048},
    {"mode": "prefill", "batch": 2, "seq_len": 8192},
    {"mode": "decode", "batch": 1, "context_len": 1024},
    {"mode": "decode", "batch": 8, "context_len": 4096},
    {"mode": "decode", "batch": 64, "context_len": 1024},
)
# Decode attention on a full batch x KV-length grid: its time is a surface over both (kept off the
# accuracy benchmark's held-out points: batch 1, 4, 16, 32 at 512, 2048, 8192).
ATTENTION_GRID = tuple((b, kv) for b in (1, 3, 12, 48) for kv in (768, 3072, 12288, 32768))
QUICK_ATTENTION_GRID = tuple((b, kv) for b in (1, 2) for kv in (16, 48))
# Prefill attention on a batch x prompt-length grid: many short prompts do not run like one long one
# of the same FLOPs (kept off the accuracy benchmarks' held-out prefill points: batch 1, 2, 8 at 512,
# 1024, 3072, 4096; (4, 2048) is also a workload above and is timed once).
PREFILL_GRID = tuple((b, s) for b in (1, 4, 16) for s in (256, 768, 2048, 6144))
QUICK_PREFILL_GRID = tuple((b, s) for b in (1, 3) for s in (24, 96))
# Training shapes for `backward`: every node of the train graph forward and forward + backward, the loss
# over the vocabulary, the gradient accumulation and the optimizer step.
TRAIN_WORKLOADS = (
    {"mode": "train", "batch": 1, "seq_len": 1024},
    {"mode": "train", "batch": 2, "seq_len": 2048},
    {"mode": "train", "batch": 4, "seq_len": 2048},
    {"mode": "train", "batch": 1, "seq_len": 8192},
)
QUICK_TRAIN_WORKLOADS = ({"mode": "train", "batch": 1, "seq_len": 16}, {"mode": "train", "batch": 2, "seq_len": 32})
QUICK_WORKLOADS = (
    {"mode": "prefill", "batch": 1, "seq_len": 16},
    {"mode": "prefill", "batch": 2, "seq_len": 64},
    {"mode": "decode", "batch": 2, "context_len": 64},
)


@dataclass(frozen=True)
class Plan:
    workloads: tuple[Mapping, ...] = WORKLOADS
    benchmarks: tuple[str, ...] = BENCHMARKS
    dtype: str = "bf16"
    warmup: int = 3
    repeats: int = 10
    graphs: bool = True  # CUDA graphs on CUDA (GPU time without host overhead)
    copy_mb: int = 256
    count_kernels: bool = False  # record the GPU kernels one call launches (torch.profiler)
    stack: str = "transformers"  # the software stack whose kernels are timed (sims/stacks.yaml)
    attention_grid: tuple[tuple[int, int], ...] = ATTENTION_GRID  # decode (batch, kv_len) points
    prefill_grid: tuple[tuple[int, int], ...] = PREFILL_GRID  # prefill attention (batch, seq_len) points
    fp8_gemms: bool = False  # also time each 2-D GEMM in fp8 (torch._scaled_mm): the table's fp8 GEMMs
    train_workloads: tuple[Mapping, ...] = TRAIN_WORKLOADS  # the shapes of `backward`
    skip_failed: bool = False  # a kernel that raises is reported and left out instead of stopping the run


@dataclass
class Item:
    """One thing to time: a bench and the record its measurement completes."""

    bench: Bench
    record: dict
    bytes_touched: float = 0.0
    graphs: bool = True  # False: eager calls even where the plan replays CUDA graphs (the optimizer step)


def measure(
    hf_config: Mapping,
    hardware: Mapping,
    plan: Plan,
    device: str,
    progress: Callable[[Iterable, int, str], Iterable] | None = None,
    on_result: Callable[[int, dict], None] | None = None,
) -> list[dict]:
    """Time the model's kernels for every workload of the plan; returns the measurements
    (the input of fit_table), the moe_permute/moe_unpermute ones derived from moe_block."""
    kernels = kernels_for(plan.stack, hf_config, device, plan.dtype)
    items = _items(kernels, hf_config, hardware, plan)
    if "backward" in plan.benchmarks:
        items += train_items(kernels, hf_config, hardware, plan)
    progress = progress or (lambda iterable, total, desc: iterable)
    results = []
    for index, item in enumerate(progress(items, len(items), "micro-benchmarks")):
        try:
            args = [item.bench.make_args() for _ in range(rotations(item.bytes_touched, device))]
            timing = time_call(item.bench.fn, args, device, plan.warmup, plan.repeats, plan.graphs and item.graphs)
        except RuntimeError as error:  # out of memory, a kernel refusing the shape: kept out of the fit
            if not plan.skip_failed:
                raise
            print(f"skipped {item.record['benchmark']}: {str(error).splitlines()[0]}", flush=True)
            results.append({"benchmark": item.record["benchmark"], "failed": str(error).splitlines()[0]})
            args = None
            continue
        record = {**item.record, "time_us": timing.time_us, "spread": timing.spread, "timing": timing.mode}
        if plan.count_kernels and device.startswith("cuda"):
            record["kernels"] = count_kernels(item.bench.fn, args[0])
        del args
        results.append(record)
        if on_result:
            on_result(index, record)
    timed = [r for r in results if "failed" not in r]
    return results + derive_moe_shuffles(timed) + derive_backward(timed)


def benched_nodes(graph, dims: Mapping, workload: dict, kernels, seen: set, hf_config: Mapping, hardware: Mapping,
                  stack: str, keep=lambda node: True):
    """(node, its simulated work, its bench) for each compute node of `graph` that `keep` selects and
    `kernels` can time, once per (node, FLOPs, bytes) over everything `seen` collects."""
    for node in graph.nodes:
        if node.is_comm or not keep(node):
            continue
        work = predict_op(hf_config, hardware, workload, node.name, stack=stack)
        key = (node.name, work["flops"], work["bytes"])
        bench = None if key in seen else kernels.bench(node, dims)
        if bench is not None:
            seen.add(key)
            yield node, work, bench


def _items(kernels: HFKernels, hf_config: Mapping, hardware: Mapping, plan: Plan) -> list[Item]:
    wanted = set(plan.benchmarks)
    items, seen = [], set()
    grid = [{"mode": "decode", "batch": b, "context_len": kv, "only": "attention"} for b, kv in plan.attention_grid]
    grid += [{"mode": "prefill", "batch": b, "seq_len": n, "only": "attention"} for b, n in plan.prefill_grid]
    for raw in (*plan.workloads, *(grid if "attention" in wanted else ())):
        only = raw.get("only")
        workload = {**{k: v for k, v in raw.items() if k != "only"}, "dtype": plan.dtype}
        parsed = parse_workload(workload)
        graph = build_graph(hf_config, parsed.mode, plan.stack)
        dims = bind_dims(graph, Layout(), parsed)
        point = {"mode": parsed.mode, "batch": parsed.batch, "seq_len": parsed.query_len, "kv_len": parsed.kv_len}
        wanted_node = lambda node: OP_CLASS[node.op_type] in wanted and not (only and node.op_type != only)  # noqa: E731
        for node, work, bench in benched_nodes(graph, dims, workload, kernels, seen, hf_config, hardware, plan.stack,
                                               wanted_node):
            record = {"benchmark": node.name, "op": node.name, "op_class": work["op_class"], "dtype": plan.dtype,
                      **point, "tokens": int(dims["tokens"]), "flops": work["flops"], "bytes": work["bytes"]}
            if node.op_type == "gemm" and len(node.weights[0]) == 2:
                rows = dims["logit_tokens"] if node.name == "lm_head" else dims["tokens"]
                record.update(m=int(rows), n=node.weights[0][1], k=node.weights[0][0])
                if plan.fp8_gemms:
                    items.append(_fp8_item(kernels, record, hf_config, hardware, workload, node.name, plan.stack))
            items.append(Item(bench, record, work["bytes"]))
        if "moe" in wanted and not only and ("moe_block", dims["tokens"]) not in seen:
            block = kernels.moe_block(int(dims["tokens"]))
            if block is not None:
                seen.add(("moe_block", dims["tokens"]))
                parts = {op: predict_op(hf_config, hardware, workload, op, stack=plan.stack)
                         for op in MOE_BLOCK_OPS + DERIVED_OPS}
                record = {"benchmark": "moe_block", "dtype": plan.dtype, **point, "tokens": int(dims["tokens"]),
                          "parts": {op: {"flops": w["flops"], "bytes": w["bytes"]} for op, w in parts.items()}}
                items.append(Item(block, record, sum(w["bytes"] for w in parts.values())))
    element_bytes = 4 if plan.dtype == "fp32" else 2
    if "copy" in wanted:
        nbytes = plan.copy_mb * 2**20
        items.append(Item(kernels.copy(nbytes), {"benchmark": "copy", "op_class": "elementwise", "dtype": plan.dtype,
                                                 "flops": 0.0, "bytes": 2.0 * nbytes}, 2.0 * nbytes))
    if "launch" in wanted:
        items.append(Item(kernels.launch(), {"benchmark": "launch", "op_class": "elementwise", "dtype": plan.dtype,
                                             "flops": 1.0, "bytes": 2.0 * element_bytes}))
        mixed = {"benchmark": "launch_mixed", "dtype": plan.dtype, "kernels_per_call": MIXED_LAUNCH_KERNELS}
        items.append(Item(kernels.launch_mixed(), mixed))  # no op_class: reported, not fitted
    return items


def _fp8_item(kernels, record: dict, hf_config, hardware, workload, op: str, stack: str) -> Item:
    """The GEMM of `record` in fp8, with the FLOPs and bytes the simulator counts for it in fp8."""
    bench, m = kernels.fp8_linear(record["m"], record["n"], record["k"])
    scale = m / record["m"]  # rows rounded up for the fp8 kernel
    work = predict_op(hf_config, hardware, {**workload, "dtype": "fp8"}, op, stack=stack)
    fp8 = {**record, "benchmark": f"{op}_fp8", "dtype": "fp8", "m": m, "flops": work["flops"] * scale,
           "bytes": work["bytes"]}
    return Item(bench, fp8, work["bytes"])


def count_kernels(fn: Callable, args: tuple) -> int:
    """GPU kernels (and memory operations) one eager call launches."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn(*args)
        torch.cuda.synchronize()
    return sum(1 for event in prof.events() if event.device_type.name == "CUDA")


def derive_moe_shuffles(measurements: Sequence[dict]) -> list[dict]:
    """moe_permute and moe_unpermute measurements from each moe_block: the experts module's time
    minus its grouped GEMMs and activation at the same token count, split between the two by the
    bytes the simulator counts for them (a floor of 1% of the block keeps noise from going negative)."""
    parts = {(m["benchmark"], m["tokens"]): m["time_us"] for m in measurements if m.get("op") in MOE_BLOCK_OPS}
    derived = []
    for block in (m for m in measurements if m.get("benchmark") == "moe_block"):
        inner = [parts.get((op, block["tokens"])) for op in MOE_BLOCK_OPS]
        if None in inner:
            continue
        rest_us = max(block["time_us"] - sum(inner), 0.01 * block["time_us"])
        shuffle_bytes = sum(block["parts"][op]["bytes"] for op in DERIVED_OPS)
        for op in DERIVED_OPS:
            work = block["parts"][op]
            derived.append({
                "benchmark": op, "op": op, "op_class": "elementwise", "dtype": block["dtype"],
                **{k: block[k] for k in ("mode", "batch", "seq_len", "kv_len", "tokens")},
                "flops": work["flops"], "bytes": work["bytes"], "time_us": rest_us * work["bytes"] / shuffle_bytes,
                "timing": f"derived from moe_block ({block['timing']})",
            })
    return derived


def default_device() -> str:
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def main() -> None:
    import yaml

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hardware", required=True, help="conf/hardware/*.yaml of the device being measured")
    parser.add_argument("--model", nargs="+", required=True, help="conf/model/*.yaml whose kernels to measure")
    parser.add_argument("--out", required=True, help="efficiency table JSON to write")
    parser.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    parser.add_argument("--dtype", default="bf16", choices=("bf16", "fp32"))
    parser.add_argument("--stack", default="transformers", choices=tuple(KERNELS_BY_STACK),
                        help="the software stack whose kernels to time (sims/stacks.yaml)")
    parser.add_argument("--quick", action="store_true", help="a few small workloads (smoke test)")
    parser.add_argument("--fp8", action="store_true", help="also time every GEMM in fp8 (torch._scaled_mm)")
    parser.add_argument("--benchmarks", nargs="+", choices=KINDS, default=BENCHMARKS,
                        help="kernel kinds to time (default: all but backward, the training kernels)")
    parser.add_argument("--no-graphs", action="store_true", help="time eager calls instead of CUDA graph replays")
    parser.add_argument("--measurements", help="also write the raw measurements to this JSON file")
    args = parser.parse_args()
    hardware = read_hardware_file(args.hardware)
    if args.fp8 and not (hardware.get("peak_tflops") or {}).get("fp8"):
        raise SystemExit(f"--fp8: {args.hardware} has no fp8 peak (peak_tflops.fp8)")
    device = args.device or default_device()
    plan = Plan(QUICK_WORKLOADS if args.quick else WORKLOADS, tuple(args.benchmarks), dtype=args.dtype,
                graphs=not args.no_graphs, copy_mb=16 if args.quick else 256, stack=args.stack,
                attention_grid=QUICK_ATTENTION_GRID if args.quick else ATTENTION_GRID,
                prefill_grid=QUICK_PREFILL_GRID if args.quick else PREFILL_GRID, fp8_gemms=args.fp8,
                train_workloads=QUICK_TRAIN_WORKLOADS if args.quick else TRAIN_WORKLOADS)
    measurements = []
    for model_file in args.model:
        hf_config = yaml.safe_load(Path(model_file).read_text())["hf_config"]
        measurements += measure(hf_config, hardware, plan, device)
    if args.measurements:
        Path(args.measurements).parent.mkdir(parents=True, exist_ok=True)
        Path(args.measurements).write_text(json.dumps(measurements, indent=1))
    source = f"sims.calibration.microbench on {device} ({args.dtype}, {args.stack} kernels)"
    table = fit_table(measurements, hardware, source=source, stack=args.stack)
    save_table(table, args.out)
    for name, eff in {**table.op_classes, **table.ops}.items():
        print(f"{name:<28} compute {eff.compute:.3f}  memory {eff.memory:.3f}  floor {eff.floor_us:.1f} us")
    print(f"wrote {args.out} ({len(measurements)} measurements, {len(table.gemm_measurements)} GEMM shapes)")


if __name__ == "__main__":
    main()
