"""How many configurations per second `simulate` evaluates once a model's graph is built.

    python -m sims.benchmarks.speed [--seconds 2]

Sweeps layouts and batch sizes per model and workload and times the whole `simulate` call (input
parsing, layout checks, step time, memory) on the valid layouts, after a first pass that builds
and caches the graphs.
"""

from __future__ import annotations

import argparse
import itertools
import time
from pathlib import Path

import yaml

from sims import simulate

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


def measure(hf_config: dict, hardware: dict, workload: dict, seconds: float) -> tuple[int, float]:
    """(evaluations, elapsed seconds) for repeated passes over the valid points of the sweep
    (invalid layouts return early and would flatter the rate)."""
    points = [
        (layout, {**workload, "batch": batch})
        for layout, batch in sweep_points()
        if simulate(hf_config, hardware, layout, {**workload, "batch": batch}).status == "ok"  # also builds the graph
    ]
    evaluations = 0
    start = time.perf_counter()
    while time.perf_counter() - start < seconds:
        for layout, point in points:
            simulate(hf_config, hardware, layout, point)
        evaluations += len(points)
    return evaluations, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="time per model and workload")
    args = parser.parse_args()
    hardware = yaml.safe_load((REPO / "conf/hardware/h100.yaml").read_text())
    hardware["nodes"] = 2  # room for tp*dp*pp up to 16
    print(f"{'model':<18} {'mode':<8} {'configs/s':>10} {'us/config':>10}")
    for model in MODELS:
        hf_config = yaml.safe_load((REPO / f"conf/model/{model}.yaml").read_text())["hf_config"]
        for workload in WORKLOADS:
            n, elapsed = measure(hf_config, hardware, workload, args.seconds)
            print(f"{model:<18} {workload['mode']:<8} {n / elapsed:>10.0f} {1e6 * elapsed / n:>10.1f}")


if __name__ == "__main__":
    main()
