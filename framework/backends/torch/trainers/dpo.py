"""Direct preference optimisation with TRL's DPOTrainer: sigmoid, ipo, hinge or robust loss; the reference
is the base model (LoRA: adapter disabled; full: a frozen copy), another model, or precomputed log-probs."""

from __future__ import annotations

import copy

import trl

from framework.backends.torch.checkpointing import CrucibleCheckpointing
from framework.backends.torch.data import as_dataset, dpo_rows
from framework.backends.torch.model import frozen_copy, load_model
from framework.backends.torch.trainers.common import TRLTrainer, training_arguments
from framework.data.records import load_records, source_name
from framework.tasks.dpo import check_distinct_pairs


class CheckpointedDPOTrainer(CrucibleCheckpointing, trl.DPOTrainer):
    """TRL's DPOTrainer saving and resuming through the core checkpoint store, truncating prompts to their
    last max_prompt_length tokens and completions to their first max_completion_length (TRL has one max_length)."""

    def __init__(self, *args, max_prompt_length: int, max_completion_length: int, **kwargs):
        self.max_prompt_length, self.max_completion_length = max_prompt_length, max_completion_length
        super().__init__(*args, **kwargs)  # tokenizes the datasets through _prepare_dataset

    def _prepare_dataset(self, dataset, processing_class, args, dataset_name):
        # TRL drops pairs whose whole prompt reaches max_length; ours keep the prompt's end instead
        untruncated = copy.copy(args)
        untruncated.max_length = None
        dataset = super()._prepare_dataset(dataset, processing_class, untruncated, dataset_name)
        prompt, completion = self.max_prompt_length, self.max_completion_length
        return dataset.map(lambda row: {"prompt_ids": row["prompt_ids"][-prompt:],
                                        "chosen_ids": row["chosen_ids"][:completion],
                                        "rejected_ids": row["rejected_ids"][:completion]})


class DPOTrainer(TRLTrainer):
    def build_rows(self):
        task, spec = self.config.task, self.config.data
        held_out = load_records(spec, "test", task.eval.num_examples) if task.eval.num_examples else []
        self.train_pairs = load_records(spec, "train")
        return dpo_rows(self.train_pairs), dpo_rows(held_out)

    def reference_model(self):
        """None where TRL derives the reference itself: LoRA (adapter disabled) and precomputed log-probs."""
        task = self.config.task
        if task.reference == "model":
            return frozen_copy(load_model(task.reference_model, task.param_dtype, self.config.attn_implementation,
                                          "dpo.reference_model"))
        if task.reference == "base" and task.finetune == "full":
            return frozen_copy(self.base_model)
        return None

    def build_trainer(self, output_dir: str):
        task = self.config.task
        args = trl.DPOConfig(**training_arguments(self.config, output_dir, bool(self.eval_rows)),
                             max_length=task.max_prompt_length + task.max_completion_length,
                             beta=task.beta, loss_type=[task.loss_type], label_smoothing=task.label_smoothing,
                             precompute_ref_log_probs=task.reference == "precomputed")
        trainer = CheckpointedDPOTrainer(model=self.base_model, peft_config=self.peft_config,
                                         ref_model=self.reference_model(), args=args,
                                         processing_class=self.tokenizer, train_dataset=as_dataset(self.train_rows),
                                         eval_dataset=as_dataset(self.eval_rows) if self.eval_rows else None,
                                         max_prompt_length=task.max_prompt_length,
                                         max_completion_length=task.max_completion_length)
        tokens = trainer.train_dataset.select_columns(["chosen_ids", "rejected_ids"])  # truncated (_prepare_dataset)
        completions = (pair for batch in tokens.iter(batch_size=1024)  # in batches: not the columns as Python lists
                       for pair in zip(batch["chosen_ids"], batch["rejected_ids"]))
        check_distinct_pairs(self.train_pairs, completions, task.max_completion_length, source_name(self.config.data))
        return trainer
