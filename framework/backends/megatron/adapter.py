"""Adapter of the megatron backend: checks megatron-core and torch, builds the pretrain config.

Nothing here imports torch or megatron at module level: the adapter is instantiated when any run
validates, and `python run.py --help` must stay fast.
"""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig, OmegaConf

from framework.backends.megatron.config import MegatronPretrainConfig
from framework.core.adapter import BackendAdapter, require_modules
from framework.core.build import build
from framework.core.errors import ConfigError
from framework.core.hardware import require_accelerator
from framework.core.parallel import ParallelConfig
from framework.core.paths import check_cache_dir
from framework.data import check_data, data_spec
from framework.tasks.pretrain import PretrainTask, check_pretrain

REQUIRED = {"megatron.core": "megatron-core", "torch": "torch"}
ACCELERATORS = ("cpu", "gpu")


class MegatronAdapter(BackendAdapter):
    name = "megatron"
    trainers = {"pretrain": "framework.backends.megatron.trainers.pretrain:PretrainTrainer"}
    libraries = ("megatron-core", "torch", "transformers", "safetensors")
    patch_modules = ("framework.backends.megatron.patches",)

    def __init__(self, layer_spec: str, cache_dir: str, preflight: bool):
        self.layer_spec = str(layer_spec)
        self.cache_dir = check_cache_dir(cache_dir)
        self.preflight = bool(preflight)

    def prepare_backend(self, cfg: DictConfig) -> None:
        require_modules("megatron", REQUIRED, "megatron")
        if cfg.hardware.accelerator not in ACCELERATORS:
            raise ConfigError(f"hardware.accelerator: {cfg.hardware.accelerator!r}; backend=megatron runs on "
                              f"{', '.join(ACCELERATORS)}")
        require_accelerator(cfg.hardware)
        from framework.backends.megatron.model import LAYER_SPECS

        if self.layer_spec not in LAYER_SPECS:
            raise ConfigError(f"backend.adapter.layer_spec: {self.layer_spec!r}; valid: {', '.join(LAYER_SPECS)}")
        quiet_megatron()

    def convert_config(self, cfg: DictConfig) -> MegatronPretrainConfig:
        from framework.backends.megatron.distributed import check_axes
        from framework.backends.megatron.model import check_layout, decoder_shape, read_hf_config
        from framework.models.tiny import resolve_model_dir

        task = build(PretrainTask, cfg.pretrain, "pretrain")
        check_pretrain(task)
        if cfg.hardware.accelerator != "gpu" and task.compute_dtype != "float32":
            raise ConfigError(f"pretrain.compute_dtype: {task.compute_dtype} on a CPU; megatron's mixed-precision "
                              f"optimizer needs CUDA there, use float32 (recipe=pretrain_megatron_cpu does)")
        if task.param_dtype != "float32":
            raise ConfigError(f"pretrain.param_dtype: {task.param_dtype}; megatron keeps float32 master weights "
                              f"(compute_dtype sets the matmuls), use float32")
        data = data_spec(cfg.data, "pretrain")
        check_data(data)  # the first bad record, before any model is built
        model = OmegaConf.to_container(cfg.model, resolve=True)
        if model["random_init"] and not model["path"]:
            model_dir, hf_config = None, model["hf_config"]  # the trainer builds the directory (rank 0 first)
        else:
            model_dir = resolve_model_dir(model, Path(self.cache_dir) / "models")  # a path, or the hub snapshot
            hf_config = read_hf_config(model_dir)
        parallel = build(ParallelConfig, cfg.parallel, "parallel")
        check_axes(parallel, self.layer_spec, cfg.hardware.accelerator == "gpu")
        check_layout(decoder_shape(hf_config), max(parallel.tp, 1), max(parallel.pp, 1))  # ranks: trainer.setup
        return MegatronPretrainConfig(
            task=task, data=data, model_name=cfg.model.name, model=model, model_dir=model_dir, hf_config=hf_config,
            hardware=OmegaConf.to_container(cfg.hardware, resolve=True), parallel=parallel,
            layer_spec=self.layer_spec, cache_dir=self.cache_dir, preflight=self.preflight, seed=int(cfg.seed))


def quiet_megatron() -> None:
    """megatron logs every config and bucket at INFO and warns at import that apex/TE are absent
    (expected with the local layer spec): keep its warnings and errors only."""
    import logging
    import warnings

    logging.getLogger("megatron").setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=r".*(Transformer Engine|Apex) (and Apex )?(are|is) not installed.*")
    warnings.filterwarnings("ignore", message=r"full scope is deprecated")
    warnings.filterwarnings("ignore", message=r"Please use DTensor instead and we are deprecating ShardedTensor")

