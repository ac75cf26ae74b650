"""The simulator's speed and results against another tree of this repository (a base commit), for speed work.

    git worktree add /tmp/simbase <commit>
    python -m sims.benchmarks.speed_compare timing /tmp/simbase --runs 5 --out DIR   # alternating passes + medians
    python -m sims.benchmarks.speed_compare harness /tmp/simbase --runs 5 --out DIR  # medians of in-process passes
    python -m sims.benchmarks.speed_compare medians DIR                              # the tables again from DIR
    python -m sims.benchmarks.speed_compare equality /tmp/simbase --out DIR          # every result equal?
    python -m sims.benchmarks.speed_compare profile qwen3_8b train [--reps 20]       # where a first pass goes

timing: runs `python -m sims.benchmarks.speed --seconds S` (--per-layout: also its --per-layout, one simulate call
per layout) RUNS times in the base tree and in this one, alternating (base, this, base, ...: the dev CPU is shared,
so both see the same load), each with its tree on PYTHONPATH; writes each run's output to DIR/base_N.txt and
DIR/branch_N.txt (single_base_N.txt and single_branch_N.txt for --per-layout) with the 1-minute load average on the
first line, then prints the medians table (medians).
harness: the same alternation of `speed_compare.py first-passes --reps REPS` (DIR/harness_base_N.txt,
harness_branch_N.txt): in one process per run, each sweep's median over REPS first passes (every cache cleared, the
graph kept built, the heap collected), through simulate_many, in us per configuration; steadier than the benchmark's
single first pass per sweep (whose first sweep, Qwen3-8B prefill, also pays the interpreter's cold start).
equality: dumps every summary field and per-op row of the speed sweep (MODELS x WORKLOADS, dtype bf16/fp8/fp32,
zero and recompute for training, built-in factors and the calibrated H100 table: 7,168 configurations) in both
trees through simulate_many (and in this one also through one simulate call per layout), writes them to
DIR/*.pkl and prints how many configurations are bit-identical and the worst relative difference.
profile: cProfile over REPS first passes of one of the speed benchmark's sweeps through simulate_many (every cache
cleared before each, the graph kept built, as sims.benchmarks.speed's first pass), functions by cumulative time.
"""

from __future__ import annotations

import argparse
import os
import pickle
import statistics
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parents[2]  # this tree's root (the base tree runs this file by its path)
MODES = ("prefill", "decode", "train")
TABLE = "sims/calibration/tables/h100.json"


