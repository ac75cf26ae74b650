"""One workload for both benchmarked sides: model FLOPs, the synthetic data and the TRL arguments.

step.py (our backend through run.py) and trl_direct.py (TRL alone) import this module only, so the
data, the shapes and the optimizer settings cannot drift apart. No torch import at module level.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any, Mapping

LEARNING_RATE = 1.0e-5


def matmul_params(hf_config: Mapping[str, Any]) -> tuple[int, int]:
    """(matmul parameters of the decoder layers, attention width heads x head_dim)."""
    hidden, layers = hf_config["hidden_size"], hf_config["num_hidden_layers"]
    heads = hf_config["num_attention_heads"]
    kv_heads = hf_config.get("num_key_value_heads") or heads
    head_dim = hf_config.get("head_dim") or hidden // heads
    attention = hidden * head_dim * (2 * heads + 2 * kv_heads)
    return layers * (attention + 3 * hidden * hf_config["intermediate_size"]), heads * head_dim


def train_flops_per_token(hf_config: Mapping[str, Any], sequence: int, reference_forward: bool) -> float:
    """Full fine-tuning, PaLM's convention: 6 x matmul params (LM head included) + 12 x layers x width x
    sequence for attention; DPO adds the frozen reference's forward (a third of that)."""
    params, width = matmul_params(hf_config)
    params += hf_config["hidden_size"] * hf_config["vocab_size"]
    train = 6 * params + 12 * hf_config["num_hidden_layers"] * width * sequence
    return train * (4 / 3 if reference_forward else 1)


def digits(rng: random.Random, count: int) -> str:
    """`count` digits apart: Qwen2-style pre-tokenisers make each digit and each space one token (2 x count - 1)."""
    return " ".join(str(rng.randint(0, 9)) for _ in range(count))


def write_data(folder: Path, task: str, sequence: int, tokenizer, records: int = 512) -> int:
    """train.jsonl whose records fill `sequence` tokens after truncation; returns the templated prompt's length.
    DPO prompts fill at most half the sequence, so our truncation (prompt end, completion start) and TRL's
    (keep_start at prompt + sequence / 2) cut the very same tokens."""
    rng = random.Random(0)
    folder.mkdir(parents=True, exist_ok=True)
    prompt_words = 8 if task == "sft" else _prompt_digits(tokenizer, sequence // 2)
    with (folder / "train.jsonl").open("w") as out:
        for _ in range(records):
            prompt, completion = digits(rng, prompt_words), digits(rng, sequence)
            if task == "sft":
                row = {"messages": [{"role": "user", "content": prompt}, {"role": "assistant", "content": completion}]}
            else:
                row = {"prompt": prompt, "chosen": completion, "rejected": digits(rng, sequence)}
            out.write(json.dumps(row) + "\n")
    return _prompt_tokens(tokenizer, prompt_words)


def _prompt_tokens(tokenizer, count: int) -> int:
    messages = [{"role": "user", "content": digits(random.Random(0), count)}]
    return len(tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True, return_dict=True)
               ["input_ids"])


def _prompt_digits(tokenizer, budget: int) -> int:
    count = budget // 2
    while _prompt_tokens(tokenizer, count) > budget:
        count -= 1
    return count


def trl_arguments(batch: int, steps: int, bf16: bool, output_dir: str) -> dict:
    """What our backend passes TRL for this workload (trainers/common.py:training_arguments), written out."""
    return dict(output_dir=output_dir, max_steps=steps, seed=0, data_seed=0, per_device_train_batch_size=batch,
                gradient_accumulation_steps=1, learning_rate=LEARNING_RATE, adam_beta1=0.9, adam_beta2=0.999,
                adam_epsilon=1e-8, weight_decay=0.0, max_grad_norm=1.0, warmup_steps=0, optim="adamw_torch",
                lr_scheduler_type="constant_with_warmup", bf16=bf16, fp16=False, activation_checkpointing=False,
                logging_strategy="steps", logging_steps=1, report_to="none", disable_tqdm=True, save_strategy="no",
                eval_strategy="no", dataloader_num_workers=0, ddp_find_unused_parameters=False)


def crucible_overrides(task: str, batch: int, steps: int, sequence: int, bf16: bool) -> list[str]:
    """The same workload as run.py overrides."""
    lengths = ([f"sft.max_seq_length={sequence}", "sft.packing=false", "sft.completion_only_loss=true"] if task == "sft"
               else [f"dpo.max_prompt_length={sequence // 2}", f"dpo.max_completion_length={sequence // 2}",
                     "dpo.reference=base", "dpo.loss_type=sigmoid"])
    return ["backend=torch", f"task={task}", f"{task}.steps={steps}", f"{task}.global_batch_size={batch}",
            f"{task}.micro_batch_size={batch}", f"{task}.finetune=full", f"{task}.optimizer.learning_rate={LEARNING_RATE}",
            f"{task}.optimizer.warmup_steps=0", f"{task}.optimizer.schedule=constant", f"{task}.optimizer.weight_decay=0.0",
            f"{task}.eval.every=0", f"{task}.checkpoint.every=0", f"{task}.export_hf=false",
            f"{task}.param_dtype=float32", f"{task}.compute_dtype={'bfloat16' if bf16 else 'float32'}", *lengths]


def median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    return ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2
