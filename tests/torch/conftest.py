"""Build a torch-backend trainer in-process from recipe overrides (the runtime's steps up to trainer.init)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hydra.utils import instantiate

from framework.core.context import RunContext
from framework.core.loggers import MetricLogger
from tests.conftest import compose_config

pytest.importorskip("trl")


def torch_config(overrides: list[str]):
    """(adapter, TorchConfig) as the runtime builds them, patches of the setup phase not applied."""
    cfg = compose_config(overrides)
    adapter = instantiate(cfg.backend.adapter)
    adapter.prepare_backend(cfg)
    return cfg, adapter, adapter.convert_config(cfg)


def build_trainer(overrides: list[str], run_dir: Path):
    """Our SFT/DPO trainer after setup() and init(): .trainer is the TRL trainer, .model the (PEFT) model."""
    cfg, adapter, config = torch_config(overrides)
    Path(run_dir).mkdir(parents=True, exist_ok=True)
    run = RunContext(Path(run_dir), cfg, MetricLogger(Path(run_dir)), int(cfg.seed))
    trainer = adapter.load_trainer_class(cfg.task.name)(config, run)
    trainer.setup()
    trainer.init()
    return trainer
