"""HF <-> megatron weights: megatron's forward of an imported HF checkpoint gives transformers' logits,
and the export writes back exactly the tensors it imported (Llama, Qwen2, Qwen3 layouts).

Tolerance: fp32 on CPU, max |logit difference| <= 1e-4 (the two frameworks order the same
float32 operations differently: RoPE, RMSNorm and softmax; measured 2e-7 on these tiny models).
"""

from __future__ import annotations

import pytest
import torch
from hydra.utils import instantiate

from tests.conftest import compose_config

LOGIT_TOLERANCE = 1e-4


def _config(model: str, cache_dir):
    cfg = compose_config(["recipe=pretrain_megatron_cpu", f"model={model}", "pretrain.init_from=pretrained",
                          f"backend.adapter.cache_dir={cache_dir}"])
    return instantiate(cfg.backend.adapter).convert_config(cfg)


@pytest.mark.parametrize("model, spec", [("tiny_llama", "local"), ("tiny_qwen2", "local"), ("tiny_qwen3", "local"),
                                         ("tiny_llama", "local_sdpa")])
def test_megatron_forward_matches_transformers_and_export_round_trips(model, spec, megatron_world, cache_dir,
                                                                      tmp_path):
    from safetensors.torch import load_file
    from transformers import AutoModelForCausalLM

    from framework.backends.megatron.engine import Engine
    from framework.backends.megatron.hf_weights import read_hf_weights
    from framework.backends.megatron.model import decoder_shape

    from framework.models.tiny import resolve_model_dir

    config = _config(model, cache_dir)
    model_dir = resolve_model_dir(config.model, cache_dir / "models")  # the random-init HF directory
    engine = Engine(decoder_shape(config.hf_config), megatron_world, config.task, spec, on_gpu=False)
    assert engine.import_hf(model_dir) >= 10
    attention = type(engine.module.decoder.layers[0].self_attention.core_attention).__name__
    assert attention == {"local": "DotProductAttention", "local_sdpa": "SDPAttention"}[spec]
    tokens = torch.randint(0, config.hf_config["vocab_size"], (2, 24), generator=torch.Generator().manual_seed(0))
    positions = torch.arange(24).expand(2, 24)
    with torch.no_grad():
        ours = engine.module(tokens, positions, None)
        reference = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)(tokens).logits
    assert ours.shape == reference.shape
    assert (ours - reference).abs().max().item() <= LOGIT_TOLERANCE

    out = engine.export_hf(model_dir, tmp_path / "export", "float32")
    exported, source = load_file(str(out / "model.safetensors")), read_hf_weights(model_dir)
    assert sorted(exported) == sorted(source)
    assert all(torch.equal(exported[name], source[name]) for name in source)
    assert (out / "tokenizer.json").is_file() and (out / "config.json").is_file()
