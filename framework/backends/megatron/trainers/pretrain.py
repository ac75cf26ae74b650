"""task=pretrain on megatron-core: GPTModel + DDP + megatron's optimizer and forward-backward schedules.

Every rank runs this trainer (torchrun / SLURM tasks); rank 0 writes the records. One step is
`num_microbatches` forward/backward passes through the pipeline (get_forward_backward_func picks
the 1F1B schedule when pp > 1), then one optimizer step and one scheduler step. The loss is that
of the last pipeline stage, averaged over data-parallel ranks.
"""

from __future__ import annotations

import logging
import statistics
import time
from functools import partial
from pathlib import Path
from typing import Any

from framework.backends.megatron import checkpointing, data
from framework.backends.megatron.config import MegatronPretrainConfig
from framework.backends.megatron.distributed import (init_model_parallel, init_process_group, resolve_layout,
                                                     set_cpu_threads, shutdown)
from framework.backends.megatron.model import check_layout, decoder_shape, read_hf_config
from framework.backends.megatron.trainers.batches import collate, masked_mean_loss, sample_indices
from framework.core.errors import ConfigError
from framework.core.result import TrainingResult
from framework.core.stopping import check_finite
from framework.core.trainer import BaseTrainer

log = logging.getLogger(__name__)
EXPORT_DIR = "hf_export"


