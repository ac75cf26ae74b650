"""What the SFT and DPO trainers share: TRL arguments from the task, the model, resume, export, the result.

A subclass names its TRL trainer class and builds the datasets and the task-specific arguments; the
lifecycle is the same: seed -> tokenizer, model (+ LoRA) -> TRL trainer with RunCallback and the
safetensors checkpoint hooks -> train (resuming from the run dir's latest checkpoint) -> HF export.
"""

from __future__ import annotations

import logging
import time
from abc import abstractmethod
from typing import Any

from framework.backends.torch.config import TorchConfig
from framework.core.checkpoint import Checkpoint
from framework.core.result import TrainingResult
from framework.core.trainer import BaseTrainer
from framework.data.records import source_name
from framework.tasks.common import check_batch_fits_data

log = logging.getLogger(__name__)


def schedule_arguments(opt) -> dict:
    """Our optimizer node as transformers' lr_scheduler_type / kwargs (warmup, then the named decay)."""
    if opt.schedule == "constant" or opt.min_lr_ratio == 1.0:
        return {"lr_scheduler_type": "constant_with_warmup"}
    if opt.schedule == "cosine":
        return {"lr_scheduler_type": "cosine_with_min_lr", "lr_scheduler_kwargs": {"min_lr_rate": opt.min_lr_ratio}}
    return {"lr_scheduler_type": "polynomial",  # power 1 = linear, down to learning_rate * min_lr_ratio
            "lr_scheduler_kwargs": {"lr_end": opt.learning_rate * opt.min_lr_ratio, "power": 1.0}}


def no_activation_checkpointing() -> dict[str, bool]:
    """Activation checkpointing off, under the argument's name in the installed transformers (5.2x renamed
    gradient_checkpointing to activation_checkpointing and warns on the old name; older 5.x lack the new one)."""
    import dataclasses

    from transformers import TrainingArguments

    names = {field.name for field in dataclasses.fields(TrainingArguments)}
    return {"activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing": False}


def training_arguments(config: TorchConfig, output_dir: str, has_eval_rows: bool) -> dict[str, Any]:
    """The TrainingArguments fields every TRL config here shares. `has_eval_rows`: the data set has held-out
    rows (a single-file data set has no test split: transformers refuses eval steps without an eval dataset)."""
    task, opt = config.task, config.task.optimizer
    mixed = task.param_dtype == "float32" and task.compute_dtype != "float32"
    has_eval = task.eval.every > 0 and task.eval.num_examples > 0 and has_eval_rows
    return dict(
        output_dir=output_dir, max_steps=task.steps, seed=config.seed, data_seed=config.seed,
        per_device_train_batch_size=task.micro_batch_size, per_device_eval_batch_size=task.micro_batch_size,
        gradient_accumulation_steps=config.gradient_accumulation_steps,
        learning_rate=opt.learning_rate, adam_beta1=opt.b1, adam_beta2=opt.b2, adam_epsilon=opt.eps,
        weight_decay=opt.weight_decay, max_grad_norm=opt.max_grad_norm, warmup_steps=opt.warmup_steps,
        optim="adamw_torch", **schedule_arguments(opt),
        bf16=mixed and task.compute_dtype == "bfloat16", fp16=mixed and task.compute_dtype == "float16",
        use_cpu=config.device == "cpu", **no_activation_checkpointing(),
        logging_strategy="steps", logging_steps=1, report_to="none", disable_tqdm=True,
        logging_nan_inf_filter=False,  # a NaN/inf loss is logged as such, so check_finite stops the run
        save_strategy="no",  # RunCallback asks for saves; CrucibleCheckpointing writes them (no pickles)
        eval_strategy="steps" if has_eval else "no", eval_steps=task.eval.every if has_eval else None,
        dataloader_num_workers=config.dataloader_num_workers, ddp_find_unused_parameters=False,
    )


