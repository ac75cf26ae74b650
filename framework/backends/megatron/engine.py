"""The megatron objects of a run: GPTModel (this rank's stage and tensor shard) in DDP, the optimizer,
the lr scheduler, and moving weights between them and HF directories."""

from __future__ import annotations

from pathlib import Path

from framework.backends.megatron import hf_weights
from framework.backends.megatron.distributed import Layout
from framework.backends.megatron.model import DecoderShape, gpt_model, layer_spec, transformer_config
from framework.core.dtypes import torch_dtype
from framework.tasks.pretrain import PretrainTask


class Engine:
    def __init__(self, shape: DecoderShape, layout: Layout, task: PretrainTask, spec_kind: str, on_gpu: bool):
        from megatron.core import parallel_state

        self.shape, self.layout, self.task, self.on_gpu = shape, layout, task, on_gpu
        self.config = transformer_config(shape, layout.as_dict(), task.compute_dtype, on_gpu, spec_kind)
        self.module = gpt_model(shape, self.config, layer_spec(shape, spec_kind), task.seq_length,
                                pre_process=parallel_state.is_pipeline_first_stage(),
                                post_process=parallel_state.is_pipeline_last_stage())
        if on_gpu:
            self.module.cuda()
        self.forward_module = self._in_compute_dtype()
        self.tp_rank = parallel_state.get_tensor_model_parallel_rank()
        self.pp_rank = parallel_state.get_pipeline_model_parallel_rank()
        self.layer_offset = self.pp_rank * (shape.num_layers // layout.pp)

    def _in_compute_dtype(self):
        """The module the schedules run: under bf16/fp16 megatron's Float16Module, as Megatron-LM's
        get_model wraps it. GPTModel builds its linears and embeddings in params_dtype, but the local
        spec's norms (WrappedTorchNorm -> torch.nn.RMSNorm) take no dtype and stay float32, so
        F.rms_norm sees a bf16 input with a float32 weight and cannot use its fused kernel.
        Float16Module casts the whole model (norm weights included) to the compute dtype; the
        optimizer keeps float32 master copies of every such parameter. self.module stays the
        GPTModel itself (now in the compute dtype) for weights and checkpoints."""
        if not (self.config.bf16 or self.config.fp16):
            return self.module
        from megatron.core.transformer.module import Float16Module

        return Float16Module(self.config, self.module)

    @property
    def device(self):
        import torch

        return torch.device("cuda", torch.cuda.current_device()) if self.on_gpu else torch.device("cpu")

    # ---- optimisation ---------------------------------------------------------------------------

    def wrap(self) -> None:
        """DDP (gradient buffers and their all-reduce), the optimizer and the lr schedule of the task."""
        from megatron.core.distributed import DistributedDataParallel, DistributedDataParallelConfig
        from megatron.core.optimizer import OptimizerConfig, get_megatron_optimizer
        from megatron.core.optimizer_param_scheduler import OptimizerParamScheduler

        opt = self.task.optimizer
        ddp_config = DistributedDataParallelConfig(grad_reduce_in_fp32=True, overlap_grad_reduce=False,
                                                   use_distributed_optimizer=self.layout.shard_optimizer)
        self.model = DistributedDataParallel(self.config, ddp_config, self.forward_module)
        self._hook_schedules()
        dtype = torch_dtype(self.task.compute_dtype)
        self.optimizer = get_megatron_optimizer(OptimizerConfig(
            optimizer="adam", lr=opt.learning_rate, min_lr=opt.learning_rate * opt.min_lr_ratio,
            weight_decay=opt.weight_decay, adam_beta1=opt.b1, adam_beta2=opt.b2, adam_eps=opt.eps,
            clip_grad=opt.max_grad_norm, bf16=self.config.bf16, fp16=self.config.fp16, params_dtype=dtype,
            use_distributed_optimizer=self.layout.shard_optimizer), [self.model])
        self.config.grad_scale_func = self.optimizer.scale_loss
        self.scheduler = OptimizerParamScheduler(
            self.optimizer, init_lr=0.0, max_lr=opt.learning_rate, min_lr=opt.learning_rate * opt.min_lr_ratio,
            lr_warmup_steps=opt.warmup_steps, lr_decay_steps=max(self.task.steps, opt.warmup_steps + 1),
            lr_decay_style=opt.schedule,  # megatron names constant, cosine, linear as the task does
            start_wd=opt.weight_decay, end_wd=opt.weight_decay,
            wd_incr_steps=self.task.steps, wd_incr_style="constant")

    def _hook_schedules(self) -> None:
        """What megatron's schedules call between micro-batches and after the last backward (as
        Megatron-LM's training loop sets them): without finalize_model_grads no gradient is
        all-reduced over data-parallel ranks nor are tied embeddings' over pipeline stages."""
        from megatron.core.distributed import finalize_model_grads

        self.config.no_sync_func = self.model.no_sync
        self.config.finalize_model_grads_func = finalize_model_grads

    def learning_rate(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    def sharded_state(self, loading: bool = False) -> dict:
        """What a checkpoint holds: the model and optimizer shards of this rank."""
        model = self.module.sharded_state_dict()
        return {"model": model, "optimizer": self.optimizer.sharded_state_dict(model, is_loading=loading)}

    def load_state(self, state: dict) -> None:
        self.module.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])

    # ---- HF weights -----------------------------------------------------------------------------

    def import_hf(self, model_dir: str) -> int:
        """Copy an HF checkpoint's weights into this rank's parameters (before wrap()); returns how many."""
        import torch

        hf = hf_weights.read_hf_weights(model_dir)
        copied = 0
        with torch.no_grad():
            for name, tensor in self.module.state_dict(keep_vars=True).items():
                try:
                    local = hf_weights.local_from_hf(name, hf, self.layer_offset, self.shape, self.tp_rank,
                                                     self.layout.tp)
                except KeyError as missing:
                    from framework.core.errors import DataError

                    raise DataError(f"model.path: {model_dir} lacks {missing} for megatron's {name}") from None
                if local is None:
                    continue
                if tuple(local.shape) != tuple(tensor.shape):
                    from framework.core.errors import DataError

                    raise DataError(f"model.path: {model_dir}: {name} has shape {tuple(local.shape)} for this rank, "
                                    f"megatron expects {tuple(tensor.shape)}")
                tensor.copy_(local.to(tensor.dtype))
                copied += 1
        return copied

    def export_hf(self, source_dir: str, out_dir: Path, dtype_name: str) -> Path | None:
        """Gather every rank's weights to global rank 0, which writes an HF directory (returned there)."""
        import torch.distributed as dist
        from megatron.core import parallel_state

        local = None
        if parallel_state.get_data_parallel_rank() == 0:
            local = {"tp_rank": self.tp_rank, "offset": self.layer_offset,
                     "weights": {k: v.detach().float().cpu() for k, v in self.module.state_dict().items()
                                 if hf_weights.hf_source(k, 0, self.shape) is not None}}
        parts = [None] * dist.get_world_size() if dist.get_rank() == 0 else None
        dist.gather_object(local, parts, dst=0)
        if dist.get_rank() != 0:
            return None
        grouped: dict[tuple[str, int], dict[int, object]] = {}
        for part in filter(None, parts):
            for name, tensor in part["weights"].items():
                grouped.setdefault((name, part["offset"]), {})[part["tp_rank"]] = tensor
        tensors = {}
        for (name, offset), by_rank in grouped.items():
            ordered = [by_rank[r] for r in sorted(by_rank)]
            tensors.update(hf_weights.hf_from_parts(name, ordered, offset, self.shape))
        if self.shape.tie_embeddings:
            tensors.pop("lm_head.weight", None)
        return hf_weights.write_hf_export(tensors, source_dir, out_dir, torch_dtype(dtype_name))