class PretrainTrainer(BaseTrainer):
    config: MegatronPretrainConfig
    handles_stop_requests = True  # SIGINT/SIGTERM: every rank checkpoints after the current step, then stops

    def setup(self) -> None:
        """Layout checks, process groups, the model directory, tokenizer and the token data set (built once,
        then cached)."""
        cfg, task = self.config, self.config.task
        self.env = self.run.dist
        self.on_gpu = cfg.hardware["accelerator"] == "gpu"
        self.layout = resolve_layout(cfg.parallel, self.env.world_size, cfg.layer_spec, self.on_gpu)
        micro_total = task.micro_batch_size * self.layout.dp
        if task.global_batch_size % micro_total:
            raise ConfigError(f"pretrain.global_batch_size: {task.global_batch_size} must be a multiple of "
                              f"micro_batch_size x data-parallel ranks = {micro_total}")
        self.num_microbatches = task.global_batch_size // micro_total
        set_cpu_threads(self.env)
        init_process_group(self.env, self.on_gpu)
        self.model_dir = self._model_dir()
        self.shape = decoder_shape(read_hf_config(self.model_dir))
        check_layout(self.shape, self.layout.tp, self.layout.pp)
        self.tokenizer = data.load_tokenizer(self.model_dir)
        if len(self.tokenizer) > self.shape.vocab_size:
            raise ConfigError(f"model: the tokenizer has {len(self.tokenizer)} tokens, more than the model's "
                              f"vocab_size {self.shape.vocab_size}")
        init_model_parallel(self.layout, cfg.seed)
        self._build_data()

    def _model_dir(self) -> str:
        """The model's HF directory; a random-init one is built by rank 0 while the others wait, then reused."""
        import torch.distributed as dist

        from framework.models.tiny import resolve_model_dir

        if self.config.model_dir:
            return self.config.model_dir
        cache = Path(self.config.cache_dir) / "models"
        built = resolve_model_dir(self.config.model, cache) if self.env.is_main else None
        dist.barrier()
        return built or resolve_model_dir(self.config.model, cache)

    def _build_data(self) -> None:
        """Rank 0 tokenises (or finds the cache); every rank then opens the GPTDatasets (megatron's
        builder lets rank 0 write the sample index first)."""
        import torch.distributed as dist

        cfg, task = self.config, self.config.task
        folder = Path(cfg.cache_dir) / "megatron_data" / data.cache_key(cfg.data, self.model_dir)
        if self.env.is_main:
            data.build_token_file(cfg.data, self.tokenizer, folder, self.run.progress)
        dist.barrier()
        samples = [task.steps * task.global_batch_size,
                   max(1, task.eval.iters) * task.micro_batch_size * self.layout.dp]
        self.train_set, self.valid_set = data.gpt_datasets(folder / data.PREFIX, self.tokenizer, self.model_dir,
                                                           task.seq_length, task.split, samples, cfg.seed)

    def init(self) -> None:
        from framework.backends.megatron.engine import Engine

        cfg, task = self.config, self.config.task
        self.engine = Engine(self.shape, self.layout, task, cfg.layer_spec, self.on_gpu)
        if task.init_from == "pretrained":
            copied = self.engine.import_hf(self.model_dir)
            log.info("pretrain: %d tensors from %s", copied, self.model_dir)
        self.engine.wrap()
        self.store = self.run.checkpoints(task.checkpoint)
        self.start_step = 0
        checkpoint = self.store.resume_point()  # the runtime refused a changed setup or resume=false already
        if checkpoint is not None:
            self.engine.load_state(checkpointing.load(checkpoint, self.engine.sharded_state(loading=True)))
            self.engine.scheduler.load_state_dict(checkpoint.state["scheduler"])
            self.start_step = checkpoint.step
            self.run.logger.rewind(checkpoint.step)
            log.info("pretrain: resumed from %s", checkpoint.path)

    # ---- training -------------------------------------------------------------------------------

    def run_train(self) -> TrainingResult:
        task = self.config.task
        started = time.perf_counter()
        summary = self._preflight() if self.config.preflight else {}
        rows, step_times = {}, []
        steps = range(self.start_step + 1, task.steps + 1)
        last_checkpoint = self.store.root / f"step_{self.start_step}" if self.start_step else None
        done = saved = self.start_step
        with self.run.progress(steps, total=len(steps), desc="pretrain", unit="step") as bar:
            for step in bar:
                if self._stop_agreed():  # a signal during init or the last step: stop before this one
                    break
                rows = self._train_step(step)
                check_finite(rows, step)  # a NaN/inf loss is neither logged nor saved (every rank sees it)
                step_times.append(rows["step_time_s"])
                if task.eval.every and task.eval.iters and (step % task.eval.every == 0 or step == task.steps):
                    rows |= self._evaluate()
                self.run.logger.log(rows, step)
                bar.set_postfix(loss=f"{rows['loss']:.4f}")
                done = step
                if task.checkpoint.due(step, task.steps):
                    last_checkpoint, saved = self._save(step), step
        interrupted = done < task.steps
        if interrupted and done > saved and task.checkpoint.every > 0:  # stopped: resume from this step
            last_checkpoint = self._save(done)
        artifacts = {"last_checkpoint": str(last_checkpoint)} if last_checkpoint else {}
        if task.export_hf and not interrupted:  # an interrupted run's model is not the final one
            out = self.engine.export_hf(self.model_dir, self.run.run_dir / EXPORT_DIR, self.config.model["dtype"])
            artifacts["hf_export"] = str(self.run.run_dir / EXPORT_DIR)
            if out is not None:
                log.info("pretrain: HF export in %s", out)
        summary |= {k: v for k, v in rows.items() if isinstance(v, (int, float))}
        summary |= {"steps_completed": done, "resumed_from_step": self.start_step,
                    "measured_step_s": statistics.median(step_times[1:] or step_times) if step_times else None,
                    "layout": self.layout.as_dict(), "num_microbatches": self.num_microbatches}
        return TrainingResult(success=not interrupted, metrics=summary, wall_time_s=time.perf_counter() - started,
                              samples=(done - self.start_step) * task.global_batch_size, artifacts=artifacts,
                              status="interrupted" if interrupted else "ok",
                              error=f"stopped after step {done} of {task.steps}" if interrupted else None)

    def _stop_agreed(self) -> bool:
        """Whether any rank got SIGINT/SIGTERM: every rank stops (and joins the checkpoint) at the same step."""
        import torch
        import torch.distributed as dist

        flag = torch.tensor([int(self.run.stop_requested)], device=self.engine.device)
        dist.all_reduce(flag, op=dist.ReduceOp.MAX)
        return bool(flag.item())

    def _microbatches(self, dataset, step: int, count: int):
        from megatron.core import parallel_state

        task, dp_rank = self.config.task, parallel_state.get_data_parallel_rank()
        for micro in range(count):
            indices = sample_indices(step, micro, dp_rank, task.global_batch_size, task.micro_batch_size,
                                     self.layout.dp)
            yield collate(dataset, [i % len(dataset) for i in indices], self.engine.device)

    def _forward_step(self, batches, model):
        batch = next(batches)
        output = model(batch["tokens"], batch["position_ids"], None, labels=batch["labels"])
        return output, partial(masked_mean_loss, batch["loss_mask"])

    def _run_schedule(self, batches, count: int, forward_only: bool) -> float:
        """Forward (and backward) over `count` micro-batches; the mean loss, known on every rank."""
        import torch
        import torch.distributed as dist
        from megatron.core import parallel_state
        from megatron.core.pipeline_parallel import get_forward_backward_func

        task = self.config.task
        losses = get_forward_backward_func()(
            forward_step_func=self._forward_step, data_iterator=batches, model=[self.engine.model],
            num_microbatches=count, seq_length=task.seq_length,
            micro_batch_size=task.micro_batch_size, forward_only=forward_only)
        local = torch.zeros(2, dtype=torch.float64, device=self.engine.device)
        if parallel_state.is_pipeline_last_stage() and losses:
            local[0] = sum(float(item["lm loss"]) for item in losses) / len(losses)
            local[1] = 1.0
        dist.all_reduce(local)  # every last-stage rank adds its loss once
        return float(local[0] / local[1])

    def _train_step(self, step: int) -> dict[str, float]:
        engine, task = self.engine, self.config.task
        self._synchronize()
        started = time.perf_counter()
        engine.model.zero_grad_buffer()
        engine.optimizer.zero_grad()
        learning_rate = engine.learning_rate()
        batches = self._microbatches(self.train_set, step, self.num_microbatches)
        loss = self._run_schedule(batches, self.num_microbatches, forward_only=False)
        updated, grad_norm, _ = engine.optimizer.step()
        engine.scheduler.step(increment=1)
        self._synchronize()
        elapsed = time.perf_counter() - started
        tokens = task.global_batch_size * task.seq_length
        row = {"loss": loss, "learning_rate": learning_rate, "grad_norm": float(grad_norm or 0.0),
               "update_skipped": int(not updated), "tokens_per_s": tokens / elapsed, "step_time_s": elapsed}
        mfu = self._mfu(tokens / elapsed)
        if mfu is not None:
            row["mfu"] = mfu
        return row

    def _evaluate(self) -> dict[str, float]:
        import torch

        if self.valid_set is None or len(self.valid_set) == 0:
            return {}
        started = time.perf_counter()
        self.engine.model.eval()
        with torch.no_grad():
            iters = self.config.task.eval.iters
            loss = self._run_schedule(self._microbatches(self.valid_set, 1, iters), iters, forward_only=True)
        self.engine.model.train()
        return {"eval_loss": loss, "eval_time_s": time.perf_counter() - started}

    def _save(self, step: int):
        state = {"step": step, "scheduler": self.engine.scheduler.state_dict(),
                 "samples": step * self.config.task.global_batch_size, "layout": self.layout.as_dict()}
        return checkpointing.save(self.store, step, self.engine.sharded_state, state, self.env.is_main)

    # ---- measurements ---------------------------------------------------------------------------

    def _synchronize(self) -> None:
        if self.on_gpu:
            import torch

            torch.cuda.synchronize()

    def _mfu(self, tokens_per_s: float) -> float | None:
        from framework.backends.megatron.flops import train_flops_per_token

        peak = (self.config.hardware.get("peak_tflops") or {}).get(
            {"bfloat16": "bf16", "float16": "bf16", "float32": "fp32"}[self.config.task.compute_dtype])
        if not peak:
            return None
        flops = train_flops_per_token(self.shape, self.config.task.seq_length) * tokens_per_s
        return flops / (peak * 1e12 * self.env.world_size)

    def _preflight(self) -> dict[str, Any]:
        from framework.backends.megatron.trainers.preflight import predict_step

        return predict_step(self.config.hf_config, self.config.hardware, self.layout, self.config.task,
                            self.num_microbatches)

    def cleanup(self) -> None:
        if getattr(self, "env", None) is not None:
            shutdown()
