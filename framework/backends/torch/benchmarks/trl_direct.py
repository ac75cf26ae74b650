"""The benchmark's workload on TRL's SFTTrainer/DPOTrainer directly, without Crucible (the baseline).

    python -m framework.backends.torch.benchmarks.trl_direct --task sft --model DIR --data DIR \
        --batch 8 --steps 30 --max-length 1024 --bf16 --out times.json
"""

from __future__ import annotations

import argparse
import copy
import json
import time
from pathlib import Path

from framework.backends.torch.benchmarks.workload import trl_arguments


def rows(task: str, data: Path) -> list[dict]:
    records = [json.loads(line) for line in (data / "train.jsonl").read_text().splitlines()]
    if task == "sft":
        return [{"prompt": r["messages"][:-1], "completion": r["messages"][-1:]} for r in records]
    return [{"prompt": [{"role": "user", "content": r["prompt"]}],
             "chosen": [{"role": "assistant", "content": r["chosen"]}],
             "rejected": [{"role": "assistant", "content": r["rejected"]}]} for r in records]


def main() -> None:
    parser = argparse.ArgumentParser()
    for name in ("--task", "--model", "--data", "--out"):
        parser.add_argument(name, required=True)
    for name in ("--batch", "--steps", "--max-length"):
        parser.add_argument(name, type=int, required=True)
    parser.add_argument("--bf16", action="store_true")
    args = parser.parse_args()

    import datasets
    import torch
    import trl
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

    class StepTimes(TrainerCallback):
        """Seconds from one step's start to the next's: compute, logging and callbacks all count."""

        def __init__(self):
            self.starts = []

        def on_step_begin(self, *_, **__):
            self.starts.append(time.perf_counter())

        def on_train_end(self, *_, **__):
            self.starts.append(time.perf_counter())

    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32, attn_implementation="sdpa")
    dataset = datasets.Dataset.from_list(rows(args.task, Path(args.data)))
    common = trl_arguments(args.batch, args.steps, args.bf16, str(Path(args.out).parent / "trl_direct"))
    if args.task == "sft":
        config = trl.SFTConfig(**common, max_length=args.max_length, packing=False, completion_only_loss=True)
        trainer = trl.SFTTrainer(model=model, args=config, processing_class=tokenizer, train_dataset=dataset)
    else:
        config = trl.DPOConfig(**common, max_length=args.max_length, beta=0.1, loss_type=["sigmoid"])
        reference = copy.deepcopy(model).requires_grad_(False).eval()
        trainer = trl.DPOTrainer(model=model, ref_model=reference, args=config, processing_class=tokenizer,
                                 train_dataset=dataset)
    timer = StepTimes()
    trainer.add_callback(timer)
    trainer.train()
    periods = [after - before for before, after in zip(timer.starts, timer.starts[1:])]
    Path(args.out).write_text(json.dumps({"step_time_s": periods}))


if __name__ == "__main__":
    main()
