"""Supervised fine-tuning with TRL's SFTTrainer (LoRA or full; loss on the last assistant turn or all)."""

from __future__ import annotations

import trl

from framework.backends.torch.checkpointing import CrucibleCheckpointing
from framework.backends.torch.data import as_dataset, sft_rows
from framework.backends.torch.trainers.common import TRLTrainer, training_arguments
from framework.data.records import load_records
from framework.tasks.sft import check_learnable_rows


class CheckpointedSFTTrainer(CrucibleCheckpointing, trl.SFTTrainer):
    """TRL's SFTTrainer saving and resuming through the core checkpoint store."""


class SFTTrainer(TRLTrainer):
    def build_rows(self):
        task, spec = self.config.task, self.config.data
        train = sft_rows(load_records(spec, "train"), task.completion_only_loss, f"data={spec.name} train")
        held_out = load_records(spec, "test", task.eval.num_examples) if task.eval.num_examples else []
        return train, sft_rows(held_out, task.completion_only_loss, f"data={spec.name} test")

    def build_trainer(self, output_dir: str):
        task = self.config.task
        args = trl.SFTConfig(**training_arguments(self.config, output_dir, bool(self.eval_rows)),
                             max_length=task.max_seq_length, packing=task.packing,
                             completion_only_loss=task.completion_only_loss, assistant_only_loss=False, loss_type="nll")
        trainer = CheckpointedSFTTrainer(model=self.base_model, peft_config=self.peft_config, args=args,
                                         processing_class=self.tokenizer, train_dataset=as_dataset(self.train_rows),
                                         eval_dataset=as_dataset(self.eval_rows) if self.eval_rows else None)
        check_learnable_rows(len(trainer.train_dataset), len(self.train_rows), task.max_seq_length)
        return trainer

