"""Adapter of the torch backend: checks the libraries, sets the distributed environment, builds TorchConfig.

Nothing here imports torch at module level: the adapter is instantiated when any run validates.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from omegaconf import DictConfig

from framework.backends.torch.config import TorchConfig
from framework.core.adapter import BackendAdapter, require_modules
from framework.core.build import build
from framework.core.distributed import DistEnv, detect
from framework.core.dtypes import SHORT
from framework.core.errors import ConfigError
from framework.core.hardware import require_accelerator
from framework.core.parallel import ParallelConfig
from framework.core.paths import check_cache_dir
from framework.core.plain import to_plain
from framework.core.ranges import NonNegativeInt
from framework.tasks.dpo import DPOTask, check_dpo
from framework.tasks.sft import SFTTask, check_sft

log = logging.getLogger(__name__)

# import name -> distribution name: what `pip install -e '.[torch]'` brings
REQUIRED_MODULES = {"torch": "torch", "transformers": "transformers", "peft": "peft", "trl": "trl",
                    "accelerate": "accelerate", "datasets": "datasets", "safetensors": "safetensors"}
TASKS = {"sft": (SFTTask, check_sft), "dpo": (DPOTask, check_dpo)}
DEVICES = {"cpu": "cpu", "gpu": "cuda"}  # hardware.accelerator -> torch device type


class TorchAdapter(BackendAdapter):
    name = "torch"
    trainers = {"sft": "framework.backends.torch.trainers.sft:SFTTrainer",
                "dpo": "framework.backends.torch.trainers.dpo:DPOTrainer"}
    libraries = ("trl", "transformers", "peft", "accelerate", "torch", "datasets", "safetensors")
    patch_modules = ("framework.backends.torch.patches",)

    def __init__(self, cache_dir: str, attn_implementation: str, dataloader_num_workers: NonNegativeInt):
        self.cache_dir = check_cache_dir(cache_dir)
        self.attn_implementation = str(attn_implementation)
        self.dataloader_num_workers = int(dataloader_num_workers)

    def prepare_backend(self, cfg: DictConfig) -> None:
        logging.getLogger("datasets").setLevel(logging.WARNING)  # its import logs INFO lines (JAX found...)
        require_modules("torch", REQUIRED_MODULES, "torch")
        if cfg.hardware.accelerator not in DEVICES:
            raise ConfigError(f"hardware.accelerator: {cfg.hardware.accelerator!r} has no torch device here; "
                              f"backend=torch runs on {', '.join(DEVICES)}")
        require_accelerator(cfg.hardware)
        if self.attn_implementation == "flex_attention" and cfg.hardware.accelerator == "cpu":  # was exit 1 at step 1
            raise ConfigError("backend.adapter.attn_implementation: flex_attention has no backward pass on a CPU "
                              "(torch); valid here: sdpa (the default) or eager")
        export_dist_env(detect())

    def convert_config(self, cfg: DictConfig) -> TorchConfig:
        from framework.models.tiny import resolve_model_dir

        from framework.data import check_data, data_spec

        task_name = cfg.task.name  # validate() checked that this backend runs it
        task_cls, check = TASKS[task_name]
        task = build(task_cls, cfg[task_name], task_name)
        check(task, task_name)
        if task_name == "dpo" and task.label_smoothing and task.loss_type == "sigmoid":
            raise ConfigError("dpo.label_smoothing: TRL's sigmoid loss has no label smoothing; use "
                              "dpo.loss_type=robust for noisy preference labels")
        data = data_spec(cfg.data, task_name)
        if data.source != "hub":
            check_data(data)  # files: before any model is built or downloaded
        model_source = resolve_model_dir(to_plain(cfg.model), Path(self.cache_dir) / "models")
        if data.source == "hub":
            check_data(data)  # after the model: offline, the model's one line names every way out first
        world = detect().world_size
        parallel = build(ParallelConfig, cfg.parallel, "parallel")
        data_ranks = data_parallel_ranks(parallel, world)
        accumulation = gradient_accumulation(task, data_ranks, task_name)
        device = DEVICES[cfg.hardware.accelerator]
        peak = to_plain(cfg.hardware.peak_tflops or {}).get(SHORT[task.compute_dtype])
        return TorchConfig(
            task_name=task_name, task=task, data=data, model_name=cfg.model.name,
            model_source=model_source,
            device=device, attn_implementation=self.attn_implementation, parallel=parallel, data_parallel=data_ranks,
            gradient_accumulation_steps=accumulation, peak_tflops=float(peak) if peak else None,
            dataloader_num_workers=self.dataloader_num_workers, seed=int(cfg.seed))


def data_parallel_ranks(layout: ParallelConfig, world_size: int) -> int:
    """DDP only: every rank holds the whole model; tp/pp/ep/cp must be 1. fsdp counts as data parallel."""
    parallel = layout.resolve(world_size)
    unsupported = [f"{axis}={getattr(parallel, axis)}" for axis in ("tp", "pp", "ep", "cp") if getattr(parallel, axis) != 1]
    if unsupported:
        raise ConfigError(f"parallel: backend=torch runs data parallel (DDP) only; set {', '.join(unsupported)} to 1")
    if parallel.fsdp > 1:
        log.warning("parallel.fsdp=%d: backend=torch replicates the model on every rank (DDP); parameters are "
                    "not sharded", parallel.fsdp)
    return parallel.data_parallel


def gradient_accumulation(task, data_ranks: int, key: str) -> int:
    per_step = task.micro_batch_size * data_ranks
    if task.global_batch_size % per_step:
        raise ConfigError(f"{key}.global_batch_size: {task.global_batch_size} is not a multiple of micro_batch_size "
                          f"x data-parallel ranks = {task.micro_batch_size} x {data_ranks}")
    return task.global_batch_size // per_step


def export_dist_env(env: DistEnv) -> None:
    """accelerate and torch.distributed read RANK/LOCAL_RANK/WORLD_SIZE/MASTER_*: give srun tasks them too."""
    if not env.is_distributed:
        return
    values = {"RANK": env.rank, "LOCAL_RANK": env.local_rank, "WORLD_SIZE": env.world_size,
              "LOCAL_WORLD_SIZE": env.local_world_size, "MASTER_ADDR": env.master_addr,
              "MASTER_PORT": env.master_port}
    for name, value in values.items():
        os.environ.setdefault(name, str(value))

