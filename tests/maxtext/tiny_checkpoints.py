"""Tiny HF checkpoints with non-trivial weights, shared by the model and sampler tests."""

from __future__ import annotations

from pathlib import Path

from tests.perturbed import model_cfg, perturbed_model_dir  # noqa: F401 - model_cfg is re-exported to the tests


def load_tiny(name: str, base: Path) -> dict:
    """The perturbed checkpoint as our params (through the loader under test) and as the HF model."""
    from transformers import AutoModelForCausalLM

    from framework.backends.maxtext.checkpoint_io import load_hf_params
    from framework.backends.maxtext.models import ModelConfig

    model_dir = perturbed_model_dir(name, base)
    config = ModelConfig.from_pretrained(model_dir)
    return {"dir": model_dir, "config": config, "params": load_hf_params(model_dir, config),
            "hf": AutoModelForCausalLM.from_pretrained(model_dir).eval()}
