"""The GRPO recipe as a user types it, several runs one after the other on one machine, and their report.

Each run is `python run.py <base> <its overrides>` in its own run dir under a time limit; the report (also in
OUT/summary.txt) gives per run what the preflight picked and predicted (the log's "auto", "preflight:" and mesh
lines), the measured step (`measured_step_s`: the median of steps 2..), measured / predicted, each step's phases,
and the run's ratio to the first run's step (`--run` order: put the baseline first).

    python3 -m framework.backends.maxtext.benchmarks.recipe_runs --out OUT --hardware h200 \\
        --run one_gpu "CUDA_VISIBLE_DEVICES=0 hardware.devices_per_node=1" \\
        --run lag2 "hardware.devices_per_node=4 parallel.rollout.placement=separate grpo.rollout_lag=2"

A run's words (split as a shell would: quote a value with spaces) NAME=VALUE with an upper-case NAME set its
environment; the rest are Hydra overrides. `--cpu`
runs the CPU recipe on forced host devices instead (checks a script without a GPU). Checkpoints and exports
are deleted after each run; everything else stays in OUT/<name>/ and OUT/<name>.log.

Time to the first step (issue 15): `--cache DIR` runs every run with CRUCIBLE_CACHE=DIR (its model builds and
JAX's compilation cache, DIR/jax) and `--cold NAME` empties DIR before run NAME; each run's report then adds its
wall time launch to exit, `startup_s`, step 1, when the first step ended after launch, steps 2.., the updates,
the start-up timeline and DIR/jax's entries before and after (first_step.py), also in OUT/first_step.json:

    python3 -m framework.backends.maxtext.benchmarks.recipe_runs --out OUT --hardware h100 --steps 4 \\
        --cache /tmp/crucible_cache --cold cold --run cold "" --run warm ""
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import time
from pathlib import Path

from framework.backends.maxtext.benchmarks.first_step import check_cache, compile_cache_entries, empty_cache, figures
from framework.backends.maxtext.benchmarks.first_step import lines as first_step_lines

GPU_BASE = ("recipe=grpo_gsm8k model.random_init=true data=gsm8k_sample grpo.eval.every=0 grpo.checkpoint.every=0 "
            "grpo.export_hf=false progress=false")
CPU_BASE = ("recipe=grpo_arithmetic_cpu hardware=cpu grpo.preflight=true hardware.intra_node_gb_s=20 progress=false "
            "grpo.checkpoint.every=0")
RUN_NAME = re.compile(r"(?!\.\.?$)[\w.-]+")  # a folder name under --out (not . or ..)
LOG_LINES = re.compile(r"auto candidate|auto ->|preflight:|rollout mesh|grpo: mesh")
SUMMARY_KEYS = ("layout_search_choice", "rollout_groups", "micro_batch_size", "remat", "measured_step_s",
                "preflight_predicted_step_s", "preflight_stage_s", "preflight_rollout_memory_gb", "preflight_update_memory_gb",
                "aot_fallbacks", "staleness")
STEP_KEYS = ("step_time_s", "rollout_time_s", "update_time_s", "reward_time_s", "prefetch_time_s", "reshard_time_s",
             "rollout_wait_time_s", "staleness", "update_dispatch_time_s")


def split_run(words: str) -> tuple[dict[str, str], list[str]]:
    """(environment, overrides) of a run's words."""
    env, overrides = {}, []
    for word in shlex.split(words):
        name, _, value = word.partition("=")
        if name.isupper():
            env[name] = value
        else:
            overrides.append(word)
    return env, overrides


def run_one(out: Path, name: str, words: str, base: str, limit_s: int,
            cache: Path | None = None, cold: bool = False) -> tuple[list[str], dict | None]:
    """One run (in `cache` when given, emptied first when `cold`); the report's lines for it and, with a
    cache, its first-step figures (first_step.py)."""
    env, overrides = split_run(words)
    if cache:
        if cold:
            empty_cache(cache)
        env = {"CRUCIBLE_CACHE": str(cache.resolve()), **env}
        entries_before = compile_cache_entries(cache)
    command = [sys.executable, "run.py", *base.split(), *overrides, f"hydra.run.dir={out / name}"]
    started = time.perf_counter()
    with open(out / f"{name}.log", "w") as log:
        try:
            code = subprocess.run(command, stdout=log, stderr=subprocess.STDOUT, env={**os.environ, **env},
                                  timeout=limit_s).returncode
        except subprocess.TimeoutExpired:
            code = "timeout"
    wall_s = time.perf_counter() - started
    lines = [f"== {name}: {' '.join(command[1:])} ({env or 'no env'}) rc={code} {wall_s:.0f} s"]
    lines += [re.sub(r"^\[[^]]*\]\[[^]]*\]\[INFO\] - ", "", line)[:260]
              for line in (out / f"{name}.log").read_text(errors="replace").splitlines() if LOG_LINES.search(line)]
    lines += describe(out / name, name)
    found = None
    if cache:
        found = {"rc": code, **figures(out / name, wall_s, cold, (entries_before, compile_cache_entries(cache)))}
        lines += first_step_lines(name, found)
    for folder in ("checkpoints", "hf_export"):
        shutil.rmtree(out / name / folder, ignore_errors=True)
    return lines, found


