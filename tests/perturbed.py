"""Tiny HF checkpoints with non-trivial weights, shared by every backend's model tests."""

from __future__ import annotations

from pathlib import Path

import yaml

from framework.core.paths import CONF_DIR
from framework.models.tiny import build_tiny_model

CONF_MODEL = CONF_DIR / "model"


def model_cfg(name: str) -> dict:
    return yaml.safe_load((CONF_MODEL / f"{name}.yaml").read_text())


def perturbed_model_dir(name: str, base: Path) -> Path:
    """The tiny model with noise on every tensor: HF init leaves biases at 0 and norm scales at 1,
    which would hide a wrong layout of exactly those tensors."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = base / "perturbed" / name
    if (out / "model.safetensors").is_file():
        return out
    source = build_tiny_model(model_cfg(name), base / "tiny_models" / name)
    model = AutoModelForCausalLM.from_pretrained(source, dtype=torch.float32)
    noise = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for param in model.parameters():
            param.add_(torch.randn(param.shape, generator=noise) * 0.1)
    model.save_pretrained(out)
    AutoTokenizer.from_pretrained(source).save_pretrained(out)
    return out
