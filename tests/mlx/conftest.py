"""Fixtures of the mlx backend tests: a tiny Qwen2 with non-trivial weights, loaded by mlx-lm and transformers.

Every test module here starts with pytest.importorskip("mlx.core"): without mlx they skip cleanly.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

CONF_MODEL = Path(__file__).resolve().parents[2] / "conf" / "model"


def tiny_cfg(name: str = "tiny_qwen2") -> dict:
    return yaml.safe_load((CONF_MODEL / f"{name}.yaml").read_text())


@pytest.fixture(scope="session")
def mlx_cache(tmp_path_factory) -> Path:
    """A CRUCIBLE_CACHE holding the tiny_qwen2 build the recipes use (built once, before any CLI run, so
    no run's stderr carries the builder's progress output)."""
    from framework.models.tiny import resolve_model_dir

    cache = tmp_path_factory.mktemp("mlx_cache")
    resolve_model_dir(tiny_cfg(), cache / "models")
    return cache


@pytest.fixture(scope="session")
def tiny_dir(mlx_cache) -> Path:
    """tiny_qwen2 with noise on every tensor (HF init leaves biases 0 and norms 1, hiding layout mistakes)."""
    from tests.perturbed import perturbed_model_dir

    return perturbed_model_dir("tiny_qwen2", mlx_cache)


@pytest.fixture(scope="session")
def rope_patch():
    """The mlx backend's rope_parameters patch, as the runtime applies it at setup."""
    from framework.backends.mlx.patches.rope_parameters import install

    install()
