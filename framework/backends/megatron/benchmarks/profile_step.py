"""Where a megatron pretraining step's time goes: torch.profiler over a few steps after warm-up; JSON and text out.

    torchrun --nproc_per_node 2 -m framework.backends.megatron.benchmarks.profile_step --tp 2 --out-dir DIR
    python -m framework.backends.megatron.benchmarks.profile_step --out-dir DIR              # one GPU
    python -m framework.backends.megatron.benchmarks.profile_step --tiny --out-dir DIR       # CPU check

The step is pretrain_step's (same engine, shapes and defaults: Llama-3.2-1B shape, seq 2048, 16
sequences in micro-batches of 2, local_sdpa, bf16). Every rank writes DIR/PREFIXrank{R}_summary.json,
DIR/PREFIXrank{R}_ops.txt and _ops_host.txt: the steps' wall times, the GPU kernels by total time and by kind (GEMM, NCCL,
attention, ...), the busy and idle time of the GPU over the profiled steps (the union of kernel
intervals on all streams against the span), the NCCL time not overlapped by other kernels, the
kernel time inside the forward / finalize-grads / optimizer ranges, and the operator table by
self device time. No trace is kept (the summary is what comes back).
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from framework.backends.megatron.benchmarks import pretrain_step

RANGES = ("forward", "finalize_grads", "optimizer")
KINDS = (  # first match wins; lower-case substrings of kernel names
    ("nccl", ("nccl",)),
    ("attention", ("flash", "fmha", "sdpa", "attention")),
    ("gemm", ("gemm", "nvjet", "xmma", "cutlass", "cublas", "splitk")),
    ("optimizer_foreach", ("multi_tensor", "foreach")),
    ("reduce", ("reduce", "norm")),
    ("copy_cast", ("copy", "cast")),
    ("elementwise", ("elementwise", "vectorized", "unrolled")),
    ("memcpy_memset", ("memcpy", "memset")),
)


def parse_args(argv=None) -> tuple[argparse.Namespace, argparse.Namespace]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="tiny model on a CPU (a check of the script)")
    parser.add_argument("--out-dir", required=True)
    parser.add_argument("--prefix", default="", help="file names start with it (flat result folders)")
    parser.add_argument("--tp", type=int, default=1)
    parser.add_argument("--spec", default="local_sdpa")
    parser.add_argument("--profile-steps", type=int, default=3)
    parser.add_argument("--top", type=int, default=60, help="kernels and operators listed")
    parser.add_argument("--host-probe-seq", type=int, default=0,
                        help="then time the same steps at this short sequence (kernels too short to hide the "
                             "host's launch work: the step is the host's own time)")
    args, rest = parser.parse_known_args(argv)
    step_args = pretrain_step.parse_args(["--out", "unused"] + (["--tiny"] if args.tiny else []) + rest)
    for name in ("tiny", "tp"):
        setattr(step_args, name, getattr(args, name))
    return args, step_args


def kernel_kind(name: str) -> str:
    lower = name.lower()
    for kind, needles in KINDS:
        if any(n in lower for n in needles):
            return kind
    return "other"


def union_ns(intervals) -> int:
    """Total length covered by [start, end) intervals."""
    total, end = 0, None
    for start, stop in sorted(intervals):
        if end is None or start > end:
            total += stop - start
            end = stop
        elif stop > end:
            total += stop - end
            end = stop
    return total


def gpu_summary(kernels: list[tuple[str, int, int, int]], ranges: list[tuple[str, int, int]]) -> dict:
    """kernels: (name, start_ns, end_ns, stream); ranges: (name, start_ns, end_ns) on the GPU timeline."""
    if not kernels:
        return {"kernels": 0}
    span = max(k[2] for k in kernels) - min(k[1] for k in kernels)
    busy = union_ns([(k[1], k[2]) for k in kernels])
    nccl = [(k[1], k[2]) for k in kernels if kernel_kind(k[0]) == "nccl"]
    other = [(k[1], k[2]) for k in kernels if kernel_kind(k[0]) != "nccl"]
    by_kind: dict[str, float] = {}
    by_name: dict[str, list] = {}
    for name, start, end, _ in kernels:
        kind = kernel_kind(name)
        by_kind[kind] = by_kind.get(kind, 0.0) + (end - start) / 1e6
        row = by_name.setdefault(name, [kind, 0, 0.0])
        row[1] += 1
        row[2] += (end - start) / 1e6
    in_range: dict[str, float] = {}
    for label, lo, hi in ranges:  # kernel time inside each annotated range (kernels that start in it)
        in_range[label] = in_range.get(label, 0.0) + sum(k[2] - k[1] for k in kernels if lo <= k[1] < hi) / 1e6
    top = sorted(by_name.items(), key=lambda item: -item[1][2])
    return {"kernels": len(kernels), "span_ms": span / 1e6, "busy_ms": busy / 1e6, "idle_ms": (span - busy) / 1e6,
            "kernel_sum_ms": sum(k[2] - k[1] for k in kernels) / 1e6,
            "nccl_ms": union_ns(nccl) / 1e6,
            "nccl_not_overlapped_ms": (busy - union_ns(other)) / 1e6,
            "streams": sorted({k[3] for k in kernels}),
            "by_kind_ms": dict(sorted(by_kind.items(), key=lambda item: -item[1])),
            "in_ranges_ms": in_range,
            "top_kernels": [{"name": n[:160], "kind": r[0], "count": r[1], "total_ms": r[2]} for n, r in top]}


def kineto_split(prof):
    """The GPU kernels and the GPU-side annotation ranges of a finished profile. Older torch (2.11)
    lacks _KinetoEvent.activity_type / end_ns: annotations are then told by name."""
    from torch.autograd import DeviceType

    kernels, ranges = [], []
    for event in prof.profiler.kineto_results.events():
        if event.device_type() != DeviceType.CUDA:
            continue
        name, start = event.name(), event.start_ns()
        end = start + event.duration_ns()
        if is_annotation(event, name):
            if name.startswith("megtp_"):
                ranges.append((name.removeprefix("megtp_"), start, end))
        else:  # kernel, gpu_memcpy, gpu_memset
            stream = event.device_resource_id() if hasattr(event, "device_resource_id") else 0
            kernels.append((name, start, end, stream))
    return kernels, ranges


def is_annotation(event, name: str) -> bool:
    if hasattr(event, "activity_type"):
        return event.activity_type() == "gpu_user_annotation"
    if hasattr(event, "is_user_annotation") and event.is_user_annotation():
        return True
    # not `"#" in name`: kernels named after lambdas (`direct_copy_kernel_cuda(...)::{lambda()#3}`) have one
    return name.startswith(("megtp_", "ProfilerStep", "Optimizer."))


def main(argv=None) -> dict:
    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    from framework.backends.megatron.adapter import quiet_megatron
    from framework.backends.megatron.distributed import shutdown
    from framework.backends.megatron.model import check_layout, decoder_shape
    from framework.core.paths import load_conf

    args, step_args = parse_args(argv)
    quiet_megatron()
    shape = decoder_shape(load_conf("model", step_args.model)["hf_config"])
    env, layout, device = pretrain_step.setup(step_args)
    check_layout(shape, layout.tp, layout.pp)
    step, engine = pretrain_step.megatron_step(step_args, shape, layout, args.spec, device,
                                               annotate=lambda name: record_function(f"megtp_{name}"))
    finalize = engine.config.finalize_model_grads_func

    def annotated_finalize(*a, **kw):
        with record_function("megtp_finalize_grads"):
            return finalize(*a, **kw)

    engine.config.finalize_model_grads_func = annotated_finalize
    warmup_walls = []  # unprofiled: what the profiler's own overhead adds shows against these
    for _ in range(step_args.warmup):
        begin = time.perf_counter()
        step()
        pretrain_step.sync(device)
        warmup_walls.append(time.perf_counter() - begin)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    walls = []
    with profile(activities=activities) as prof:
        for index in range(args.profile_steps):
            begin = time.perf_counter()
            with record_function(f"megtp_step{index}"):
                step()
            pretrain_step.sync(device)
            walls.append(time.perf_counter() - begin)
    kernels, ranges = kineto_split(prof)
    summary = {"device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
               "rank": env.rank, "world": env.world_size, "layout": layout.as_dict(), "spec": args.spec,
               "model": step_args.model, "seq": step_args.seq, "micro_batch": step_args.micro_batch,
               "global_batch": step_args.global_batch, "warmup": step_args.warmup, "steps": args.profile_steps,
               "sequence_parallel": engine.config.sequence_parallel, "versions": {"torch": torch.__version__},
               "warmup_wall_s": warmup_walls, "step_wall_s": walls, "gpu": gpu_summary(kernels, ranges)}
    table = prof.key_averages().table(sort_by="self_device_time_total" if device.type == "cuda"
                                      else "self_cpu_time_total", row_limit=args.top, max_name_column_width=90)
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    summary["gpu"]["top_kernels"] = summary["gpu"].get("top_kernels", [])[:args.top]
    (out / f"{args.prefix}rank{env.rank}_summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    (out / f"{args.prefix}rank{env.rank}_ops.txt").write_text(table + "\n")
    host = prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=args.top, max_name_column_width=90)
    (out / f"{args.prefix}rank{env.rank}_ops_host.txt").write_text(host + "\n")  # launch-bound or not
    if args.host_probe_seq:
        del step, engine, prof
        pretrain_step.release(device)
        summary["host_probe"] = host_probe(step_args, args, shape, layout, device)
        (out / f"{args.prefix}rank{env.rank}_summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    shutdown()
    return summary


def host_probe(step_args, args, shape, layout, device) -> dict:
    """Wall times of the same step at --host-probe-seq tokens (unprofiled), and the kernels of one step."""
    import copy

    from torch.profiler import ProfilerActivity, profile

    probe_args = copy.copy(step_args)
    probe_args.seq = args.host_probe_seq
    step, _engine = pretrain_step.megatron_step(probe_args, shape, layout, args.spec, device)
    walls = []
    for index in range(step_args.warmup + 5):
        begin = time.perf_counter()
        step()
        pretrain_step.sync(device)
        walls.append(time.perf_counter() - begin)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with profile(activities=activities) as prof:
        step()
        pretrain_step.sync(device)
    gpu = gpu_summary(*kineto_split(prof))
    gpu["top_kernels"] = gpu.get("top_kernels", [])[:10]
    return {"seq": args.host_probe_seq, "step_wall_s": walls[step_args.warmup:], "warmup_wall_s": walls[:step_args.warmup],
            "gpu_one_step": gpu}


if __name__ == "__main__":
    main()
