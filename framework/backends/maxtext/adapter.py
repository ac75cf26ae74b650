"""Adapter of the maxtext backend: checks the JAX stack, picks the platform, builds the GRPO config.

Nothing here imports jax at module level: the adapter is instantiated when any run validates.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path

from omegaconf import DictConfig

from framework.backends.maxtext.config import (ATTENTION_KERNELS, DECODE_KERNELS, REMAT_NAMES, SHARED_PREFIX,
                                              GRPOConfig, check_attention_dtype, check_choice)
from framework.core.adapter import BackendAdapter, require_modules
from framework.core.build import build
from framework.core.distributed import DistEnv, detect
from framework.core.errors import ConfigError
from framework.core.hardware import require_accelerator
from framework.core.parallel import ParallelConfig
from framework.core.paths import check_cache_dir
from framework.core.plain import to_plain
from framework.models.hf_config import max_positions
from framework.tasks.grpo import GRPOTask, check_grpo_values, check_sequence_fits

log = logging.getLogger(__name__)

REQUIRED_MODULES = {"jax": "jax", "flax": "flax", "optax": "optax", "safetensors": "safetensors"}
# hardware.accelerator -> JAX platform name
JAX_PLATFORMS = {"cpu": "cpu", "gpu": "gpu", "tpu": "tpu"}  # "gpu": CUDA or ROCm, see gpu_platform()


class MaxTextAdapter(BackendAdapter):
    name = "maxtext"
    trainers = {"grpo": "framework.backends.maxtext.trainers.grpo:GRPOTrainer"}
    libraries = ("jax", "jaxlib", "flax", "optax", "safetensors")
    patch_modules = ("framework.backends.maxtext.patches",)

    def __init__(self, logical_axis_rules: dict, cache_dir: str, remat: str, attention: str, decode_attention: str,
                 shared_prefix: str, aot_compile: bool):
        self.logical_axis_rules = to_plain(logical_axis_rules)
        self.cache_dir = check_cache_dir(cache_dir)
        self.remat = check_choice(remat, (*REMAT_NAMES, "auto"), "backend.adapter.remat")
        self.attention = check_choice(attention, ("auto", *ATTENTION_KERNELS), "backend.adapter.attention")
        self.decode_attention = check_choice(decode_attention, ("auto", *DECODE_KERNELS),
                                             "backend.adapter.decode_attention")
        self.shared_prefix = check_choice(shared_prefix, SHARED_PREFIX, "backend.adapter.shared_prefix")
        if not isinstance(aot_compile, bool):
            raise ConfigError(f"backend.adapter.aot_compile: {aot_compile!r} is not true or false")
        self.aot_compile = aot_compile

    def prepare_backend(self, cfg: DictConfig) -> None:
        require_modules("maxtext", REQUIRED_MODULES, "jax")
        accelerator = cfg.hardware.accelerator
        if accelerator not in JAX_PLATFORMS:
            raise ConfigError(f"hardware.accelerator: {accelerator!r} has no JAX platform; backend=maxtext runs on "
                              f"{', '.join(JAX_PLATFORMS)}")
        if not os.environ.get("JAX_PLATFORMS"):  # the user's JAX_PLATFORMS=cpu runs a GPU/TPU recipe on CPU
            require_accelerator(cfg.hardware)
        platform = JAX_PLATFORMS[accelerator]
        set_jax_platform(gpu_platform() if platform == "gpu" else platform)
        initialize_distributed(detect(), int(cfg.hardware.nodes))

    def convert_config(self, cfg: DictConfig) -> GRPOConfig:
        from framework.backends.maxtext.sharding import ROLLOUT_KEY, check_supported
        from framework.backends.maxtext.trainers.pipeline import check_off_policy
        from framework.data import check_data, data_spec
        from framework.models.source import start_model_source

        task = build(GRPOTask, cfg.grpo, "grpo")
        check_grpo_values(task)
        check_sequence_fits(task, max_positions(cfg.model.get("hf_config") or {}))
        check_attention_dtype(self.attention, task.compute_dtype)  # the model checks it again: one rule
        parallel = build(ParallelConfig, cfg.parallel, "parallel")
        check_supported(parallel)
        if parallel.rollout is not None:  # null: the rollout decodes in the update's layout
            check_supported(parallel.rollout, ROLLOUT_KEY)
        check_off_policy(task.rollout_lag, parallel.rollout)
        data = data_spec(cfg.data, "grpo")
        if data.source != "hub":
            check_data(data)  # files: before any model is built or downloaded
        # the model's small files now (a hub download's; a random-init build's come while setup runs), its
        # weights in the background: the trainer compiles meanwhile (trainers/startup.py)
        model_source = start_model_source(to_plain(cfg.model), Path(self.cache_dir) / "models")
        if data.source == "hub":
            try:
                check_data(data)  # after the model: offline, the model's one line names every way out first
            except BaseException:
                model_source.close()
                raise
        return GRPOConfig(
            task=task, data=data, model_name=cfg.model.name, model_source=model_source,
            hardware=to_plain(cfg.hardware), parallel=parallel,
            logical_axis_rules=self.logical_axis_rules, cache_dir=self.cache_dir, seed=int(cfg.seed),
            remat=self.remat, attention=self.attention, decode_attention=self.decode_attention,
            shared_prefix=self.shared_prefix, aot_compile=self.aot_compile)


def gpu_platform() -> str:
    """'cuda' or 'rocm', by the plugin installed: JAX_PLATFORMS=gpu makes jax 0.11 try both and fail."""
    import pkgutil

    plugins = {m.name for m in pkgutil.iter_modules()}
    has_rocm = any(name.startswith("jax_rocm") for name in plugins)
    has_cuda = any(name.startswith("jax_cuda") for name in plugins)
    return "rocm" if has_rocm and not has_cuda else "cuda"


def set_jax_platform(platform: str) -> None:
    """Select the JAX platform unless the user chose one (JAX_PLATFORMS=cpu runs a TPU recipe on CPU)."""
    chosen = os.environ.get("JAX_PLATFORMS")
    if chosen and chosen != platform:
        log.warning("JAX_PLATFORMS=%s is set: using it instead of %s from the hardware group", chosen, platform)
        platform = chosen
    os.environ["JAX_PLATFORMS"] = platform
    import jax

    jax.config.update("jax_platforms", platform)  # jax read the variable at import, maybe before we set it


def initialize_distributed(env: DistEnv, nodes: int) -> None:
    """One JAX process per rank: the coordinator, world size and rank come from the launcher's
    environment; a multi-host TPU slice without one (nodes > 1) lets JAX find its own coordinates."""
    import jax

    if env.is_distributed:
        jax.distributed.initialize(env.coordinator, env.world_size, env.rank)
    elif nodes > 1:
        jax.distributed.initialize()

