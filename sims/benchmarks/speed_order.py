"""The speed benchmark's own first pass of chosen sweeps, in a chosen order in one process, for speed work.

    python -m sims.benchmarks.speed_order qwen3_8b:prefill qwen3_8b:decode qwen3_8b:train   # the benchmark's order
    python -m sims.benchmarks.speed_order qwen3_30b_a3b:prefill qwen3_8b:prefill            # after another sweep
    python -m sims.benchmarks.speed_order --prebuilt qwen3_8b:prefill                       # without per-graph setup

Each MODEL:MODE names one of sims.benchmarks.speed's sweeps; its first pass is that benchmark's (`measure`: the graph
built, nothing costed, the heap collected, this thread's CPU time), with built-in factors, followed by its repeated
passes (--seconds). What a sweep's first pass reads depends on what ran before it in the process (the first sweep also
runs numpy's and the simulator's code for the first time); --prebuilt builds the graph's per-graph setup (its columns,
every tp size's work coefficients and the stage splits of pp 1 and 2) before the timed pass, and prints its time, to
show what that setup costs within a first pass. Run it with one BLAS thread (OPENBLAS_NUM_THREADS=1), as
speed_compare does.
"""

from __future__ import annotations

import argparse
import gc
import time

import yaml

from sims.benchmarks.speed import MODELS, REPO, WORKLOADS, measure
from sims.builders import graph_and_counts
from sims.hardware import read_hardware_file
from sims.op_columns import columns, every_tp_work
from sims.partition import stage_split

MODES = tuple(workload["mode"] for workload in WORKLOADS)


def first_passes(sweeps: list[tuple[str, str]], seconds: float, prebuilt: bool = False) -> list[str]:
    """One line per sweep, in order: its first pass in us per configuration and configurations/s (and with
    `prebuilt`, what building the per-graph setup took first)."""
    hardware = read_hardware_file(REPO / "conf/hardware/h100.yaml")
    hardware["efficiency_table"], hardware["nodes"] = None, 2  # as sims.benchmarks.speed
    lines = []
    for model, mode in sweeps:
        hf = yaml.safe_load((REPO / f"conf/model/{model}.yaml").read_text())["hf_config"]
        setup = f" setup {1e6 * _build_setup(hf, mode):6.1f} us" if prebuilt else ""
        first_s, _, _ = measure(hf, hardware, WORKLOADS[MODES.index(mode)], seconds)
        lines.append(f"{model:<18} {mode:<8} first pass {1e6 * first_s:7.1f} us/config {1 / first_s:>9,.0f} configs/s"
                     f"{setup}")
    return lines


def _build_setup(hf: dict, mode: str) -> float:
    """Build the graph's per-graph setup (the heap collected first, as measure does); this thread's CPU seconds."""
    graph, _ = graph_and_counts(hf, mode)
    gc.collect()
    start = time.thread_time()
    every_tp_work(graph, columns(graph).tp_sizes, False, mode)  # the columns with them
    for pp in (1, 2):
        stage_split(graph, pp)
    return time.thread_time() - start


def sweep_name(name: str) -> tuple[str, str]:
    """MODEL:MODE of one of the speed benchmark's sweeps."""
    model, _, mode = name.partition(":")
    if model not in MODELS or mode not in MODES:
        raise argparse.ArgumentTypeError(f"{name!r}: expected MODEL:MODE with MODEL one of {', '.join(MODELS)} and "
                                         f"MODE one of {', '.join(MODES)}")
    return model, mode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sweeps", nargs="+", type=sweep_name, help="MODEL:MODE, e.g. qwen3_8b:prefill")
    parser.add_argument("--seconds", type=float, default=0.3, help="repeated passes after each first pass")
    parser.add_argument("--prebuilt", action="store_true", help="build the per-graph setup before each first pass")
    args = parser.parse_args()
    print("\n".join(first_passes(args.sweeps, args.seconds, args.prebuilt)))


if __name__ == "__main__":
    main()
