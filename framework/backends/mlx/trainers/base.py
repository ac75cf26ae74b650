"""The loop the mlx SFT and DPO trainers share.

One optimizer step: reseed MLX from (seed, step) (dropout masks survive a resume), take
global_batch_size examples from the data cursor, run global/micro compiled forward+backward passes
whose losses are sums, add their gradients, divide by the total weight (tokens for SFT, pairs for
DPO: the mean over the global batch, as TRL's gradient accumulation gives), clip the global norm and
apply AdamW in a second compiled function. A subclass encodes records, collates micro-batches and
defines the loss and its metrics.
"""

from __future__ import annotations

import time
from pathlib import Path

import mlx.core as mx
import mlx.nn as nn
import numpy as np
from mlx.utils import tree_map

from framework.backends.mlx import checkpointing, lora, model_io, optim
from framework.backends.mlx.batching import DataCursor
from framework.core.dtypes import mlx_dtype
from framework.core.errors import ConfigError
from framework.core.result import TrainingResult
from framework.core.stopping import check_finite
from framework.core.trainer import BaseTrainer

RNG_STRIDE = 1_000_003  # the RNG seed of step k is seed * RNG_STRIDE + k


class MLXTrainer(BaseTrainer):
    """Subclasses set `key` and implement encode, collate, loss_fn, metrics and evaluate."""

    key: str
    handles_stop_requests = True  # SIGINT/SIGTERM: checkpoint after the current step, status interrupted

    def setup(self) -> None:
        self.task = self.config.task
        if self.run.world_size > 1:  # mlx.distributed is not wired: every rank would train alone
            raise ConfigError(f"backend=mlx runs one process; this job has {self.run.world_size} ranks (launch one "
                              f"task, or use backend=torch for data parallelism)")

    def init(self) -> None:
        self.model_dir = model_io.local_model_dir(self.config.model_source)
        self.model, self.tokenizer = model_io.load(self.model_dir, self.task.compute_dtype)
        self.lora_keys = lora.apply_lora(self.model, self.task.lora, f"{self.key}.lora", self.config.seed)
        lora.set_adapter_dtype(self.model, mlx_dtype(self.task.param_dtype))
        self.adapter_config = lora.adapter_config(self.task.lora, self.lora_keys, len(self.model.layers))
        self.pad_id = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None \
            else self.tokenizer.eos_token_id
        self.train_examples = [self.encode(r) for r in self.config.train_records]
        self.eval_examples = [self.encode(r) for r in self.config.eval_records]
        self.cursor = DataCursor(len(self.train_examples), self.config.seed)
        self.optimizer = optim.make_optimizer(self.task.optimizer, self.task.steps)
        self.store = self.run.checkpoints(self.task.checkpoint)
        self.start_step, self.last_checkpoint = 0, None
        resume = self.store.resume_point()
        if resume is not None:
            checkpointing.restore_training_state(self.model, self.optimizer, resume.path)
            self.cursor = DataCursor(len(self.train_examples), self.config.seed, resume.state["data"]["epoch"],
                                     resume.state["data"]["index"])
            self.start_step, self.last_checkpoint = resume.step, resume.path
            self.run.logger.rewind(resume.step)
        self.model.train()
        state = [self.model.state, mx.random.state]
        self.grad_step = mx.compile(nn.value_and_grad(self.model, self.loss_fn), inputs=state, outputs=state)
        self.update = optim.make_update(self.model, self.optimizer, self.task.optimizer.max_grad_norm)

    # ---- the loop --------------------------------------------------------------------------------

    def train_step(self, step: int) -> dict:
        mx.random.seed(self.config.seed * RNG_STRIDE + step)
        micro = self.task.micro_batch_size
        indices = self.cursor.take(self.task.global_batch_size)
        grads, totals = None, None
        for start in range(0, len(indices), micro):
            batch = self.micro_batch([self.train_examples[i] for i in indices[start:start + micro]])
            sums, micro_grads = self.grad_step(*batch)
            grads = micro_grads if grads is None else tree_map(mx.add, grads, micro_grads)
            totals = sums if totals is None else tuple(a + b for a, b in zip(totals, sums))
            mx.eval(grads, totals)
        norm = self.update(grads, 1.0 / mx.maximum(totals[1], 1.0))  # a batch cut to no loss tokens: no step
        mx.eval(self.model.parameters(), self.optimizer.state, norm)
        metrics = self.metrics([float(v) for v in totals])
        metrics.update(grad_norm=float(norm), learning_rate=float(self.optimizer.learning_rate))
        return metrics

    def run_train(self) -> TrainingResult:
        steps, metrics, resumed_from = self.task.steps, {}, self.start_step
        done = saved = self.start_step
        for step in self.run.progress(range(self.start_step + 1, steps + 1), total=steps - self.start_step,
                                      desc=f"{self.key} (mlx)", unit="step"):
            if self.run.stop_requested:  # a signal during init or the last step: stop before this one
                break
            tic = time.perf_counter()
            metrics = self.train_step(step)
            check_finite(metrics, step)  # a NaN/inf loss is neither logged nor saved
            metrics["step_time_s"] = time.perf_counter() - tic
            metrics.update(self.throughput(metrics["step_time_s"]))
            if self.eval_examples and (step % self.task.eval.every == 0 or step == steps):
                metrics.update(self.evaluate(self.eval_examples))
            self.run.logger.log(metrics, step)
            done = step
            if self.task.checkpoint.due(step, steps):
                self.last_checkpoint, saved = self.save(step), step
        interrupted = done < steps
        if interrupted and done > saved and self.task.checkpoint.every > 0:  # stopped: resume from this step
            self.last_checkpoint = self.save(done)
        result = TrainingResult(success=not interrupted, metrics={**metrics, "steps": steps, "steps_completed": done},
                                samples=(done - resumed_from) * self.task.global_batch_size,
                                status="interrupted" if interrupted else "ok",
                                error=f"stopped after step {done} of {steps}" if interrupted else None)
        if resumed_from:
            result.metrics["resumed_from_step"] = resumed_from
        if self.last_checkpoint is not None:
            result.artifacts["last_checkpoint"] = str(self.last_checkpoint)
        if self.run.is_main and not interrupted:  # an interrupted run's model is not the final one: no export
            result.artifacts.update(self.export())
        return result

    def save(self, step: int) -> Path:
        state = {"data": self.cursor.state(), "rng": f"mx.random.seed(seed * {RNG_STRIDE} + step) each step"}
        return self.store.save(step, lambda folder: checkpointing.write_training_state(
            self.model, self.optimizer, self.adapter_config, folder), state)

    def export(self) -> dict:
        adapter = self.run.path("adapter")
        checkpointing.write_adapter(self.model, self.adapter_config, adapter)
        artifacts = {"adapter": str(adapter)}
        if self.task.export_hf:
            lora.fuse(self.model)
            artifacts["hf_export"] = str(model_io.export_hf(self.model, self.model_dir, self.run.path("hf_export")))
        return artifacts

    # ---- what a task defines ---------------------------------------------------------------------

    def encode(self, record) -> dict:
        raise NotImplementedError

    def micro_batch(self, examples: list[dict]) -> tuple:
        """The loss_fn arguments, as mx arrays."""
        raise NotImplementedError

    def loss_fn(self, *batch):
        """(loss summed over the micro-batch, weight, *other sums) of self.model; the gradient is divided by
        the step's total weight."""
        raise NotImplementedError

    def metrics(self, totals: list[float]) -> dict:
        raise NotImplementedError

    def throughput(self, step_time_s: float) -> dict:
        return {}

    def evaluate(self, examples: list[dict]) -> dict:
        raise NotImplementedError


def as_arrays(*arrays: np.ndarray) -> tuple:
    return tuple(mx.array(a) for a in arrays)
