"""SFT and DPO step time, tokens/s and MFU of our backend, and its overhead over the same TRL script run directly.

Qwen2.5-0.5B shapes with random-init weights (from conf/model's hf_config: no download), full fine-tuning,
bf16 autocast over fp32 weights, sequence 1024. Both sides run the same workload (workload.py) one after
the other in this call; the ratio compares the median step periods (start to start: compute, logging,
callbacks) after warm-up.

    python -m framework.backends.torch.benchmarks.step --out bench.json              (one GPU, ~4 min)
    python -m framework.backends.torch.benchmarks.step --tiny --out /tmp/bench.json  (CPU smoke test)
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from pathlib import Path

from omegaconf import OmegaConf

from framework.backends.torch.benchmarks.workload import (crucible_overrides, median, train_flops_per_token,
                                                          write_data)
from framework.core.paths import REPO_ROOT
from framework.core.plain import to_plain

DATA_GROUP = {"sft": "chat_sample", "dpo": "preference_sample"}


def model_dir(name: str, cache: Path) -> tuple[str, dict]:
    from framework.models.tiny import resolve_model_dir

    model = to_plain(OmegaConf.load(REPO_ROOT / "conf" / "model" / f"{name}.yaml"))
    model.update(path=None, random_init=True)
    return resolve_model_dir(model, cache), model["hf_config"]


def step_periods(rows: list[dict]) -> list[float]:
    """Seconds between consecutive training rows of metrics.jsonl (the logger's time_s): like trl_direct's
    periods, a step's compute plus everything our backend does around it (callbacks, logging)."""
    times = [r["time_s"] for r in rows if "loss" in r]
    return [after - before for before, after in zip(times, times[1:])]


def timed(values: list[float]) -> list[float]:
    """Steps after warm-up (the first third, at least two: allocator, autotuning)."""
    return values[max(2, len(values) // 3):]


def run_ours(task: str, args, model: str, data: Path, work: Path) -> tuple[list[float], float]:
    run_dir = work / f"ours_{task}"
    shutil.rmtree(run_dir, ignore_errors=True)  # a run dir with records would append to (or resume) them
    command = [sys.executable, str(REPO_ROOT / "run.py"),
               *crucible_overrides(task, args.batch, args.steps, args.sequence, not args.tiny),
               f"model={args.model}", f"model.path={model}", "model.random_init=false", f"hardware={args.hardware}",
               f"data={DATA_GROUP[task]}", "data.source=local", f"data.path={data}",
               f"hydra.run.dir={run_dir}", "progress=false"]
    subprocess.run(command, check=True)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    tokens = [r["num_tokens"] for r in rows if "num_tokens" in r]
    return step_periods(rows), tokens[-1] / len(tokens)


def run_direct(task: str, args, model: str, data: Path, max_length: int, work: Path) -> list[float]:
    out = work / f"trl_{task}.json"
    command = [sys.executable, "-m", "framework.backends.torch.benchmarks.trl_direct", "--task", task,
               "--model", model, "--data", str(data), "--batch", str(args.batch), "--steps", str(args.steps),
               "--max-length", str(max_length), "--out", str(out), *([] if args.tiny else ["--bf16"])]
    subprocess.run(command, check=True, cwd=REPO_ROOT)
    return json.loads(out.read_text())["step_time_s"]


def benchmark(task: str, args, model: str, hf_config: dict, peak_tflops: float, work: Path) -> dict:
    from transformers import AutoTokenizer

    prompt_tokens = write_data(work / f"data_{task}", task, args.sequence, AutoTokenizer.from_pretrained(model))
    max_length = args.sequence if task == "sft" else prompt_tokens + args.sequence // 2
    ours, tokens_per_step = run_ours(task, args, model, work / f"data_{task}", work)
    direct = run_direct(task, args, model, work / f"data_{task}", max_length, work)
    ours_s, direct_s = median(timed(ours)), median(timed(direct))
    per_token = train_flops_per_token(hf_config, max_length, reference_forward=task == "dpo")
    return {"ours_step_time_s": ours_s, "trl_step_time_s": direct_s, "overhead_ratio": ours_s / direct_s,
            "tokens_per_step": tokens_per_step, "tokens_per_s": tokens_per_step / ours_s,
            "trl_tokens_per_s": tokens_per_step / direct_s, "model_flops_per_token": per_token,
            "mfu": per_token * tokens_per_step / ours_s / (peak_tflops * 1e12), "sequence": max_length,
            "batch": args.batch, "steps_timed": len(timed(ours)), "ours_step_times_s": ours, "trl_step_times_s": direct}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument("--tasks", default="sft,dpo")
    parser.add_argument("--tiny", action="store_true", help="tiny_qwen2 on the CPU, short: a smoke test")
    parser.add_argument("--steps", type=int)
    parser.add_argument("--batch", type=int)
    parser.add_argument("--work-dir", default="outputs/bench_torch")
    args = parser.parse_args()
    args.model, args.hardware = ("tiny_qwen2", "cpu") if args.tiny else ("qwen2_5_0_5b_instruct", "h100")
    args.sequence = 64 if args.tiny else 1024
    args.steps = args.steps or (6 if args.tiny else 30)
    args.batch = args.batch or (2 if args.tiny else 8)
    work = Path(args.work_dir).resolve()
    model, hf_config = model_dir(args.model, work / "models")
    hardware = OmegaConf.load(REPO_ROOT / "conf" / "hardware" / f"{args.hardware}.yaml").hardware
    peak = hardware.peak_tflops["fp32" if args.tiny else "bf16"]
    results = {task: benchmark(task, args, model, hf_config, peak, work) for task in args.tasks.split(",")}
    import torch

    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    report = {"device": device, "model": args.model, "peak_tflops": peak, "tasks": results}
    Path(args.out).write_text(json.dumps(report, indent=1))
    for task, r in results.items():
        print(f"{task}: ours {r['ours_step_time_s']:.4f}s/step, TRL {r['trl_step_time_s']:.4f}s/step, "
              f"overhead x{r['overhead_ratio']:.3f}, {r['tokens_per_s']:.0f} tokens/s, MFU {r['mfu']:.1%}")


if __name__ == "__main__":
    main()
