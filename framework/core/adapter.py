"""BackendAdapter: the bridge between Crucible's composed config and one backend library."""

from __future__ import annotations

import importlib
import pkgutil
from abc import ABC, abstractmethod
from typing import Any, ClassVar

from omegaconf import DictConfig

from framework.core.errors import BackendError
from framework.core.patches import installed_version
from framework.core.trainer import BaseTrainer


class BackendAdapter(ABC):
    """Subclasses declare their name, the tasks they run, their libraries and their patch modules.

    trainers maps a task name to "module:Class"; modules are imported only when the task runs, so a
    user without jax can still run the simulator. libraries are distribution names (as pip knows
    them, e.g. "orbax-checkpoint"), the first one the backend's main library: their installed
    versions go into summary.json and env.json and are what patches' `requires` are checked against.
    patch_modules name modules or packages; every submodule of a package is imported (one topic per
    file).
    """

    name: ClassVar[str]
    trainers: ClassVar[dict[str, str]]
    libraries: ClassVar[tuple[str, ...]] = ()
    patch_modules: ClassVar[tuple[str, ...]] = ()

    def prepare_backend(self, cfg: DictConfig) -> None:
        """Check the backend library is importable and set process-level state (env vars, devices)."""

    @abstractmethod
    def convert_config(self, cfg: DictConfig) -> Any:
        """Turn the composed config into what this backend's trainer takes (a typed object). If it starts work in
        the background (maxtext: the model build), it has a `close()` that stops it: the trainer's cleanup calls
        it, and the runtime does when the run fails before the trainer exists."""

    def detect_versions(self) -> dict[str, str | None]:
        """{distribution: installed version or None} for each of `libraries` (no library is imported)."""
        return {dist: installed_version(dist) for dist in self.libraries}

    def load_trainer_class(self, task: str) -> type[BaseTrainer]:
        module_name, _, class_name = self.trainers[task].partition(":")  # validate() checked the task
        return getattr(importlib.import_module(module_name), class_name)

    def load_patches(self) -> None:
        """Import this backend's patch modules and packages (registration happens at import; bodies stay lazy)."""
        for name in self.patch_modules:
            module = importlib.import_module(name)
            for info in pkgutil.walk_packages(getattr(module, "__path__", []), prefix=f"{name}."):
                importlib.import_module(info.name)


def require_modules(backend: str, modules: dict[str, str], extra: str) -> None:
    """BackendError naming the missing packages and the pip extra, when a module of `modules`
    ({import name: package}) is not installed; found without importing it (heavy libraries stay unloaded)."""
    import importlib.util

    def installed(module: str) -> bool:
        try:
            return importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:  # a parent package is missing
            return False

    missing = [package for module, package in modules.items() if not installed(module)]
    if missing:
        raise BackendError(f"backend={backend} needs {', '.join(missing)}: pip install -e '.[{extra}]'")
