"""HF config -> megatron shapes, layout checks, and the QKV / SwiGLU weight packing (fast, no process group)."""

from __future__ import annotations

import pytest
import torch

from framework.backends.megatron import hf_weights
from framework.backends.megatron.model import check_layout, decoder_shape
from framework.core.errors import ConfigError
from tests.conftest import compose_config


@pytest.mark.parametrize("model, qkv_bias, qk_norm, tied", [("tiny_llama", False, False, False),
                                                             ("tiny_qwen2", True, False, True),
                                                             ("tiny_qwen3", False, True, True)])
def test_decoder_shape_of_each_family(model, qkv_bias, qk_norm, tied):
    hf = dict(compose_config([f"model={model}"]).model.hf_config)
    shape = decoder_shape(hf)
    assert (shape.num_heads, shape.num_query_groups, shape.head_dim) == (4, 2, 16)
    assert (shape.qkv_bias, shape.qk_norm, shape.tie_embeddings) == (qkv_bias, qk_norm, tied)
    assert shape.rope_theta == 10000.0 and shape.rope_scaling_factor is None


LLAMA31_SCALING = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                   "original_max_position_embeddings": 8192}


def test_rope_from_transformers5_parameters_and_llama3_scaling():
    base = dict(compose_config(["model=tiny_llama"]).model.hf_config)
    default = decoder_shape({**base, "rope_parameters": {"rope_type": "default", "rope_theta": 1e6}})
    assert (default.rope_theta, default.rope_scaling_factor) == (1e6, None)
    scaled = decoder_shape({**base, "rope_theta": 5e5, "rope_scaling": LLAMA31_SCALING})
    assert (scaled.rope_theta, scaled.rope_scaling_factor) == (5e5, 8.0)
    with pytest.raises(ConfigError, match="rope type 'yarn' does not run on backend=megatron"):
        decoder_shape({**base, "rope_parameters": {"rope_type": "yarn", "rope_theta": 1e4, "factor": 4}})
    with pytest.raises(ConfigError, match="megatron-core fixes them"):  # other llama3 values: refused, not ignored
        decoder_shape({**base, "rope_scaling": {**LLAMA31_SCALING, "high_freq_factor": 2.0}})


@pytest.mark.parametrize("key", ["attention_bias", "mlp_bias"])
def test_biases_megatron_would_drop_are_refused(key):
    base = dict(compose_config(["model=tiny_llama"]).model.hf_config)
    with pytest.raises(ConfigError, match=f"model.hf_config.{key}: true does not run on backend=megatron"):
        decoder_shape({**base, key: True})


@pytest.mark.parametrize("tp, pp, message", [(3, 1, "parallel.tp: 3 does not divide the model's num_attention_heads"),
                                             (4, 1, "num_key_value_heads \\(2\\)"),
                                             (1, 3, "parallel.pp: 3 does not divide the model's num_hidden_layers")])
def test_layouts_that_do_not_divide_the_model(tp, pp, message):
    shape = decoder_shape(dict(compose_config(["model=tiny_llama"]).model.hf_config))
    with pytest.raises(ConfigError, match=message):
        check_layout(shape, tp, pp)


def test_unknown_architecture_is_one_line():
    with pytest.raises(ConfigError, match="model_type: 'deepseek_v3' does not run on backend=megatron"):
        decoder_shape({"model_type": "deepseek_v3"})


def test_qkv_packing_round_trips_and_groups_heads():
    shape = decoder_shape(dict(compose_config(["model=tiny_qwen2"]).model.hf_config))
    q, k, v = torch.randn(64, 64), torch.randn(32, 64), torch.randn(32, 64)
    packed = hf_weights.pack_qkv(q, k, v, shape)
    assert packed.shape == (128, 64)
    assert torch.equal(packed[:32], q[:32]) and torch.equal(packed[32:48], k[:16])  # group 0: 2 q heads, k, v
    assert all(torch.equal(a, b) for a, b in zip(hf_weights.unpack_qkv(packed, shape), (q, k, v)))


def test_tensor_parallel_shards_reassemble_to_the_hf_tensors():
    shape = decoder_shape(dict(compose_config(["model=tiny_llama"]).model.hf_config))
    hf = {"model.layers.1.mlp.gate_proj.weight": torch.randn(128, 64),
          "model.layers.1.mlp.up_proj.weight": torch.randn(128, 64),
          "model.layers.1.self_attn.o_proj.weight": torch.randn(64, 64)}
    for name in ("decoder.layers.0.mlp.linear_fc1.weight", "decoder.layers.0.self_attention.linear_proj.weight"):
        parts = [hf_weights.local_from_hf(name, hf, 1, shape, rank, 2) for rank in range(2)]
        back = hf_weights.hf_from_parts(name, parts, 1, shape)
        assert back and all(torch.equal(tensor, hf[key]) for key, tensor in back.items())
