"""The distributed side of sims.benchmarks.layouts: every rank builds each layout, checks and times its decode step."""

from __future__ import annotations

import datetime
import gc
import json
import platform
import statistics
import time
from argparse import Namespace
from pathlib import Path

import torch
import torch.distributed as dist
import yaml

from framework.core.distributed import detect
from framework.core.dtypes import check, torch_dtype
from sims.benchmarks.layouts import REPO, TINY, TINY_WORKLOAD, add_errors, card_hardware, plan, summarise, sweep
from sims.benchmarks.layouts_decode import DecodeModel, Mesh, Shapes
from sims.calibration.timing import cuda_events_seconds
from sims.hardware import read_hardware_file

CALLS_PER_SAMPLE = 5
COLLECTIVE_TIMEOUT_S = 180


def run(args: Namespace) -> None:
    env = detect()
    cuda = torch.cuda.is_available() and not args.tiny
    device = torch.device("cuda", env.local_rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    # A rank stuck in a collective fails the job in minutes, not NCCL's default 10.
    dist.init_process_group("nccl" if cuda else "gloo", init_method=env.init_method, rank=env.rank,
                            world_size=env.world_size, timeout=datetime.timedelta(seconds=COLLECTIVE_TIMEOUT_S))
    try:
        report = _run(args, env.world_size, device, cuda)
        if report is not None:
            _print(report, args.out)
    finally:
        dist.destroy_process_group()


def _run(args: Namespace, world: int, device: torch.device, cuda: bool) -> dict | None:
    """Measures every planned layout; rank 0 rewrites the report after each one (a late failure keeps
    the layouts done) and returns it, the other ranks return None."""
    spec = sweep(Path(args.recipe))
    hf_config = yaml.safe_load((REPO / f"conf/model/{spec['model']}.yaml").read_text())["hf_config"]
    if args.tiny:
        hf_config, spec["sim"] = {**hf_config, **TINY}, {**spec["sim"], **TINY_WORKLOAD}
    if not cuda and not args.tiny:
        raise SystemExit("no CUDA device: the full-size layouts need GPUs (use --tiny to check the script on the CPU)")
    if check(spec["sim"]["dtype"], "sim.dtype") == "float8":
        raise SystemExit("sim.dtype float8: this decode runs bfloat16, float16 or float32 weights only")
    hardware_name = args.hardware or (_card_hardware(device) if cuda else spec["hardware"])
    hardware = read_hardware_file(REPO / f"conf/hardware/{hardware_name}.yaml")
    rows = plan(spec, hf_config, hardware, world, args.layers)
    wanted = set(args.only.split(",")) if args.only else None
    shapes = Shapes.of({**hf_config, "num_hidden_layers": args.layers})
    dtype = torch_dtype(spec["sim"]["dtype"])
    timing = "cuda_graphs" if cuda and not args.eager else ("cuda_events_eager" if cuda else "perf_counter_eager")
    main = dist.get_rank() == 0  # rank 0 holds replica 0 in every layout: the logit check is its
    report = {
        "benchmark": "sims.benchmarks.layouts (issue 13)",
        "environment": _environment(device, world, timing),
        "model": spec["model"] + (" (tiny)" if args.tiny else ""), "hardware": hardware_name,
        "layers_measured": args.layers, "num_hidden_layers": hf_config["num_hidden_layers"],
        "workload": {"mode": spec["sim"]["mode"], "batch_per_replica": spec["sim"]["batch"],
                     "context_len": spec["sim"]["context_len"], "dtype": str(dtype).removeprefix("torch.")},
        "layouts": rows,
    }
    reference = None
    for row in rows:
        if row["status"] != "planned":
            continue
        if wanted is not None and f"tp{row['tp']}_ep{row['ep']}" not in wanted:
            row.update(status="skipped", reason="not in --only")
            continue
        logits = measure(row, shapes, spec["sim"], hf_config["num_hidden_layers"], device, dtype, args, timing)
        reference = logits if reference is None else reference
        add_errors(row, spec["sim"]["batch"])
        if main:
            row["max_abs_logit_diff"] = (logits - reference).abs().max().item()
            row["mean_abs_logit"] = logits.abs().mean().item()
            _write(report, args.out)
    if not main:
        return None
    report["summary"] = summarise(rows)
    _write(report, args.out)
    return report


def _card_hardware(device: torch.device) -> str:
    """The hardware file of the card measured: predictions for another card's bandwidth mislead."""
    card = torch.cuda.get_device_name(device)
    name = card_hardware(card)
    if name is None:
        raise SystemExit(f"no conf/hardware file for {card!r}; pass --hardware NAME")
    return name


def _write(report: dict, out: str) -> None:
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(report, indent=1))


