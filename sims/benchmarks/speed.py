"""How fast the simulator is: configurations per second in-process, and a multirun sweep end to end.

    python -m sims.benchmarks.speed [--seconds 2]
    python -m sims.benchmarks.speed --sweep      # also time a 64-job `python run.py -m` sweep

The first sweeps layouts and batch sizes per model and workload and times (in the CPU time of the
calling thread, so that neither other jobs on a shared machine nor numpy's BLAS worker threads,
which spin idle for a while after numpy is imported, count) the whole `simulate` call (input
parsing, layout checks, step time, memory) on the valid layouts, costed together by `simulate_many`
(--per-layout: one `simulate` call each): the first pass over them (graphs built, nothing costed yet:
one sweep) and repeated passes. --sweep runs SWEEP_ARGS through Crucible's command line (one
process, Hydra's basic launcher: each job composes its config, writes its run records and
simulates) and reports the wall time and the rows of sweep_summary.csv.
"""

from __future__ import annotations

import argparse
import csv
import gc
import itertools
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import yaml

from sims import build_graph, simulate, simulate_many
from sims.builders import graph_and_counts
from sims.hardware import hardware_spec, read_hardware_file
from sims.workload import layout_problem, parse_layout, parse_workload

REPO = Path(__file__).resolve().parents[2]
MODELS = ("qwen3_8b", "qwen3_30b_a3b", "qwen3_235b_a22b", "deepseek_v3")
WORKLOADS = (
    {"mode": "prefill", "seq_len": 4096},
    {"mode": "decode", "context_len": 4096},
    {"mode": "train", "seq_len": 4096, "microbatches": 8},
)


def sweep_points():
    for tp, dp, ep, pp, batch in itertools.product((1, 2, 4, 8), (1, 2), (1, 2, 4, 8), (1, 2), (8, 64)):
        yield {"tp": tp, "dp": dp, "ep": ep, "pp": pp}, batch


def measure(hf_config: dict, hardware: dict, workload: dict, seconds: float,
            per_layout: bool = False) -> tuple[float, int, float]:
    """(first-pass seconds per configuration, evaluations, elapsed seconds of the repeated passes)
    over the valid points of the sweep (invalid layouts return early and would flatter the rate).
    The first pass starts with the graph built but nothing costed: it is what one sweep costs; the
    repeated passes reuse what the simulator shares between configurations."""
    points = [(layout, {**workload, "batch": batch}) for layout, batch in sweep_points()]
    graph_and_counts(hf_config, workload["mode"])
    hw = hardware_spec(hardware)
    points = [
        (layout, point) for layout, point in points
        if layout_problem(build_graph(hf_config, workload["mode"]).meta, hw, parse_layout(layout),
                          parse_workload(point)) is None
    ]
    layouts, workloads = [layout for layout, _ in points], [point for _, point in points]

    def one_pass() -> None:
        if per_layout:
            for layout, point in points:
                simulate(hf_config, hardware, layout, point)
        else:
            simulate_many(hf_config, hardware, layouts, workloads)

    gc.collect()  # every measurement starts from a collected heap, not the previous one's garbage
    start = time.thread_time()  # this thread's CPU time: the dev machine is shared with other jobs
    one_pass()
    first_pass_s = (time.thread_time() - start) / len(points)
    evaluations = 0
    start = time.thread_time()
    while time.thread_time() - start < seconds:
        one_pass()
        evaluations += len(points)
    return first_pass_s, evaluations, time.thread_time() - start


SWEEP_ARGS = [  # 4 x 4 x 2 x 2 = 64 jobs
    "-m", "task=sim", "model=qwen3_30b_a3b", "hardware=h100",
    "parallel.tp=1,2,4,8", "parallel.ep=1,2,4,8", "sim.mode=prefill,decode", "parallel.dp=1,-1", "parallel.fsdp=1",
]


def time_sweep() -> tuple[float, Counter]:
    """Wall seconds of the SWEEP_ARGS multirun and its rows by status."""
    with tempfile.TemporaryDirectory() as sweep_dir:
        start = time.perf_counter()
        subprocess.run([sys.executable, str(REPO / "run.py"), *SWEEP_ARGS, f"hydra.sweep.dir={sweep_dir}"],
                       cwd=REPO, capture_output=True, text=True)
        wall_s = time.perf_counter() - start
        with open(Path(sweep_dir) / "sweep_summary.csv") as handle:
            statuses = Counter(row["status"] for row in csv.DictReader(handle))
    return wall_s, statuses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="time per model and workload")
    parser.add_argument("--sweep", action="store_true", help="also time a 64-job multirun through run.py")
    parser.add_argument("--table", help="an efficiency table for the H100 (default: built-in factors)")
    parser.add_argument("--per-layout", action="store_true", help="one simulate call per layout (not simulate_many)")
    args = parser.parse_args()
    hardware = read_hardware_file(REPO / "conf/hardware/h100.yaml")
    hardware["efficiency_table"] = args.table
    hardware["nodes"] = 2  # room for tp*dp*pp up to 16
    print(f"{'model':<18} {'mode':<8} {'configs/s':>10} {'us/config':>10} {'first pass configs/s':>21}")
    for model in MODELS:
        hf_config = yaml.safe_load((REPO / f"conf/model/{model}.yaml").read_text())["hf_config"]
        for workload in WORKLOADS:
            first_s, n, elapsed = measure(hf_config, hardware, workload, args.seconds, args.per_layout)
            print(f"{model:<18} {workload['mode']:<8} {n / elapsed:>10.0f} {1e6 * elapsed / n:>10.1f} "
                  f"{1 / first_s:>21.0f}")
    if args.sweep:
        wall_s, statuses = time_sweep()
        jobs = sum(statuses.values())
        rows = ", ".join(f"{count} {status}" for status, count in sorted(statuses.items()))
        print(f"python run.py {' '.join(SWEEP_ARGS)}: {jobs} jobs ({rows}) in {wall_s:.1f} s ({wall_s / jobs:.2f} s/job)")


if __name__ == "__main__":
    main()