def describe(run_dir: Path, name: str) -> list[str]:
    try:
        result = json.loads((run_dir / "summary.json").read_text())["result"]
        rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    except (OSError, KeyError, ValueError) as error:
        return [f"{name}: no summary ({error})"]
    metrics = result["metrics"]
    picked = {key: _rounded(metrics[key]) for key in SUMMARY_KEYS if key in metrics}
    lines = [f"{name} status {result.get('status')} {picked}"]
    if metrics.get("measured_step_s") and metrics.get("preflight_predicted_step_s"):
        lines.append(f"{name} measured / predicted {metrics['measured_step_s'] / metrics['preflight_predicted_step_s']:.3f}")
    lines.append(f"{name} steps {STEP_KEYS}: " + str([tuple(_rounded(row.get(key)) for key in STEP_KEYS) for row in rows]))
    return lines + zero_gradient_note(name, rows)


def zero_gradient_note(name: str, rows: list[dict]) -> list[str]:
    """A line when most updates ran on all-zero gradients (a random-init model earns no reward: advantages 0,
    and with beta 0 nothing else reaches the weights). Such an update is no real one's time: on an H200 its
    GEMMs on zeros kept the SM clock near 1.9 GHz, while real gradients hold the card at its power cap near
    1.5 GHz and the update took 13-15% longer (docs/simulator.md, "Session 23")."""
    norms = [row["grad_norm"] for row in rows if isinstance(row.get("grad_norm"), (int, float))]
    zero = sum(norm == 0 for norm in norms)
    if not norms or 2 * zero <= len(norms):
        return []
    return [f"{name} NOTE: {zero} of {len(norms)} updates had grad_norm 0 (all-zero gradients): their time is "
            "shorter than a real update's"]


def ratios(out: Path, names: list[str]) -> list[str]:
    """Each run's step and its ratio to the first run's (none when the first has no step)."""
    lines, base = [], None
    for index, name in enumerate(names):
        try:
            metrics = json.loads((out / name / "summary.json").read_text())["result"]["metrics"]
        except (OSError, KeyError, ValueError):
            lines.append(f"{name}: no summary")
            continue
        step = metrics.get("measured_step_s")
        base = step if index == 0 else base
        ratio = f" -> {base / step:.2f}x {names[0]}" if base and step else ""
        lines.append(f"{name}: {step} s per step (median of steps 2..), predicted "
                     f"{metrics.get('preflight_predicted_step_s')}{ratio}")
    return lines


def _rounded(value):
    return round(value, 4) if isinstance(value, float) else value


def check_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """What would otherwise end in a traceback or in runs that measure nothing: one argparse line."""
    for option, value in (("--steps", args.steps), ("--limit-s", args.limit_s)):
        if value < 1:
            parser.error(f"{option}: {value}; valid: >= 1")
    if args.out.exists() and not args.out.is_dir():
        parser.error(f"--out {args.out}: is a file; valid: a folder (new, or without these runs)")
    for name, words in args.run:
        if not RUN_NAME.fullmatch(name):
            parser.error(f"--run {name}: a run's name is its folder under --out; valid: letters, digits, _ - .")
        try:
            split_run(words)
        except ValueError as error:
            parser.error(f"--run {name}: {words!r}: {error}; quote a value as a shell would")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--run", nargs=2, action="append", metavar=("NAME", "WORDS"), required=True)
    parser.add_argument("--hardware", default="h100", help="the hardware= option of the GPU runs")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--limit-s", type=int, default=150, help="each run's time limit")
    parser.add_argument("--cpu", action="store_true", help="the CPU recipe on host devices")
    parser.add_argument("--cache", type=Path, help="every run's CRUCIBLE_CACHE (model builds, JAX's compilation "
                        "cache); adds the first-step report and OUT/first_step.json")
    parser.add_argument("--cold", action="append", default=[], metavar="NAME",
                        help="empty the --cache directory before run NAME (repeatable); the others run warm")
    args = parser.parse_args(argv)
    check_args(parser, args)
    names = [name for name, _ in args.run]
    if repeated := sorted({name for name in names if names.count(name) > 1}):  # one run dir and report each
        parser.error(f"--run {repeated[0]}: named twice; give each run its own name")
    if args.cold and not args.cache:
        parser.error("--cold needs --cache DIR (the directory to empty)")
    if unknown := sorted(set(args.cold) - set(names)):
        parser.error(f"--cold {unknown[0]}: no such --run; runs: {', '.join(names)}")
    if args.cache and (problem := check_cache(args.cache)):
        parser.error(problem)
    if reused := [name for name in names if (args.out / name).exists()]:  # its metrics.jsonl would be appended to
        parser.error(f"--out {args.out}: holds run {reused[0]!r} of an earlier call; name a new --out")
    args.out.mkdir(parents=True, exist_ok=True)
    base = f"{CPU_BASE if args.cpu else GPU_BASE + ' hardware=' + args.hardware} grpo.steps={args.steps}"
    first = {}
    with open(args.out / "summary.txt", "w") as summary:
        for name, words in args.run:
            lines, first[name] = run_one(args.out, name, words, base, args.limit_s, args.cache, name in args.cold)
            for line in lines:
                print(line, flush=True)
                summary.write(line + "\n")
            if args.cache:  # after each run: a call cut short keeps the runs it finished
                (args.out / "first_step.json").write_text(json.dumps(
                    {"cache": str(args.cache), "base": base, "runs": first}, indent=1) + "\n")
        for line in ratios(args.out, names):
            print(line)
            summary.write(line + "\n")

if __name__ == "__main__":
    main()
