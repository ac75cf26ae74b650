"""Qwen3-MoE: Qwen3 attention (QK-norm) with routed experts, no shared expert."""

from __future__ import annotations

from collections.abc import Mapping

from sims.builders.common import GraphBuilder, layer_groups, require
from sims.builders.registry import register_config_builder
from sims.ir import ComputationalGraph


@register_config_builder("qwen3_moe")
def build_qwen3_moe(cfg: Mapping, mode: str) -> ComputationalGraph:
    model_type = "qwen3_moe"
    b = GraphBuilder(model_type, mode, cfg, model_type)
    heads = require(cfg, "num_attention_heads", model_type)
    kv_heads = cfg.get("num_key_value_heads") or heads
    head_dim = cfg.get("head_dim") or b.hidden // heads
    experts = require(cfg, "num_experts", model_type)
    top_k = require(cfg, "num_experts_per_tok", model_type)
    expert_intermediate = require(cfg, "moe_intermediate_size", model_type)
    mlp_only = set(cfg.get("mlp_only_layers") or ())
    sparse_step = cfg.get("decoder_sparse_step") or 1
    # Same rule as transformers' Qwen3MoeDecoderLayer.
    dense, moe = layer_groups(b.num_layers, lambda i: i not in mlp_only and experts > 0 and (i + 1) % sparse_step == 0)
    intermediate = require(cfg, "intermediate_size", model_type) if dense else 0
    b.embedding()
    b.gqa_attention(
        range(b.num_layers), heads, kv_heads, head_dim, qkv_bias=bool(cfg.get("attention_bias")), qk_norm=True
    )
    if dense:
        b.dense_mlp(dense, intermediate)
    if moe:
        b.moe(moe, experts, top_k, expert_intermediate)
    b.head()
    return b.graph(
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        intermediate_size=intermediate,
        moe_intermediate_size=expert_intermediate,
        num_experts=experts,
        top_k=top_k,
        dense_layers=len(dense),
        moe_layers=len(moe),
        params_mtp=0,
    )
