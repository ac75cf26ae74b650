"""Supervised fine-tuning with LoRA on mlx-lm: the loss on the assistant tokens (completion_only_loss)."""

from __future__ import annotations

import mlx.core as mx

from framework.backends.mlx.batching import collate_chats, encode_chat
from framework.backends.mlx.losses import sft_loss
from framework.backends.mlx.trainers.base import MLXTrainer, as_arrays
from framework.tasks.sft import check_learnable_rows


class SFTTrainer(MLXTrainer):
    key = "sft"
    step_tokens = 0  # tokens (padding excluded) of the current step's micro-batches, for tokens_per_s

    def init(self) -> None:
        super().init()
        learnable = sum(1 for example in self.train_examples if any(example["mask"]))
        check_learnable_rows(learnable, len(self.train_examples), self.task.max_seq_length)

    def encode(self, messages: list[dict]) -> dict:
        return encode_chat(self.tokenizer, messages, self.task.max_seq_length, self.task.completion_only_loss)

    def micro_batch(self, examples: list[dict]) -> tuple:
        self.step_tokens += sum(len(e["ids"]) for e in examples)
        return as_arrays(*collate_chats(examples, self.pad_id))

    def loss_fn(self, ids, mask):
        return sft_loss(self.model, ids, mask)

    def metrics(self, totals: list[float]) -> dict:
        loss_sum, tokens = totals
        return {"loss": loss_sum / max(tokens, 1.0), "loss_tokens": tokens}

    def throughput(self, step_time_s: float) -> dict:
        tokens, self.step_tokens = self.step_tokens, 0
        return {"tokens_per_s": tokens / step_time_s}

    def evaluate(self, examples: list[dict]) -> dict:
        if not hasattr(self, "eval_fn"):
            self.eval_fn = mx.compile(self.loss_fn, inputs=[self.model.state])
        self.model.eval()
        loss_sum, tokens = 0.0, 0.0
        for start in range(0, len(examples), self.task.micro_batch_size):
            ids, mask = as_arrays(*collate_chats(examples[start:start + self.task.micro_batch_size], self.pad_id))
            values = self.eval_fn(ids, mask)
            loss_sum, tokens = loss_sum + float(values[0]), tokens + float(values[1])
        self.model.train()
        return {"eval_loss": loss_sum / max(tokens, 1.0)}

