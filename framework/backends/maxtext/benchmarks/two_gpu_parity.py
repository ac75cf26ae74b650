"""Issue 11 on a 2-GPU machine: the GRPO recipe with parallel.fsdp=2 and with parallel.dp=2 against one GPU.

    python -m framework.backends.maxtext.benchmarks.two_gpu_parity [--steps 3] [--out DIR] [override ...]
    python -m framework.backends.maxtext.benchmarks.two_gpu_parity --recipe grpo_arithmetic_cpu   # CPU check

Runs `python run.py recipe=grpo_gsm8k grpo.steps=N` three times (one GPU via CUDA_VISIBLE_DEVICES=0;
both GPUs with parallel.fsdp=2; both with parallel.dp=2, fsdp=1), then prints JSON: per step and layout
the loss, grad norm and reward mean, the largest relative difference to the one-GPU run, and whether each
is within --rtol (default 2e-2: bfloat16 matmuls with a different reduction order across devices; the
sampled completions are the same while the logits agree to that precision, so rewards should match
exactly in the first steps). Exit status 1 when a layout differs by more than --rtol. On CPU
(`--recipe grpo_arithmetic_cpu grpo.max_new_tokens=8`, float32, 2 steps) fsdp=2 and dp=2 match one
device to 3e-7 in grad norm and exactly in loss, rewards and accuracy.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from framework.core.loggers import read_metrics
from framework.core.paths import REPO_ROOT

LAYOUTS = {"one_gpu": (["parallel.fsdp=1"], "0"), "fsdp2": (["parallel.fsdp=2", "parallel.dp=1"], "0,1"),
           "dp2": (["parallel.dp=2", "parallel.fsdp=1"], "0,1")}
COMPARED = ("loss", "grad_norm", "reward_mean", "accuracy", "entropy", "completion_length")


def run_layout(name: str, recipe: str, steps: int, out: Path, extra: list[str]) -> list[dict]:
    overrides, devices = LAYOUTS[name]
    run_dir = out / name
    command = [sys.executable, str(REPO_ROOT / "run.py"), f"recipe={recipe}", f"grpo.steps={steps}",
               "grpo.eval.every=0", "grpo.export_hf=false", "grpo.checkpoint.every=0", "progress=false",
               *overrides, *extra, f"hydra.run.dir={run_dir}"]
    done = subprocess.run(command, env={**os.environ, "CUDA_VISIBLE_DEVICES": visible(devices)},
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(f"{name} failed (exit {done.returncode}): {done.stderr[-2000:]}")
    return read_metrics(run_dir / "metrics.jsonl")


def visible(devices: str) -> str:
    """The layout's GPUs ("0,1") as indices into the caller's CUDA_VISIBLE_DEVICES when it set one."""
    if "CUDA_VISIBLE_DEVICES" not in os.environ:
        return devices
    given = [d.strip() for d in os.environ["CUDA_VISIBLE_DEVICES"].split(",") if d.strip()]
    wanted = [int(i) for i in devices.split(",")]
    if len(given) <= max(wanted):
        raise SystemExit(f"two_gpu_parity: CUDA_VISIBLE_DEVICES={os.environ['CUDA_VISIBLE_DEVICES']!r} lists "
                         f"{len(given)} GPU(s); the layouts need {max(wanted) + 1}")
    return ",".join(given[i] for i in wanted)


def relative(a: float, b: float) -> float:
    """Relative difference; values near zero (the GRPO loss is ~0 by construction) count on a 1e-3 scale."""
    return abs(a - b) / max(abs(b), 1e-3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--recipe", default="grpo_gsm8k")
    parser.add_argument("--rtol", type=float, default=2e-2)
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "outputs" / "two_gpu_parity")
    parser.add_argument("overrides", nargs="*", help="extra run.py overrides for every layout")
    args = parser.parse_args()
    rows = {name: run_layout(name, args.recipe, args.steps, args.out, args.overrides) for name in LAYOUTS}
    report, ok = {"rtol": args.rtol, "steps": args.steps, "layouts": {}}, True
    for name in ("fsdp2", "dp2"):
        worst = {key: max(relative(r[key], base[key]) for r, base in zip(rows[name], rows["one_gpu"])) for key in COMPARED}
        within = all(value <= args.rtol for value in worst.values())
        ok = ok and within
        report["layouts"][name] = {"max_relative_difference": worst, "within_rtol": within,
                                   "rows": [{k: r[k] for k in ("step", *COMPARED)} for r in rows[name]]}
    report["layouts"]["one_gpu"] = {"rows": [{k: r[k] for k in ("step", *COMPARED)} for r in rows["one_gpu"]]}
    print(json.dumps(report, indent=1))
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
