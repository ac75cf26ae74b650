"""Adapter of the mlx backend: checks mlx and mlx-lm, picks the MLX device, builds the SFT/DPO config.

Nothing here imports mlx at module level: the adapter is instantiated when any run validates.
"""

from __future__ import annotations

import platform
from dataclasses import dataclass
from pathlib import Path
from typing import Union

from omegaconf import DictConfig

from framework.core.adapter import BackendAdapter, require_modules
from framework.core.build import build
from framework.core.errors import ConfigError
from framework.core.parallel import ParallelConfig
from framework.core.paths import check_cache_dir
from framework.core.plain import to_plain
from framework.data import data_spec
from framework.data.records import RecordSpec, load_records, source_name
from framework.tasks.common import check_batch_fits_data
from framework.tasks.dpo import DPOTask, check_dpo
from framework.tasks.sft import SFTTask, check_sft

TASKS = {"sft": (SFTTask, check_sft), "dpo": (DPOTask, check_dpo)}


@dataclass
class MLXRunConfig:
    """What an mlx trainer needs: the task node, the data, the model directory (prepare_backend set the device)."""

    task_name: str
    task: Union[SFTTask, DPOTask]
    data: RecordSpec
    train_records: list  # validated before any model is built
    eval_records: list  # the first task.eval.num_examples of the test split (none when eval.every=0)
    model_name: str
    model_source: str  # a local HF directory (or a hub id mlx-lm fetches)
    seed: int


class MLXAdapter(BackendAdapter):
    name = "mlx"
    trainers = {"sft": "framework.backends.mlx.trainers.sft:SFTTrainer",
                "dpo": "framework.backends.mlx.trainers.dpo:DPOTrainer"}
    libraries = ("mlx-lm", "mlx", "transformers")  # mlx-lm first: the library patches are about
    patch_modules = ("framework.backends.mlx.patches",)

    def __init__(self, cache_dir: str):
        self.cache_dir = check_cache_dir(cache_dir)

    def prepare_backend(self, cfg: DictConfig) -> None:
        require_modules("mlx", {"mlx": "mlx", "mlx_lm": "mlx-lm"}, "mlx")
        import mlx.core as mx

        mx.set_default_device(mx.cpu if _device_type(cfg.hardware) == "cpu" else mx.gpu)

    def convert_config(self, cfg: DictConfig) -> MLXRunConfig:
        from framework.models.tiny import resolve_model_dir

        task_name = cfg.task.name  # validate() checked that this backend runs it
        cls, check = TASKS[task_name]
        task = build(cls, cfg[task_name], task_name)
        check(task, task_name)
        _check_mlx_support(task, task_name)
        try:  # one device: a layout of more was ignored (exit 0)
            build(ParallelConfig, cfg.parallel, "parallel").resolve(1)
        except ConfigError as exc:
            raise ConfigError(f"{exc}; backend=mlx trains on one device (each axis 1, or -1)") from None
        data = data_spec(cfg.data, task_name)  # the format the task reads, or one line naming the options
        train = load_records(data, "train")
        check_batch_fits_data(task.global_batch_size, len(train), source_name(data), task_name, data.train_limit)
        evaluate = task.eval.every > 0 and task.eval.num_examples > 0
        held_out = load_records(data, "test", limit=task.eval.num_examples) if evaluate else []
        model_source = resolve_model_dir(to_plain(cfg.model), Path(self.cache_dir) / "models")
        return MLXRunConfig(task_name=task_name, task=task, data=data, train_records=train, eval_records=held_out,
                            model_name=cfg.model.name, model_source=model_source, seed=int(cfg.seed))


def _device_type(hardware) -> str:
    """The MLX device of hardware.accelerator, or a one-line error saying what this machine has."""
    import mlx.core as mx

    accelerator = hardware.accelerator
    if accelerator == "cpu":
        return "cpu"
    if accelerator == "mps":
        if mx.metal.is_available():
            return "gpu"
        raise ConfigError(f"hardware={hardware.name} asks for Apple silicon (Metal) but this machine is "
                          f"{_machine()} with MLX's CPU backend only; run here with hardware=cpu")
    if accelerator == "gpu":
        if hasattr(mx, "cuda") and mx.cuda.is_available():
            return "gpu"
        raise ConfigError(f"hardware={hardware.name} asks for a CUDA GPU but this MLX build has no CUDA backend "
                          f"({_machine()}); install mlx[cuda] or run with hardware=cpu")
    raise ConfigError(f"hardware.accelerator: {accelerator!r} has no MLX device; backend=mlx runs on cpu, mps "
                      f"(Apple silicon) or gpu (CUDA)")


def _machine() -> str:
    return f"{platform.system()} {platform.machine()} ({'Apple silicon' if platform.machine() == 'arm64' else 'CPU'})"


def _check_mlx_support(task, key: str) -> None:
    if task.finetune != "lora":
        raise ConfigError(f"{key}.finetune: backend=mlx trains LoRA adapters (finetune=lora); full fine-tuning "
                          f"runs on backend=torch")
    if getattr(task, "packing", False):
        raise ConfigError(f"{key}.packing: backend=mlx does not pack sequences yet; set {key}.packing=false or use "
                          f"backend=torch")
