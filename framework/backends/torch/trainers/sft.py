"""Supervised fine-tuning with TRL's SFTTrainer (LoRA or full; loss on the last assistant turn or all)."""

from __future__ import annotations

import logging

import trl

from framework.backends.torch.checkpointing import CrucibleCheckpointing
from framework.backends.torch.data import as_dataset, sft_rows
from framework.backends.torch.trainers.common import TRLTrainer, training_arguments
from framework.core.errors import ConfigError
from framework.data.records import load_records

log = logging.getLogger(__name__)


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
        check_kept_rows(len(trainer.train_dataset), len(self.train_rows), task.max_seq_length)
        return trainer


def check_kept_rows(kept: int, rows: int, max_seq_length: int) -> None:
    """TRL drops the rows whose prompt alone fills max_length (no completion token left to learn): none left is
    one line naming the key (was: torch's `num_samples=0` ValueError at the first step); some dropped, a warning."""
    if kept == 0:
        raise ConfigError(f"sft.max_seq_length: {max_seq_length} tokens leave no training record a completion token "
                          f"(all {rows} prompts fill it); raise it or set sft.completion_only_loss=false")
    if kept < rows:
        log.warning("sft.max_seq_length: %d tokens leave %d of %d training records no completion token; "
                    "they are dropped", max_seq_length, rows - kept, rows)
