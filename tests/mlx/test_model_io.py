"""Loading HF directories with mlx-lm (the rope_parameters patch) and exporting the fused model back."""

from __future__ import annotations

import json

import numpy as np
import pytest

mx = pytest.importorskip("mlx.core")
pytest.importorskip("mlx_lm")
torch = pytest.importorskip("torch")

from framework.backends.mlx import lora, model_io  # noqa: E402
from framework.tasks.common import LoRAConfig  # noqa: E402

IDS = np.arange(1, 50, dtype=np.int32)[None] * 7 % 500


def hf_logits(path) -> np.ndarray:
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    with torch.no_grad():
        return model(torch.tensor(IDS, dtype=torch.long)).logits.numpy()


def test_transformers5_config_has_no_rope_theta_and_mlx_lm_would_assume_1e6(tiny_dir):
    from mlx_lm.models.qwen2 import ModelArgs

    config = json.loads((tiny_dir / "config.json").read_text())
    assert "rope_theta" not in config and config["rope_parameters"]["rope_theta"] == 10000.0
    assert ModelArgs.from_dict(config).rope_theta == 1e6  # the behaviour the patch fixes


def test_patched_load_matches_transformers_logits_fp32(tiny_dir, rope_patch):
    model, _ = model_io.load(tiny_dir, "float32")
    assert model.args.rope_theta == 10000.0
    diff = np.abs(np.array(model(mx.array(IDS))) - hf_logits(tiny_dir)).max()
    assert diff < 1e-5, diff


def test_fused_export_loads_in_transformers_with_the_same_logits(tiny_dir, rope_patch, tmp_path):
    model, _ = model_io.load(tiny_dir, "float32")
    lora.apply_lora(model, LoRAConfig(rank=4, alpha=8.0, dropout=0.0, target_modules=["all-linear"]), "sft.lora", 0)
    for module in lora.lora_modules(model):  # a trained-looking adapter: B = 0 would fuse to the base weights
        module.lora_b = mx.random.normal(module.lora_b.shape) * 0.05
    adapted = np.array(model(mx.array(IDS)))
    out = model_io.export_hf(lora.fuse(model), tiny_dir, tmp_path / "hf_export")
    assert {"config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"} <= {
        p.name for p in out.iterdir()}
    exported = hf_logits(out)
    assert np.abs(exported - hf_logits(tiny_dir)).max() > 1e-3  # the adapter is in the weights
    assert np.abs(exported - adapted).max() < 1e-5
