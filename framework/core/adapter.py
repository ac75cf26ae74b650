"""BackendAdapter: the bridge between Crucible's composed config and one backend library."""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
from typing import Any, ClassVar

from omegaconf import DictConfig

from framework.core.errors import ConfigError
from framework.core.trainer import BaseTrainer


class BackendAdapter(ABC):
    """Subclasses declare their name, the tasks they run and the modules holding their patches.

    trainers maps a task name to "module:Class"; modules are imported only when the task runs, so a
    user without jax can still run the simulator.
    """

    name: ClassVar[str]
    trainers: ClassVar[dict[str, str]]
    patch_modules: ClassVar[tuple[str, ...]] = ()

    def prepare_backend(self, cfg: DictConfig) -> None:
        """Check the backend library is importable and set process-level state (env vars, devices)."""

    @abstractmethod
    def convert_config(self, cfg: DictConfig) -> Any:
        """Turn the composed config into what this backend's trainer takes (a typed object)."""

    @abstractmethod
    def detect_backend_version(self) -> str | None:
        """The installed backend library's version, or None when it cannot be told."""

    def load_trainer_class(self, task: str) -> type[BaseTrainer]:
        if task not in self.trainers:
            raise ConfigError(f"task={task} does not run on backend={self.name}; it runs: {', '.join(sorted(self.trainers))}")
        module_name, _, class_name = self.trainers[task].partition(":")
        return getattr(importlib.import_module(module_name), class_name)

    def load_patches(self) -> None:
        """Import this backend's patch modules (registration happens at import; bodies stay lazy)."""
        for module in self.patch_modules:
            importlib.import_module(module)