class TRLTrainer(BaseTrainer):
    config: TorchConfig
    handles_stop_requests = True  # RunCallback ends training at the next step boundary, with a checkpoint
    ranks_in_step = False  # True once training has returned on every rank (cleanup then synchronises them)

    def setup(self) -> None:
        import datasets
        import transformers

        from framework.backends.torch.model import load_tokenizer

        datasets.disable_progress_bars()  # one bar per run: the training steps
        transformers.utils.logging.disable_progress_bar()

        self.tokenizer = load_tokenizer(self.config.model_source, "model")
        self.train_rows, self.eval_rows = self.build_rows()
        check_batch_fits_data(self.config.task.global_batch_size, len(self.train_rows), source_name(self.config.data),
                              self.config.task_name, self.config.data.train_limit)

    def init(self) -> None:
        from transformers import PrinterCallback, set_seed

        from framework.backends.torch.callback import RunCallback
        from framework.backends.torch.model import load_model, lora_config

        task = self.config.task
        set_seed(self.config.seed)
        self.base_model = load_model(self.config.model_source, task.param_dtype, self.config.attn_implementation)
        self.peft_config = (lora_config(self.base_model, task.lora, self.config.task_name)
                            if task.finetune == "lora" else None)
        self.store = self.run.checkpoints(task.checkpoint)
        self.resume: Checkpoint | None = self.store.resume_point()
        self.callback = RunCallback(self.run, task.checkpoint, task.eval.every if self.eval_rows else 0,
                                    desc=self.config.task_name)
        self.trainer = self.build_trainer(str(self.run.run_dir / "trl"))
        self.model = self.trainer.model  # with LoRA: the PeftModel TRL wrapped (the reference: adapter disabled)
        self.trainer.crucible_store = self.store
        self.trainer.remove_callback(PrinterCallback)  # it prints every log dict; RunCallback logs them
        self.trainer.add_callback(self.callback)
        if self.resume is not None:
            self.run.logger.rewind(self.resume.step)
            self.trainer.crucible_restore_counters(self.resume.state.get("counters", {}))
            self.callback.tokens_before = self.resume.state.get("counters", {}).get("_total_train_tokens", 0)
            log.info("resuming from %s", self.resume.path)

    @abstractmethod
    def build_rows(self) -> tuple[list[dict], list[dict]]:
        """Training and held-out rows in the TRL dataset format of the task."""

    @abstractmethod
    def build_trainer(self, output_dir: str):
        """The TRL trainer (a subclass mixing in CrucibleCheckpointing) over self.base_model, self.peft_config
        and the rows."""

    def run_train(self) -> TrainingResult:
        from framework.backends.torch.model import export_hf

        start = time.perf_counter()
        self.trainer.train(resume_from_checkpoint=str(self.resume.path) if self.resume else None)
        metrics = dict(self.callback.last)
        metrics["resumed_from_step"] = self.resume.step if self.resume else 0
        done, steps = self.trainer.state.global_step, self.config.task.steps
        metrics["steps_completed"] = done
        artifacts = {}
        last = self.trainer.crucible_last_checkpoint or (self.resume.path if self.resume else None)
        if last is not None:
            artifacts["last_checkpoint"] = str(last)
        interrupted = self.callback.stopped
        self.ranks_in_step = True
        if self.config.task.export_hf and self.run.is_main and not interrupted:  # not the final model: no export
            model = self.trainer.accelerator.unwrap_model(self.trainer.model)
            artifacts.update(export_hf(model, self.tokenizer, self.run.run_dir / "hf_export"))
        return TrainingResult(success=not interrupted, metrics=metrics, wall_time_s=time.perf_counter() - start,
                              samples=done * self.config.task.global_batch_size,
                              artifacts=artifacts, status="interrupted" if interrupted else "ok",
                              error=f"stopped after step {done} of {steps}" if interrupted else None)

    def cleanup(self) -> None:
        import gc

        import torch

        dist = torch.distributed
        if dist.is_available() and dist.is_initialized():
            if self.ranks_in_step:
                # No collective in flight on any rank; then free the DDP reducer while the process group is still
                # registered. Otherwise the reducer's dealloc (under the GIL) can destroy the gloo group while one
                # of its threads waits for the GIL to finish a work item: a deadlock at exit, seen on SLURM.
                dist.barrier()
                self.trainer = None
                gc.collect()
            dist.destroy_process_group()
