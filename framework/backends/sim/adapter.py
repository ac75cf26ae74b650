"""Adapter of the simulator backend: no library to prepare; the config becomes a SimJob or a CalibrateJob."""

from __future__ import annotations

from pathlib import Path

from omegaconf import DictConfig

from framework.backends.sim.config import CalibrateJob, SimJob
from framework.core.adapter import BackendAdapter
from framework.core.build import build
from framework.core.parallel import ParallelConfig
from framework.core.plain import to_plain
from framework.core.schema import check_model_architecture
from framework.core.validation import read_config_json
from framework.tasks.calibrate import CalibrateTask
from framework.tasks.sim import SimTask


class SimAdapter(BackendAdapter):
    name = "sim"
    trainers = {
        "sim": "framework.backends.sim.trainers:SimTrainer",
        "calibrate": "framework.backends.sim.trainers:CalibrateTrainer",
    }
    libraries = ("crucible",)  # the simulator ships inside Crucible

    def convert_config(self, cfg: DictConfig) -> SimJob | CalibrateJob:
        model = {"model_name": cfg.model.name, "hf_config": model_hf_config(cfg.model),
                 "hardware": to_plain(cfg.hardware)}
        if cfg.task.name == "calibrate":
            return CalibrateJob(task=build(CalibrateTask, cfg.calibrate, "calibrate"), **model)
        return SimJob(task=build(SimTask, cfg.sim, "sim"), parallel=build(ParallelConfig, cfg.parallel, "parallel"),
                      **model)


def model_hf_config(model: DictConfig) -> dict:
    """The architecture to simulate: a local model folder's config.json (model.path, checked by the runtime), else
    the model group's hf_config."""
    if model.get("path"):
        path = Path(model.path).expanduser() / "config.json"
        config = read_config_json(path)
        check_model_architecture(config, where=f"model.path: {path}: ")  # the runtime checked the group's hf_config
        return config
    return to_plain(model.hf_config)
