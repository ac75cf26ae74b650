"""Time one LoRA DPO optimizer step: backend mlx (this trainer) vs TRL's DPOTrainer (PEFT), same CPU, model, data.

    python -m framework.backends.mlx.benchmarks.dpo_step --out outputs/bench/mlx_dpo_step.json

Both get the same random-init model (an HF directory built offline by framework.models.tiny), the
first --pairs pairs of the shipped preference sample, LoRA rank 8 on q/k/v/o, the base model as the
reference, global batch --batch in micro-batches of --micro (gradient accumulation), fp32. A step is
the time between the ends of consecutive optimizer steps; the first --warmup steps (compilation,
allocation) are dropped, the median of the rest is reported, in wall time and in this process's CPU
time (on a machine shared with other jobs the CPU time is the steadier figure). mlx-lm-lora (PyPI), the DPO trainer MLX
users pick today, is timed only when it is already installed; otherwise the JSON says it was not
measured. Apple silicon was not available where this was written: numbers are MLX's CPU backend.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import yaml

from framework.core.paths import REPO_ROOT

TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj"]


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="tiny_qwen2", help="a conf/model file (built with random weights)")
    parser.add_argument("--pairs", type=int, default=64)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--micro", type=int, default=4)
    parser.add_argument("--max-length", type=int, default=128, help="max prompt and max completion tokens")
    parser.add_argument("--steps", type=int, default=8, help="timed steps")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--cache-dir", default=os.environ.get("CRUCIBLE_CACHE", "outputs/cache"))
    parser.add_argument("--out", default=None, help="write the JSON here too")
    return parser.parse_args()


def model_dir(args) -> Path:
    from framework.models.tiny import resolve_model_dir

    cfg = yaml.safe_load((REPO_ROOT / "conf" / "model" / f"{args.model}.yaml").read_text())
    cfg |= {"path": None, "random_init": True, "dtype": "float32"}
    return Path(resolve_model_dir(cfg, Path(args.cache_dir) / "models"))


def task_node(args) -> dict:
    node = yaml.safe_load((REPO_ROOT / "conf" / "task" / "dpo.yaml").read_text())["dpo"]
    node.pop("_target_")
    node.update(steps=args.warmup + args.steps, global_batch_size=args.batch, micro_batch_size=args.micro,
                max_prompt_length=args.max_length, max_completion_length=args.max_length, compute_dtype="float32")
    node["lora"].update(rank=8, alpha=16, dropout=0.0, target_modules=TARGETS)
    node["checkpoint"].update(every=0)
    node["eval"].update(every=0)
    return node


def pairs(args):
    from framework.data.records import RecordSpec, load_records

    return load_records(RecordSpec("preference_sample", "preference", "sample", "preference", None), "train",
                        limit=args.pairs)


def time_mlx(args, path: Path) -> dict:
    from omegaconf import OmegaConf

    from framework.backends.mlx.adapter import MLXRunConfig
    from framework.backends.mlx.patches.rope_parameters import install
    from framework.backends.mlx.trainers.dpo import DPOTrainer
    from framework.core.build import build
    from framework.core.context import RunContext
    from framework.core.loggers import MetricLogger
    from framework.data.records import RecordSpec
    from framework.tasks.dpo import DPOTask

    install()
    run_dir = Path(tempfile.mkdtemp(prefix="mlx_dpo_bench_"))
    config = MLXRunConfig("dpo", build(DPOTask, task_node(args), "dpo"), RecordSpec("p", "preference", "sample",
                          "preference", None), pairs(args), [], args.model, str(path), 0)
    context = RunContext(run_dir, OmegaConf.create({"progress": False}), MetricLogger(run_dir, enabled=False), 0)
    trainer = DPOTrainer(config, context)
    trainer.setup()
    trainer.init()
    ends = [clocks()]
    for step in range(1, args.warmup + args.steps + 1):
        trainer.train_step(step)
        ends.append(clocks())
    return report(ends, args)


def time_trl(args, path: Path) -> dict:
    import torch
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import DPOConfig, DPOTrainer

    ends: list[tuple[float, float]] = []

    class StepEnds(TrainerCallback):
        def on_train_begin(self, *_, **__):
            ends.append(clocks())

        def on_step_end(self, *_, **__):
            ends.append(clocks())

    tokenizer = AutoTokenizer.from_pretrained(path)
    rows = [{"prompt": p.prompt, "chosen": [{"role": "assistant", "content": p.chosen}],
             "rejected": [{"role": "assistant", "content": p.rejected}]} for p in pairs(args)]
    dpo_args = DPOConfig(output_dir=tempfile.mkdtemp(prefix="trl_dpo_bench_"), report_to="none", beta=0.1,
                         per_device_train_batch_size=args.micro, gradient_accumulation_steps=args.batch // args.micro,
                         max_steps=args.warmup + args.steps, max_length=2 * args.max_length, learning_rate=1e-3,
                         use_cpu=True, bf16=False, save_strategy="no", logging_steps=10_000, seed=0)
    trainer = DPOTrainer(model=AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32), args=dpo_args,
                         train_dataset=Dataset.from_list(rows), processing_class=tokenizer,
                         peft_config=LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=TARGETS),
                         callbacks=[StepEnds()])
    trainer.train()
    return report(ends, args) | {"torch_threads": torch.get_num_threads()}


def clocks() -> tuple[float, float]:
    """(wall time, CPU time of this process: all its threads), so a shared machine's other jobs show as
    a gap between the two instead of hiding in the wall time alone."""
    return time.perf_counter(), time.process_time()


def report(ends: list[tuple[float, float]], args) -> dict:
    wall = [b[0] - a[0] for a, b in zip(ends, ends[1:])][args.warmup:]
    cpu = [b[1] - a[1] for a, b in zip(ends, ends[1:])][args.warmup:]
    return {"step_s_median": statistics.median(wall), "step_s_min": min(wall), "steps_timed": len(wall),
            "cpu_s_per_step_median": statistics.median(cpu), "pairs_per_s": args.batch / statistics.median(wall)}


def main() -> None:
    args = parse_args()
    path = model_dir(args)
    result = {
        "benchmark": "LoRA DPO optimizer step (base model as reference), fp32",
        "machine": {"system": platform.system(), "machine": platform.machine(), "cpus": os.cpu_count(),
                    "apple_silicon": platform.system() == "Darwin" and platform.machine() == "arm64",
                    "load_average_1m_at_start": os.getloadavg()[0]},  # other jobs on a shared machine skew timings
        "model": args.model, "global_batch": args.batch, "micro_batch": args.micro, "max_length": args.max_length,
        "mlx": time_mlx(args, path),
        "trl": time_trl(args, path),
        "mlx_lm_lora": "not measured: mlx-lm-lora is not installed here"
        if importlib.util.find_spec("mlx_lm_lora") is None else "installed but not wired into this script",
    }
    result["machine"]["load_average_1m_at_end"] = os.getloadavg()[0]
    result["mlx_over_trl_speedup"] = result["trl"]["step_s_median"] / result["mlx"]["step_s_median"]
    result["mlx_over_trl_cpu_time_ratio"] = result["trl"]["cpu_s_per_step_median"] / result["mlx"]["cpu_s_per_step_median"]
    text = json.dumps(result, indent=1)
    print(text)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(text + "\n")


if __name__ == "__main__":
    main()
