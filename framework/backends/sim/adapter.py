"""Adapter of the simulator backend: no library to prepare; the config becomes a SimJob or a CalibrateJob."""

from __future__ import annotations

from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from framework.backends.sim.config import CalibrateJob, SimJob
from framework.core.adapter import BackendAdapter


class SimAdapter(BackendAdapter):
    name = "sim"
    trainers = {
        "sim": "framework.backends.sim.trainers:SimTrainer",
        "calibrate": "framework.backends.sim.trainers:CalibrateTrainer",
    }
    libraries = ("crucible",)  # the simulator ships inside Crucible

    def convert_config(self, cfg: DictConfig) -> SimJob | CalibrateJob:
        job = CalibrateJob if cfg.task.name == "calibrate" else SimJob
        return job(
            task=instantiate(cfg[cfg.task.name]),
            model_name=cfg.model.name,
            hf_config=OmegaConf.to_container(cfg.model.hf_config, resolve=True),
            hardware=OmegaConf.to_container(cfg.hardware, resolve=True),
        )
