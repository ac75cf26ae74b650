"""Measure NCCL collectives and fit them into an efficiency table (the model: sims/comm.py).

On a GPU machine (one process per GPU; writes OUT/collectives_<N>.json):

    torchrun --nproc_per_node 2 -m sims.calibration.collectives measure --out OUT
    torchrun --nproc_per_node 4 -m sims.calibration.collectives measure --out OUT

Anywhere (CPU, gloo, small sizes: checks the script in seconds):

    torchrun --nproc_per_node 2 -m sims.calibration.collectives measure --cpu --max-bytes 65536 --out OUT

Fit and merge into a table (reproducible from the JSON files; the same (collective, group, link)
entries are replaced, everything else in the table is kept):

    python -m sims.calibration.collectives fit --hardware conf/hardware/h100.yaml \
        --table sims/calibration/tables/h100.json OUT/collectives_2.json [OUT/collectives_4.json]

all_reduce, all_gather, reduce_scatter, all_to_all and send_recv (each rank sends to the next and
receives from the previous) over all ranks, sizes from --min-bytes to --max-bytes doubling, with
nccl-tests' conventions: `bytes` is the all-reduce buffer, the gathered output, the scattered input,
what one rank sends in all, or the message; algbw = bytes / time; busbw = algbw * bus factor. Per
size: warm-up, then `repeats` timings of `iters` back-to-back calls between CUDA events (on the
CPU, perf_counter after a barrier); the median per call is kept, the slowest rank's median reported.
On CUDA the `iters` calls are captured in a CUDA graph and replayed (`timing: cuda_graph`), which is
what the simulator predicts (GPU time, as a decode step replaying its graph runs its collectives):
eager calls of small messages are bound by the host's launch path (the 4 x H200 files of 2026-11-26,
measured eagerly, fitted 30-45 us latencies). `--eager` times eager calls (`timing: cuda_events_eager`);
a collective whose capture fails on some rank falls back to eager calls for that size.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from dataclasses import replace
from pathlib import Path

from sims.comm import BUS_FACTOR

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")
TARGET_S = 2e-3  # each timing covers about this much time (at least one call)


def _call(kind: str, dist, buffers: dict, group_size: int, rank: int):
    src, dst = buffers["src"], buffers["dst"]
    if kind == "all_reduce":
        return dist.all_reduce(src)
    if kind == "all_gather":
        return dist.all_gather_into_tensor(dst, src)
    if kind == "reduce_scatter":
        return dist.reduce_scatter_tensor(dst, src)
    if kind == "all_to_all":
        return dist.all_to_all_single(dst, src)
    ops = [dist.P2POp(dist.isend, src, (rank + 1) % group_size), dist.P2POp(dist.irecv, dst, (rank - 1) % group_size)]
    for request in dist.batch_isend_irecv(ops):
        request.wait()


def _buffers(torch, kind: str, nbytes: int, group_size: int, device, dtype) -> dict:
    """Tensors so that `nbytes` is nccl-tests' size for the collective."""
    elements = max(group_size, nbytes // torch.empty(0, dtype=dtype).element_size())
    elements -= elements % group_size
    shard = elements // group_size
    shapes = {"all_reduce": (elements, 0), "all_gather": (shard, elements), "reduce_scatter": (elements, shard),
              "all_to_all": (elements, elements), "send_recv": (elements, elements)}[kind]
    return {"src": torch.randn(shapes[0], device=device).to(dtype),
            "dst": torch.empty(shapes[1], device=device, dtype=dtype)}


def _captured(torch, fn, iters: int):
    """A CUDA graph of `iters` back-to-back calls (NCCL kernels inside), after a warm-up call on a side
    stream; None when this stack cannot capture the collective."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph, capture_error_mode="thread_local"):
            for _ in range(iters):
                fn()
    except RuntimeError:
        torch.cuda.synchronize()
        return None
    return graph


def _time_per_call(torch, fn, iters: int, cuda: bool, dist, graph=None) -> float:
    if cuda:
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        if graph is not None:
            graph.replay()
        else:
            for _ in range(iters):
                fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) * 1e-3 / iters
    dist.barrier()
    began = time.perf_counter()
    for _ in range(iters):
        fn()
    return (time.perf_counter() - began) / iters


def measure(sizes: list[int], repeats: int, warmup: int, cpu: bool, eager: bool = False) -> list[dict]:
    import torch
    import torch.distributed as dist

    cuda = not cpu and torch.cuda.is_available()
    local_rank = int(os.environ.get("LOCAL_RANK", 0))
    if cuda:
        torch.cuda.set_device(local_rank)
    dist.init_process_group("nccl" if cuda else "gloo")
    rank, group_size = dist.get_rank(), dist.get_world_size()
    local_size = int(os.environ.get("LOCAL_WORLD_SIZE", group_size))
    link = "intra_node" if group_size <= local_size else "inter_node"
    device = torch.device("cuda", local_rank) if cuda else torch.device("cpu")
    dtype = torch.bfloat16 if cuda else torch.float32
    results = []
    for kind in COLLECTIVES:
        for nbytes in sizes:
            buffers = _buffers(torch, kind, nbytes, group_size, device, dtype)
            actual = buffers["src" if kind != "all_gather" else "dst"].numel() * buffers["src"].element_size()
            fn = lambda: _call(kind, dist, buffers, group_size, rank)  # noqa: E731
            for _ in range(warmup):
                fn()
            one = _time_per_call(torch, fn, 1, cuda, dist)
            iters = max(1, min(100, round(TARGET_S / max(one, 1e-7))))
            iters = _agree_max(torch, dist, device, iters)  # every rank runs the same number of calls
            graph = _captured(torch, fn, iters) if cuda and not eager else None
            if cuda and not eager and _agree_max(torch, dist, device, float(graph is None)) > 0:
                graph = None  # some rank could not capture it: all time eager calls
            timing = "cuda_graph" if graph is not None else ("cuda_events_eager" if cuda else "perf_counter")
            per_call = statistics.median(_time_per_call(torch, fn, iters, cuda, dist, graph) for _ in range(repeats))
            slowest = _agree_max(torch, dist, device, per_call)
            algbw = actual / slowest
            results.append({"collective": kind, "group": group_size, "link": link, "bytes": actual,
                            "time_us": slowest * 1e6, "algbw_gb_s": algbw / 1e9,
                            "busbw_gb_s": algbw * BUS_FACTOR[kind](group_size) / 1e9, "iters": iters,
                            "timing": timing})
            del buffers, graph
    dist.destroy_process_group()
    return results if rank == 0 else []


def _agree_max(torch, dist, device, value: float) -> float:
    tensor = torch.tensor([float(value)], device=device, dtype=torch.float64)
    dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return tensor.item() if isinstance(value, float) else int(tensor.item())


def environment(cpu: bool) -> dict:
    import torch

    cuda = not cpu and torch.cuda.is_available()
    info = {"torch": torch.__version__, "date": time.strftime("%Y-%m-%d", time.gmtime()),
            "device": torch.cuda.get_device_name() if cuda else "cpu", "backend": "nccl" if cuda else "gloo"}
    if cuda:
        info["nccl"] = ".".join(str(v) for v in torch.cuda.nccl.version())
    return info


def fit_into_table(hardware_file: str, table_file: str, measurement_files: list[str], out: str | None) -> Path:
    """Fit every measurement file's collectives and merge them into the table at `table_file`."""
    from sims.calibration.fit import fit_collectives
    from sims.calibration.table import load_table, save_table
    from sims.hardware import hardware_spec, read_hardware_file

    hardware = read_hardware_file(hardware_file)
    measurements = [m for f in measurement_files for m in json.loads(Path(f).read_text())["measurements"]]
    fits = fit_collectives(measurements, hardware_spec({**hardware, "efficiency_table": None}))
    table = load_table(table_file)
    fitted = {(f.collective, f.group, f.link) for f in fits}
    kept = tuple(c for c in table.collectives if (c.collective, c.group, c.link) not in fitted)
    merged = sorted(kept + fits, key=lambda c: (c.collective, c.link, c.group))
    target = Path(out or table_file)
    save_table(replace(table, collectives=tuple(merged)), target)
    for f in fits:
        print(f"{f.collective:<15} n={f.group} {f.link:<10} latency {f.latency_us:7.1f} us  bus {f.bus_gb_s:7.1f} GB/s")
    return target


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("measure", help="time the collectives (launch with torchrun)")
    run.add_argument("--out", required=True, help="folder for collectives_<N>.json")
    run.add_argument("--min-bytes", type=int, default=1024)
    run.add_argument("--max-bytes", type=int, default=2**30)
    run.add_argument("--repeats", type=int, default=10)
    run.add_argument("--warmup", type=int, default=3)
    run.add_argument("--cpu", action="store_true", help="gloo on the CPU (a check of the script)")
    run.add_argument("--eager", action="store_true", help="time eager calls, not CUDA-graph replays")
    fit = commands.add_parser("fit", help="fit measurement files into an efficiency table")
    fit.add_argument("files", nargs="+", help="collectives_<N>.json files from `measure`")
    fit.add_argument("--hardware", required=True, help="conf/hardware/*.yaml of the measured machine")
    fit.add_argument("--table", required=True, help="efficiency table to merge into")
    fit.add_argument("--out", help="write here instead of overwriting --table")
    args = parser.parse_args()
    if args.command == "fit":
        print(f"wrote {fit_into_table(args.hardware, args.table, args.files, args.out)}")
        return
    sizes, size = [], args.min_bytes
    while size <= args.max_bytes:
        sizes.append(size)
        size *= 2
    results = measure(sizes, args.repeats, args.warmup, args.cpu, args.eager)
    if results:
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        path = out / f"collectives_{results[0]['group']}.json"
        path.write_text(json.dumps({"environment": environment(args.cpu), "measurements": results}, indent=1))
        print(f"wrote {path} ({len(results)} measurements)")


if __name__ == "__main__":
    main()
