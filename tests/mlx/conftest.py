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
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from framework.models.tiny import build_tiny_model

    source = build_tiny_model(tiny_cfg(), mlx_cache / "tiny_qwen2")
    out = mlx_cache / "tiny_qwen2_perturbed"
    if not (out / "model.safetensors").is_file():
        model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
        noise = torch.Generator().manual_seed(1)
        with torch.no_grad():
            for param in model.parameters():
                param.add_(torch.randn(param.shape, generator=noise) * 0.1)
        model.save_pretrained(out)
        AutoTokenizer.from_pretrained(source).save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def rope_patch():
    """The mlx backend's rope_parameters patch, as the runtime applies it at setup."""
    from framework.backends.mlx.patches.rope_parameters import install

    install()
