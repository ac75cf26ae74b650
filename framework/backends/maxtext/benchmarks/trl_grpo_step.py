"""Time TRL's GRPOTrainer (PyTorch, transformers generate) on the shapes of grpo_step.py; print JSON.

    python -m framework.backends.maxtext.benchmarks.trl_grpo_step              # Qwen2.5-0.5B shapes, GPU
    python -m framework.backends.maxtext.benchmarks.trl_grpo_step --tiny       # tiny model, CPU check

The same work as grpo_step.py: a random-init model of --model's architecture (an HF directory built
offline by framework.models.tiny, cached under --cache-dir), prompts of exactly --prompt-tokens
tokens ("7" repeated: one token per digit), completions forced to exactly --new-tokens tokens
(min_new_tokens), num_generations per prompt, ppo_epochs (num_iterations) 1, beta 0, token-level
loss (loss_type "dapo"), micro-batches of --micro-batch with gradient accumulation over the whole
batch: one generation and one optimizer step per GRPO step.

Timings: step = time between the ends of consecutive optimizer steps; rollout = time inside
model.generate; update = step - rollout (log-probs, loss, backward, optimizer, TRL's bookkeeping).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import tempfile
import time
from pathlib import Path

from framework.backends.maxtext.benchmarks.shapes import parse_args, step_report
from framework.core.paths import REPO_ROOT, load_conf

PROMPT_TOKEN = "7"


def random_init_dir(args: argparse.Namespace) -> str:
    from framework.models.tiny import resolve_model_dir

    model = load_conf("model", args.model) | {"path": None, "random_init": True, "dtype": args.dtype}
    return resolve_model_dir(model, Path(args.cache_dir))


def prompt_dataset(tokenizer, args: argparse.Namespace):
    from datasets import Dataset

    prompt = PROMPT_TOKEN * args.prompt_tokens
    length = len(tokenizer(prompt, add_special_tokens=True)["input_ids"])
    if length != args.prompt_tokens:
        raise RuntimeError(f"the benchmark prompt is {length} tokens, not {args.prompt_tokens}")
    return Dataset.from_dict({"prompt": [prompt] * args.prompts * (args.warmup + args.steps + 1)})


def random_reward(completions, **kwargs) -> list[float]:
    return [random.random() for _ in completions]


class Timings:
    """Step ends (a TrainerCallback) and the time spent in generate (a wrapper around it)."""

    def __init__(self, torch):
        self.torch, self.step_ends, self.generate_s = torch, [], []

    def sync(self) -> float:
        if self.torch.cuda.is_available():
            self.torch.cuda.synchronize()
        return time.perf_counter()

    def callback(self):
        from transformers import TrainerCallback

        timings = self

        class StepEnd(TrainerCallback):
            def on_train_begin(self, args, state, control, **kwargs):
                timings.step_ends.append(timings.sync())

            def on_step_end(self, args, state, control, **kwargs):
                timings.step_ends.append(timings.sync())

        return StepEnd()

    def wrap_generate(self, model) -> None:
        generate = model.generate

        def timed_generate(*args, **kwargs):
            start = self.sync()
            out = generate(*args, **kwargs)
            self.generate_s.append(self.sync() - start)
            return out

        model.generate = timed_generate


def main(argv: list[str] | None = None) -> dict:
    cache = Path(os.environ.get("CRUCIBLE_CACHE", REPO_ROOT / "outputs" / "cache")) / "models"
    args = parse_args(__doc__.splitlines()[0], argv, extra={"--cache-dir": {
        "default": str(cache), "help": "where the random-init model directory is built"}})
    import torch
    import transformers
    import trl
    from transformers import AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    random.seed(0)
    model_dir = random_init_dir(args)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    rows = args.prompts * args.generations
    on_gpu = torch.cuda.is_available()
    config = GRPOConfig(
        output_dir=tempfile.mkdtemp(prefix="trl_grpo_step_"), per_device_train_batch_size=args.micro_batch,
        gradient_accumulation_steps=rows // args.micro_batch, num_generations=args.generations,
        max_completion_length=args.new_tokens, generation_kwargs={"min_new_tokens": args.new_tokens},
        temperature=1.0, learning_rate=1e-6, beta=0.0, num_iterations=1, loss_type="dapo",
        max_steps=args.warmup + args.steps, logging_steps=1, report_to="none", save_strategy="no",
        bf16=on_gpu and args.dtype == "bfloat16", use_cpu=not on_gpu, seed=0, disable_tqdm=True,
    )
    timings = Timings(torch)
    trainer = GRPOTrainer(model=model_dir, reward_funcs=random_reward, args=config,
                          train_dataset=prompt_dataset(tokenizer, args), processing_class=tokenizer,
                          callbacks=[timings.callback()])
    timings.wrap_generate(trainer.model)
    trainer.train()

    timed_ends = timings.step_ends[args.warmup:]
    step_s = statistics.median(end - previous for previous, end in zip(timed_ends, timed_ends[1:]))
    rollout_s = statistics.median(timings.generate_s[args.warmup:])
    update_s = step_s - rollout_s
    result = {"framework": "trl GRPOTrainer (torch)", "trl": trl.__version__, "transformers": transformers.__version__,
              "torch": torch.__version__, "device": torch.cuda.get_device_name() if on_gpu else "cpu",
              **step_report(args, rows, step_s, rollout_s, update_s)}
    print(json.dumps(result, indent=2))
    return result


if __name__ == "__main__":
    main()
