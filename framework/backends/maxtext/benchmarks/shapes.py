"""The shapes and command line both GRPO benchmarks share, so that they always time the same work."""

from __future__ import annotations

import argparse

from framework.core.dtypes import SHORT
from framework.core.paths import load_conf

FULL = {"model": "qwen2_5_0_5b_instruct", "hardware": "h100", "prompts": 16, "generations": 8,
        "prompt_tokens": 256, "new_tokens": 256, "micro_batch": 16, "dtype": "bfloat16", "steps": 5, "warmup": 2}
TINY = {"model": "tiny_qwen2", "hardware": "cpu", "prompts": 2, "generations": 2, "prompt_tokens": 16,
        "new_tokens": 16, "micro_batch": 4, "dtype": "float32", "steps": 2, "warmup": 1}


def parse_args(description: str, argv: list[str] | None = None,
               extra: dict[str, dict] | None = None) -> argparse.Namespace:
    """--tiny picks TINY, else FULL; any shape can be overridden (--prompt-tokens 512); `extra` adds options."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--tiny", action="store_true", help="tiny model and shapes (a CPU check of the script)")
    for flag, options in (extra or {}).items():
        parser.add_argument(flag, **options)
    for name, value in FULL.items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(value), default=None,
                            help=f"default {value} ({TINY[name]} with --tiny)")
    args = parser.parse_args(argv)
    for name, value in (TINY if args.tiny else FULL).items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    return args


def step_report(args: argparse.Namespace, rows: int, step_s: float, rollout_s: float, update_s: float,
                devices: int = 1) -> dict:
    """The shapes and the derived figures both benchmarks print: throughputs and update MFU from one
    FLOPs model (benchmarks/flops.py) and the peak of --hardware at --dtype, times the `devices` the step ran on."""
    from framework.backends.maxtext.benchmarks.flops import grpo_update_flops

    peak = load_conf("hardware", args.hardware)["hardware"]["peak_tflops"][SHORT[args.dtype]]
    flops = grpo_update_flops(load_conf("model", args.model)["hf_config"], rows, args.prompt_tokens, args.new_tokens)
    return {
        "model": args.model, "dtype": args.dtype, "prompts": args.prompts, "generations": args.generations,
        "prompt_tokens": args.prompt_tokens, "new_tokens": args.new_tokens, "micro_batch": args.micro_batch,
        "timed_steps": args.steps, "warmup_steps": args.warmup, "step_s": step_s, "rollout_s": rollout_s,
        "update_s": update_s, "rollout_tokens_per_s": rows * args.new_tokens / rollout_s,
        "update_tokens_per_s": rows * (args.prompt_tokens + args.new_tokens) / update_s,
        "update_tflops": flops / update_s / 1e12, "peak_tflops": peak, "hardware": args.hardware,
        "update_mfu": flops / update_s / (peak * 1e12 * devices) if peak else None,
    }
