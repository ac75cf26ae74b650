from math import prod

import pytest
from sims_helpers import model_config

from framework.core.errors import ConfigError
from sims import build_graph, param_counts, register_config_builder, supported_model_types
from sims.builders import registry


def test_model_type_inferred_from_architectures():
    cfg = model_config("qwen3_30b_a3b")
    del cfg["model_type"]
    assert build_graph(cfg).meta["model_type"] == "qwen3_moe"


def test_unsupported_model_type_lists_supported_ones():
    with pytest.raises(ConfigError) as error:
        build_graph({"model_type": "mamba", "hidden_size": 8})
    message = str(error.value)
    assert "'mamba'" in message
    for supported in ("deepseek_v3", "llama", "qwen2", "qwen3", "qwen3_moe"):
        assert supported in message
    assert {"deepseek_v3", "llama", "qwen2", "qwen3", "qwen3_moe"} <= set(supported_model_types())


def test_missing_config_field_is_named():
    cfg = model_config("llama3_1_8b")
    del cfg["intermediate_size"]
    with pytest.raises(ConfigError, match="hf_config.intermediate_size is missing"):
        build_graph(cfg)


def test_register_config_builder_adds_a_type_and_refuses_duplicates():
    @register_config_builder("test_llama_alias")
    def build(cfg, mode):
        return registry._BUILDERS["llama"](cfg, mode)

    try:
        cfg = {**model_config("llama3_1_8b"), "model_type": "test_llama_alias"}
        assert param_counts(cfg)["total"] == param_counts(model_config("llama3_1_8b"))["total"]
        with pytest.raises(ValueError, match="already registered"):
            register_config_builder("test_llama_alias")(build)
    finally:
        registry._BUILDERS.pop("test_llama_alias")


def weights(graph, name):
    return graph.node(name).weights


def test_qwen3_dense_shapes_use_config_head_dim_and_qk_norm():
    graph = build_graph(model_config("qwen3_8b"))
    assert weights(graph, "q_proj") == ((4096, 32 * 128),)
    assert weights(graph, "kv_proj") == ((4096, 2 * 8 * 128),)
    assert weights(graph, "o_proj") == ((32 * 128, 4096),)
    assert weights(graph, "qk_norm") == ((128,), (128,))
    assert weights(graph, "mlp_gate_up_proj") == ((4096, 2 * 12288),)
    attention = graph.node("attention")
    assert (attention.attrs["heads"], attention.attrs["kv_heads"], attention.attrs["qk_dim"]) == (32, 8, 128)
    assert attention.repeat == 36


def test_qwen2_has_qkv_bias_and_llama_has_none():
    qwen2 = build_graph(model_config("qwen2_5_0_5b_instruct"))
    assert weights(qwen2, "q_proj") == ((896, 896), (896,))
    assert weights(qwen2, "kv_proj") == ((896, 2 * 2 * 64), (256,))
    assert weights(qwen2, "o_proj") == ((896, 896),)
    llama = build_graph(model_config("llama3_1_8b"))
    assert weights(llama, "q_proj") == ((4096, 4096),)
    assert "qk_norm" not in {n.name for n in llama.nodes}


def test_qwen3_moe_experts_and_head_dim_wider_than_hidden():
    graph = build_graph(model_config("qwen3_30b_a3b"))
    assert weights(graph, "q_proj") == ((2048, 32 * 128),)  # 4096 != hidden 2048
    assert weights(graph, "router") == ((2048, 128),)
    assert weights(graph, "experts_gate_up") == ((128, 2048, 2 * 768),)
    assert weights(graph, "experts_down") == ((128, 768, 2048),)
    assert graph.node("experts_gate_up").attrs["top_k"] == 8
    assert graph.node("experts_gate_up").parallel.expert_parallel
    assert graph.node("experts_down").repeat == 48
    assert "mlp_gate_up_proj" not in {n.name for n in graph.nodes}  # every layer is MoE


def test_qwen3_moe_dense_layers_follow_sparse_step_and_mlp_only_layers():
    cfg = {**model_config("qwen3_30b_a3b"), "num_hidden_layers": 6, "decoder_sparse_step": 2, "mlp_only_layers": [3]}
    graph = build_graph(cfg)
    assert graph.node("experts_down").layers == (1, 5)
    assert graph.node("mlp_down_proj").layers == (0, 2, 3, 4)


def test_deepseek_v3_mla_prefill_shapes():
    graph = build_graph(model_config("deepseek_v3"), "prefill")
    assert weights(graph, "fused_qkv_a_proj") == ((7168, 1536 + 512 + 64),)
    assert weights(graph, "q_a_layernorm") == ((1536,),)
    assert weights(graph, "q_b_proj") == ((1536, 128 * (128 + 64)),)
    assert weights(graph, "kv_a_layernorm") == ((512,),)
    assert weights(graph, "kv_b_proj") == ((512, 128 * (128 + 128)),)
    assert weights(graph, "o_proj") == ((128 * 128, 7168),)
    attention = graph.node("attention").attrs
    assert (attention["qk_dim"], attention["v_dim"], attention["kv_heads"]) == (192, 128, 128)
    assert (attention["cache_dim"], attention["cache_heads"]) == (576, 1)


def test_deepseek_v3_decode_absorbs_kv_b_into_latent_attention():
    graph = build_graph(model_config("deepseek_v3"), "decode")
    names = {n.name for n in graph.nodes}
    assert "kv_b_proj" not in names
    assert weights(graph, "q_absorb") == ((128, 128, 512),)  # W_UK per head: nope 128 -> latent 512
    assert weights(graph, "v_up") == ((128, 512, 128),)  # W_UV per head: latent 512 -> v 128
    attention = graph.node("attention")
    assert attention.inputs == (("batch", "seq_len", 128, 576), ("batch", "kv_len", 1, 576))
    assert (attention.attrs["qk_dim"], attention.attrs["v_dim"], attention.attrs["kv_heads"]) == (576, 512, 1)
    # Absorption moves weights around without changing them.
    assert param_counts(model_config("deepseek_v3"))["total"] == sum(
        n.repeat * sum(prod(w) for w in n.weights) for n in graph.nodes if not n.attrs.get("tied")
    )


def test_deepseek_v3_layers_dense_moe_and_no_mtp_layer():
    graph = build_graph(model_config("deepseek_v3"))
    assert graph.node("mlp_down_proj").layers == (0, 1, 2)
    assert graph.node("experts_down").layers == tuple(range(3, 61))
    assert weights(graph, "experts_gate_up") == ((256, 7168, 2 * 2048),)
    assert weights(graph, "shared_experts_gate_up_proj") == ((7168, 2 * 2048),)
    assert weights(graph, "router") == ((7168, 256), (256,))  # + e_score_correction_bias
    assert max(layer for n in graph.nodes for layer in n.layers) == 61  # head after layer 60; no layer 61
    assert graph.node("attention").repeat == 61
