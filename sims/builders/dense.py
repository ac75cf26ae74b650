"""Dense GQA decoders: llama, qwen2 (q/k/v bias), qwen3 (per-head QK RMSNorm, explicit head_dim)."""

from __future__ import annotations

from collections.abc import Mapping

from sims.builders.common import GraphBuilder, require
from sims.builders.registry import register_config_builder
from sims.ir import ComputationalGraph


def build_dense(cfg: Mapping, mode: str, model_type: str, qkv_bias: bool, qk_norm: bool) -> ComputationalGraph:
    b = GraphBuilder(f"{model_type}-dense", mode, cfg, model_type)
    heads = require(cfg, "num_attention_heads", model_type)
    kv_heads = cfg.get("num_key_value_heads") or heads
    head_dim = cfg.get("head_dim") or b.hidden // heads
    intermediate = require(cfg, "intermediate_size", model_type)
    layers = range(b.num_layers)
    b.embedding()
    b.gqa_attention(layers, heads, kv_heads, head_dim, qkv_bias=qkv_bias, qk_norm=qk_norm)
    b.dense_mlp(layers, intermediate)
    b.head()
    return b.graph(
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=intermediate,
        moe_intermediate_size=0,
        num_experts=0,
        top_k=0,
        dense_layers=b.num_layers,
        moe_layers=0,
        params_mtp=0,
    )


@register_config_builder("llama")
def build_llama(cfg: Mapping, mode: str) -> ComputationalGraph:
    return build_dense(cfg, mode, "llama", qkv_bias=bool(cfg.get("attention_bias", False)), qk_norm=False)


@register_config_builder("qwen2")
def build_qwen2(cfg: Mapping, mode: str) -> ComputationalGraph:
    # Qwen2 always has q/k/v bias (architecture, not a config key).
    return build_dense(cfg, mode, "qwen2", qkv_bias=True, qk_norm=False)


@register_config_builder("qwen3")
def build_qwen3(cfg: Mapping, mode: str) -> ComputationalGraph:
    return build_dense(cfg, mode, "qwen3", qkv_bias=bool(cfg.get("attention_bias", False)), qk_norm=True)
