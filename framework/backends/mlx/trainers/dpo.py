"""Direct preference optimisation with LoRA on mlx-lm (losses: framework/backends/mlx/losses.py).

The reference is the base model: the same weights with every adapter's scale set to 0, either at
each micro-batch (reference=base, as TRL does with PEFT) or once for every pair before training
(reference=precomputed, TRL's precompute_ref_log_probs); or a second, frozen model loaded from
dpo.reference_model (reference=model), run at each micro-batch.
"""

from __future__ import annotations

import mlx.core as mx

from framework.backends.mlx import lora, model_io
from framework.backends.mlx.batching import collate_pairs, encode_pair
from framework.backends.mlx.losses import dpo_batch, sequence_logps
from framework.backends.mlx.trainers.base import MLXTrainer, as_arrays
from framework.core.errors import DataError
from framework.data.records import source_name
from framework.tasks.dpo import check_distinct_pairs

SUMS = ("loss", "pairs", "rewards_chosen", "rewards_rejected", "rewards_accuracy", "logps_chosen", "logps_rejected")


class DPOTrainer(MLXTrainer):
    key = "dpo"

    def init(self) -> None:
        super().init()
        self.reference_model = self._load_reference() if self.task.reference == "model" else None
        check_distinct_pairs(self.config.train_records, [(e["chosen"], e["rejected"]) for e in self.train_examples],
                             self.task.max_completion_length, source_name(self.config.data))
        state = [self.model.state] + ([self.reference_model.state] if self.reference_model is not None else [])
        self.reference_fn = mx.compile(self._reference_logps, inputs=state)
        self.eval_fn = mx.compile(self.loss_fn, inputs=[self.model.state])
        if self.task.reference == "precomputed":
            for examples in (self.train_examples, self.eval_examples):
                self._precompute(examples)

    def _load_reference(self):
        path = model_io.local_model_dir(self.task.reference_model, "dpo.reference_model")
        reference, tokenizer = model_io.load(path, self.task.compute_dtype)
        if tokenizer.get_vocab() != self.tokenizer.get_vocab():
            raise DataError(f"dpo.reference_model: {path} has another tokenizer than the model; the reference must "
                            f"score the same token ids")
        reference.freeze()
        reference.eval()
        return reference

    def _reference_logps(self, ids, mask):
        if self.reference_model is not None:
            logps = mx.stop_gradient(sequence_logps(self.reference_model, ids, mask))
        else:
            with lora.adapters_disabled(self.model):
                logps = mx.stop_gradient(sequence_logps(self.model, ids, mask))
        half = ids.shape[0] // 2
        return logps[:half], logps[half:]

    def _precompute(self, examples: list[dict]) -> None:
        self.model.eval()
        micro = self.task.micro_batch_size
        for start in self.run.progress(range(0, len(examples), micro), desc="reference log-probs", unit="batch"):
            chunk = examples[start:start + micro]
            chosen, rejected = self.reference_fn(*as_arrays(*collate_pairs(chunk, self.pad_id)))
            for example, c, r in zip(chunk, chosen.tolist(), rejected.tolist()):
                example["ref"] = (c, r)
        self.model.train()

    def encode(self, pair) -> dict:
        return encode_pair(self.tokenizer, pair, self.task.max_prompt_length, self.task.max_completion_length)

    def micro_batch(self, examples: list[dict]) -> tuple:
        ids, mask = as_arrays(*collate_pairs(examples, self.pad_id))
        if self.task.reference == "precomputed":
            chosen = mx.array([e["ref"][0] for e in examples], mx.float32)
            rejected = mx.array([e["ref"][1] for e in examples], mx.float32)
        else:
            chosen, rejected = self.reference_fn(ids, mask)
        return ids, mask, chosen, rejected

    def loss_fn(self, ids, mask, ref_chosen, ref_rejected):
        return dpo_batch(self.model, ids, mask, ref_chosen, ref_rejected, self.task.loss_type, self.task.beta,
                         self.task.label_smoothing)

    def metrics(self, totals: list[float], prefix: str = "") -> dict:
        sums = dict(zip(SUMS, totals))
        pairs = sums.pop("pairs")
        out = {f"{prefix}{name}": value / pairs for name, value in sums.items()}
        out[f"{prefix}rewards_margin"] = out[f"{prefix}rewards_chosen"] - out[f"{prefix}rewards_rejected"]
        return out

    def evaluate(self, examples: list[dict]) -> dict:
        self.model.eval()
        totals = [0.0] * len(SUMS)
        for start in range(0, len(examples), self.task.micro_batch_size):
            values = self.eval_fn(*self.micro_batch(examples[start:start + self.task.micro_batch_size]))
            totals = [t + float(v) for t, v in zip(totals, values)]
        self.model.train()
        return self.metrics(totals, prefix="eval_")