def measure(row: dict, shapes: Shapes, sim: dict, full_layers: int, device, dtype, args: Namespace, timing: str):
    """Times one layout's step (K layers + embedding and head) and its K layers alone; returns rank 0's
    replica-0 logits (float32, on the CPU) for the cross-layout check."""
    mesh = Mesh(row["tp"], row["ep"])
    model = DecodeModel(shapes, mesh, sim["batch"], sim["context_len"], device, dtype)
    cuda = device.type == "cuda"
    with torch.no_grad():
        ids = model.token_ids()
        logits = model.step(ids).float().cpu()
        hidden = model.embedding(ids)
        row["measured_eager_s"] = median_time(lambda: model.step(ids), cuda, args.warmup, args.repeats, device)
        if timing == "cuda_graphs":
            step, layers = capture(lambda: model.step(ids)), capture(lambda: model.run_layers(hidden))
            row["measured_s"] = median_time(step.replay, cuda, args.warmup, args.repeats, device)
            layers_s = median_time(layers.replay, cuda, args.warmup, args.repeats, device)
            del step, layers
        else:
            row["measured_s"] = row["measured_eager_s"]
            layers_s = median_time(lambda: model.run_layers(hidden), cuda, args.warmup, args.repeats, device)
    row.update(status="measured", measured_layers_s=layers_s, timing=timing,
               measured_full_s=row["measured_s"] + (full_layers - shapes.layers) * layers_s / shapes.layers)
    del model
    gc.collect()
    if cuda:
        torch.cuda.empty_cache()
    return logits


def capture(fn) -> torch.cuda.CUDAGraph:
    """A CUDA graph of fn after two warm-up calls on a side stream (NCCL collectives included)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()  # nothing of the warm-up left for NCCL's watchdog to poll during capture
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):  # other threads (the watchdog) may query
        fn()
    return graph


def median_time(fn, cuda: bool, warmup: int, repeats: int, device, calls: int = CALLS_PER_SAMPLE) -> float:
    """The slowest rank's median seconds per call; ranks line up before each sample of `calls`
    back-to-back calls (which spreads the start-up skew between ranks over them)."""
    for _ in range(warmup):
        fn()
    times = []
    line_up = torch.zeros(1, device=device)
    for _ in range(repeats):
        dist.all_reduce(line_up)
        if cuda:
            torch.cuda.synchronize()
            times.append(cuda_events_seconds(fn, calls))
        else:
            begin = time.perf_counter()
            for _ in range(calls):
                fn()
            times.append((time.perf_counter() - begin) / calls)
    slowest = torch.tensor([statistics.median(times)], device=device, dtype=torch.float64)
    dist.all_reduce(slowest, op=dist.ReduceOp.MAX)
    return slowest.item()


def _environment(device: torch.device, world: int, timing: str) -> dict:
    import transformers

    card = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor() or "cpu"
    return {"date": datetime.date.today().isoformat(), "device": card, "devices": world, "host": platform.node(),
            "python": platform.python_version(), "torch": torch.__version__, "cuda": torch.version.cuda,
            "transformers": transformers.__version__, "backend": dist.get_backend(), "timing": timing}


def _print(report: dict, out: str) -> None:
    print(f"{'layout':<10} {'measured ms':>12} {'predicted ms':>13} {'error':>8} {'full ms':>9} {'pred full':>10}")
    for row in report["layouts"]:
        name = f"tp{row['tp']}_ep{row['ep']}"
        if row["status"] != "measured":
            print(f"{name:<10} skipped: {row['reason']}")
            continue
        print(f"{name:<10} {row['measured_s'] * 1e3:>12.3f} {row['predicted_s'] * 1e3:>13.3f} {row['error']:>+8.1%} "
              f"{row['measured_full_s'] * 1e3:>9.2f} {row['predicted_full_s'] * 1e3:>10.2f}")
    print(json.dumps(report["summary"], indent=1))
    print(f"report: {out}")