def _run(tree: Path, args: list[str], out: Path) -> None:
    load = os.getloadavg()[0]
    # one BLAS thread: the benchmark reads its own thread's CPU time, which a BLAS worker thread's work would escape
    env = {**os.environ, "PYTHONPATH": str(tree), "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1",
           "MKL_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, *args], cwd=tree, env=env, capture_output=True, text=True, check=True)
    out.write_text(f"load {load:.2f}\n{done.stdout}")


def timing(base: Path, runs: int, seconds: float, per_layout: bool, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    speed = ["-m", "sims.benchmarks.speed", "--seconds", str(seconds)]
    for n in range(1, runs + 1):
        _run(base, speed, out / f"base_{n}.txt")
        _run(HERE, speed, out / f"branch_{n}.txt")
        if per_layout:
            _run(base, [*speed, "--per-layout"], out / f"single_base_{n}.txt")
            _run(HERE, [*speed, "--per-layout"], out / f"single_branch_{n}.txt")
    print(medians(out))


def harness(base: Path, runs: int, reps: int, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    passes = [str(Path(__file__).resolve()), "first-passes", "--reps", str(reps)]
    for n in range(1, runs + 1):
        _run(base, passes, out / f"harness_base_{n}.txt")
        _run(HERE, passes, out / f"harness_branch_{n}.txt")
    print(medians(out))


def first_passes(reps: int) -> None:
    """Per sweep of the speed benchmark, the median over `reps` first passes through simulate_many, in us per
    configuration (the tree on PYTHONPATH)."""
    import time

    for model, mode, hf, hardware, points in _sweeps():
        seconds = []
        for _ in range(reps):
            _fresh(hf, mode)
            start = time.thread_time()
            _simulate_many(hf, hardware, points)
            seconds.append((time.thread_time() - start) / len(points))
        print(f"{model:<18} {mode:<8} {len(points):>3} configs {1e6 * statistics.median(seconds):8.1f} us/config")


def _read(folder: Path, prefix: str) -> tuple[dict, list[float]]:
    """(model, mode) -> [(repeated configs/s, first-pass configs/s)] over the runs, and their load averages."""
    runs, loads = {}, []
    for path in sorted(folder.glob(f"{prefix}_*.txt")):
        lines = path.read_text().splitlines()
        loads.append(float(lines[0].split()[1]))
        for line in lines[1:]:
            parts = line.split()
            if len(parts) == 5 and parts[1] in MODES:
                runs.setdefault((parts[0], parts[1]), []).append((float(parts[2]), float(parts[4])))
    return runs, loads


def medians(folder: Path) -> str:
    """The medians tables of a timing folder: the benchmark's first-pass and repeated configurations/s, base ->
    branch (through simulate_many, and one simulate per layout where the folder has those runs), and the harness's
    us per configuration where it has its runs."""
    lines = []
    for title, prefix in (("simulate_many", ""), ("one simulate per layout", "single_")):
        (base, base_loads), (branch, branch_loads) = _read(folder, f"{prefix}base"), _read(folder, f"{prefix}branch")
        if not base:
            continue
        lines.append(f"{title}\n{'model':<18} {'mode':<8} {'first pass: base -> branch':>31} "
                     f"{'repeated: base -> branch':>26}  runs")
        for key, base_runs in base.items():
            first = [statistics.median(r[1] for r in runs[key]) for runs in (base, branch)]
            repeated = [statistics.median(r[0] for r in runs[key]) for runs in (base, branch)]
            met = "  >= 20k" if first[1] >= 20_000 else ""
            lines.append(f"{key[0]:<18} {key[1]:<8} {first[0]:>10,.0f} -> {first[1]:>7,.0f} "
                         f"({first[1] / first[0]:.2f}x) {repeated[0]:>12,.0f} -> {repeated[1]:>7,.0f}  "
                         f"{len(base_runs)}/{len(branch[key])}{met}")
        lines.append(f"1-minute load average at each run's start: base {', '.join(f'{x:.2f}' for x in base_loads)}; "
                     f"branch {', '.join(f'{x:.2f}' for x in branch_loads)}\n")
    (base, base_loads), (branch, branch_loads) = _read_harness(folder, "base"), _read_harness(folder, "branch")
    if base:
        lines.append("harness (median over runs of each run's median first pass), us per configuration, base -> branch")
        for key, values in base.items():
            before, after = statistics.median(values), statistics.median(branch[key])
            lines.append(f"{key[0]:<18} {key[1]:<8} {before:7.1f} -> {after:7.1f} ({before / after:.2f}x faster; "
                         f"{1e6 / after:,.0f} configs/s)  {len(values)}/{len(branch[key])}")
        lines.append(f"1-minute load average at each run's start: base {', '.join(f'{x:.2f}' for x in base_loads)}; "
                     f"branch {', '.join(f'{x:.2f}' for x in branch_loads)}")
    return "\n".join(lines)


def _read_harness(folder: Path, prefix: str) -> tuple[dict, list[float]]:
    runs, loads = {}, []
    for path in sorted(folder.glob(f"harness_{prefix}_*.txt")):
        lines = path.read_text().splitlines()
        loads.append(float(lines[0].split()[1]))
        for line in lines[1:]:
            parts = line.split()
            if len(parts) == 6 and parts[1] in MODES:
                runs.setdefault((parts[0], parts[1]), []).append(float(parts[4]))
    return runs, loads


def dump(path: Path, per_layout: bool) -> None:
    """Every result of the equality sweep, from the tree on PYTHONPATH, pickled to `path`."""
    import yaml

    from sims import simulate, simulate_many
    from sims.benchmarks.speed import MODELS, REPO, WORKLOADS, sweep_points
    from sims.hardware import read_hardware_file

    out = []
    for table in (None, TABLE):
        hardware = read_hardware_file(REPO / "conf/hardware/h100.yaml")
        hardware["efficiency_table"], hardware["nodes"] = table, 2
        for model in MODELS:
            hf = yaml.safe_load((REPO / f"conf/model/{model}.yaml").read_text())["hf_config"]
            for workload in WORKLOADS:
                variants = [{}, {"dtype": "fp8"}, {"dtype": "fp32"}]
                variants += [{"zero": True}, {"recompute": True}] if workload["mode"] == "train" else []
                for variant in variants[:1] if table else variants:
                    points = [(layout, {**workload, "batch": batch, **variant}) for layout, batch in sweep_points()]
                    if per_layout:
                        results = [simulate(hf, hardware, layout, point) for layout, point in points]
                    else:
                        results = simulate_many(hf, hardware, [lay for lay, _ in points], [p for _, p in points])
                    for (layout, point), r in zip(points, results):
                        key = (table, model, workload["mode"], tuple(variant.items()), tuple(layout.items()),
                               point["batch"])
                        out.append((key, r.summary(), r.breakdown_rows() if r.status == "ok" else []))
    path.write_bytes(pickle.dumps(out))


def compare(first: Path, second: Path) -> str:
    a, b = pickle.loads(first.read_bytes()), pickle.loads(second.read_bytes())
    assert [x[0] for x in a] == [x[0] for x in b], "the two dumps hold different configurations"
    worst, exact = 0.0, 0

    def walk(x, y):
        nonlocal worst
        if isinstance(x, dict):
            assert x.keys() == y.keys()
            for k in x:
                walk(x[k], y[k])
        elif isinstance(x, list):
            assert len(x) == len(y), (len(x), len(y))
            for p, q in zip(x, y):
                walk(p, q)
        elif isinstance(x, float) and isinstance(y, float):
            if x != y:  # a NaN on either side counts as the worst difference
                difference = abs(x - y) / max(abs(x), abs(y))
                worst = max(worst, difference) if difference == difference else float("inf")
        else:
            assert x == y, (x, y)

    for (_, s1, r1), (_, s2, r2) in zip(a, b):
        walk(s1, s2)
        walk(r1, r2)
        exact += s1 == s2 and r1 == r2
    return (f"{first.name} vs {second.name}: {len(a)} configurations, {exact} bit-identical, "
            f"worst relative difference {worst:.3g}")


def equality(base: Path, out: Path) -> None:
    out.mkdir(parents=True, exist_ok=True)
    me = str(Path(__file__).resolve())
    runs = ((base, "base.pkl", []), (HERE, "branch.pkl", []), (HERE, "branch_per_layout.pkl", ["--per-layout"]))
    for tree, name, extra in runs:
        env = {**os.environ, "PYTHONPATH": str(tree)}
        subprocess.run([sys.executable, me, "dump", str(out / name), *extra], cwd=tree, env=env, check=True)
    print(compare(out / "base.pkl", out / "branch.pkl"))
    print(compare(out / "branch.pkl", out / "branch_per_layout.pkl"))


def _sweeps(only: tuple[str, str] | None = None):
    """(model, mode, hf_config, hardware, valid points) of the speed benchmark's sweeps (the tree on PYTHONPATH)."""
    import yaml

    from sims import build_graph
    from sims.benchmarks.speed import MODELS, REPO, WORKLOADS, sweep_points
    from sims.hardware import hardware_spec, read_hardware_file
    from sims.workload import layout_problem, parse_layout, parse_workload

    hardware = read_hardware_file(REPO / "conf/hardware/h100.yaml")
    hardware["efficiency_table"], hardware["nodes"] = None, 2
    hw = hardware_spec(hardware)
    for model in MODELS:
        hf = yaml.safe_load((REPO / f"conf/model/{model}.yaml").read_text())["hf_config"]
        for workload in WORKLOADS:
            mode = workload["mode"]
            if only and only != (model, mode):
                continue
            meta = build_graph(hf, mode).meta
            points = [(layout, {**workload, "batch": batch}) for layout, batch in sweep_points()]
            yield model, mode, hf, hardware, [(lay, p) for lay, p in points
                                              if layout_problem(meta, hw, parse_layout(lay), parse_workload(p)) is None]


def _fresh(hf: dict, mode: str) -> None:
    """Nothing costed, the graph built, the heap collected: a sweep's first pass starts here."""
    import gc

    from sims.builders import graph_and_counts
    from sims.cache import clear_caches

    clear_caches()
    graph_and_counts(hf, mode)
    gc.collect()


def _simulate_many(hf: dict, hardware: dict, points: list) -> None:
    from sims import simulate_many

    simulate_many(hf, hardware, [layout for layout, _ in points], [point for _, point in points])


def profile(model: str, mode: str, reps: int, top: int) -> None:
    import cProfile
    import pstats

    _, _, hf, hardware, points = next(_sweeps((model, mode)))
    profiler = cProfile.Profile()
    for _ in range(reps):
        _fresh(hf, mode)
        profiler.enable()
        _simulate_many(hf, hardware, points)
        profiler.disable()
    print(f"{model} {mode}: {len(points)} configurations, {reps} first passes")
    pstats.Stats(profiler).sort_stats("cumulative").print_stats(top)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("timing", help="alternating speed runs of the base tree and this one, then the medians")
    run.add_argument("base", type=Path, help="the base tree's root (e.g. a git worktree of the base commit)")
    run.add_argument("--runs", type=int, default=5)
    run.add_argument("--seconds", type=float, default=0.3, help="sims.benchmarks.speed --seconds")
    run.add_argument("--per-layout", action="store_true", help="also time this tree with one simulate per layout")
    run.add_argument("--out", type=Path, required=True, help="folder for each run's output")
    sub.add_parser("medians", help="the medians table of a timing folder").add_argument("folder", type=Path)
    same = sub.add_parser("equality", help="dump the equality sweep in both trees and compare")
    same.add_argument("base", type=Path)
    same.add_argument("--out", type=Path, required=True, help="folder for the dumps")
    one = sub.add_parser("dump", help="dump the equality sweep of the tree on PYTHONPATH")
    one.add_argument("path", type=Path)
    one.add_argument("--per-layout", action="store_true", help="one simulate call per layout, not simulate_many")
    both = sub.add_parser("harness", help="alternating in-process first-pass medians of the base tree and this one")
    both.add_argument("base", type=Path)
    both.add_argument("--runs", type=int, default=5)
    both.add_argument("--reps", type=int, default=15, help="first passes per sweep and run")
    both.add_argument("--out", type=Path, required=True)
    sub.add_parser("first-passes", help="in-process first-pass medians of the tree on PYTHONPATH").add_argument(
        "--reps", type=int, default=15)
    prof = sub.add_parser("profile", help="cProfile first passes of one sweep through simulate_many")
    prof.add_argument("model")
    prof.add_argument("mode", choices=MODES)
    prof.add_argument("--reps", type=int, default=20)
    prof.add_argument("--top", type=int, default=45, help="functions listed")
    args = parser.parse_args()
    if args.command == "timing":
        timing(args.base.resolve(), args.runs, args.seconds, args.per_layout, args.out.resolve())
    elif args.command == "medians":
        print(medians(args.folder))
    elif args.command == "harness":
        harness(args.base.resolve(), args.runs, args.reps, args.out.resolve())
    elif args.command == "first-passes":
        first_passes(args.reps)
    elif args.command == "profile":
        profile(args.model, args.mode, args.reps, args.top)
    elif args.command == "equality":
        equality(args.base.resolve(), args.out.resolve())
    else:
        dump(args.path, args.per_layout)


if __name__ == "__main__":
    main()
