"""DeepSeek-V3 (and V2): multi-head latent attention (MLA), dense first layers, shared + routed experts.

MLA caches one latent per token and layer: kv_lora_rank (compressed k/v) + qk_rope_head_dim (shared
rotary key) = 576 values for V3. Prefill and training expand the latent into per-head keys and values
(kv_b_proj) and run ordinary attention (qk 192, v 128). Decode uses the absorbed form (DeepSeek's and
vLLM's "weight absorption"): W_UK is folded into the query and W_UV applied after attention, so
attention runs directly over the 576-wide latent cache as multi-query attention with one kv head.

The multi-token-prediction (MTP) module (num_nextn_predict_layers) is not a main layer: it is not in
the graph; its parameter count is reported separately as meta["params_mtp"].
"""

from __future__ import annotations

from collections.abc import Mapping
from math import prod

from sims.builders.common import (
    ATTENTION_HEADS,
    COLUMN,
    HEADS,
    ROW,
    REPLICATED,
    SHARDED,
    GraphBuilder,
    layer_groups,
    require,
    tp_comm,
)
from sims.builders.registry import register_config_builder
from sims.ir import ComputationalGraph


def mla_attention(b: GraphBuilder, layers, cfg: Mapping) -> None:
    t = b.model_type
    h = b.hidden
    heads = require(cfg, "num_attention_heads", t)
    q_lora = cfg.get("q_lora_rank")
    kv_lora = require(cfg, "kv_lora_rank", t)
    nope = require(cfg, "qk_nope_head_dim", t)
    rope = require(cfg, "qk_rope_head_dim", t)
    v_dim = require(cfg, "v_head_dim", t)
    qk_dim, latent = nope + rope, kv_lora + rope
    mla = {"is_attention": True, "is_mla": True}
    b.add("input_layernorm", "norm", layers, [("tokens", h)], [("tokens", h)], [(h,)], attrs={"fused_residual": True})
    if q_lora:
        # q_a and kv_a share their input: one replicated GEMM (vLLM's fused_qkv_a_proj).
        b.add(
            "fused_qkv_a_proj",
            "gemm",
            layers,
            [("tokens", h)],
            [("tokens", q_lora + latent)],
            [(h, q_lora + latent)],
            **mla,
        )
        b.add("q_a_layernorm", "norm", layers, [("tokens", q_lora)], [("tokens", q_lora)], [(q_lora,)], **mla)
        b.add(
            "q_b_proj",
            "gemm",
            layers,
            [("tokens", q_lora)],
            [("tokens", heads * qk_dim)],
            [(q_lora, heads * qk_dim)],
            COLUMN,
            **mla,
        )
    else:
        b.add("kv_a_proj_with_mqa", "gemm", layers, [("tokens", h)], [("tokens", latent)], [(h, latent)], **mla)
        b.add(
            "q_proj",
            "gemm",
            layers,
            [("tokens", h)],
            [("tokens", heads * qk_dim)],
            [(h, heads * qk_dim)],
            COLUMN,
            **mla,
        )
    b.add("kv_a_layernorm", "norm", layers, [("tokens", kv_lora)], [("tokens", kv_lora)], [(kv_lora,)], **mla)
    b.add(
        "rotary",
        "elementwise",
        layers,
        [("tokens", heads * rope)],
        [("tokens", heads * rope)],
        parallel=SHARDED,
        attrs={"flops_per_element": 3},
        **mla,
    )
    cache = {"cache_dim": latent, "cache_heads": 1}
    b.kv_cache_write(layers, latent, 1, REPLICATED, **mla)  # the latent is cached whole on every tp rank
    if b.mode == "decode":
        b.add(
            "q_absorb",
            "gemm",
            layers,
            [("tokens", heads, nope)],
            [("tokens", heads, kv_lora)],
            [(heads, nope, kv_lora)],
            HEADS,
            **mla,
        )
        b.add(
            "attention",
            "attention",
            layers,
            [("batch", "seq_len", heads, latent), ("batch", "kv_len", 1, latent)],
            [("batch", "seq_len", heads, kv_lora)],
            parallel=ATTENTION_HEADS,
            attrs={"heads": heads, "kv_heads": 1, "qk_dim": latent, "v_dim": kv_lora, "kv_dim": latent, **cache},
            **mla,
        )
        b.add(
            "v_up",
            "gemm",
            layers,
            [("tokens", heads, kv_lora)],
            [("tokens", heads, v_dim)],
            [(heads, kv_lora, v_dim)],
            HEADS,
            **mla,
        )
    else:
        b.add(
            "kv_b_proj",
            "gemm",
            layers,
            [("tokens", kv_lora)],
            [("tokens", heads * (nope + v_dim))],
            [(kv_lora, heads * (nope + v_dim))],
            COLUMN,
            **mla,
        )
        b.add(
            "attention",
            "attention",
            layers,
            [
                ("batch", "seq_len", heads, qk_dim),
                ("batch", "kv_len", heads, qk_dim),
                ("batch", "kv_len", heads, v_dim),
            ],
            [("batch", "seq_len", heads, v_dim)],
            parallel=ATTENTION_HEADS,
            attrs={
                "heads": heads,
                "kv_heads": heads,
                "qk_dim": qk_dim,
                "v_dim": v_dim,
                "kv_dim": qk_dim + v_dim,
                **cache,
            },
            **mla,
        )
    b.add("o_proj", "gemm", layers, [("tokens", heads * v_dim)], [("tokens", h)], [(heads * v_dim, h)], ROW, **mla)
    b.nodes.append(tp_comm("attn_all_reduce", layers, h))


@register_config_builder("deepseek_v3")
def build_deepseek_v3(cfg: Mapping, mode: str) -> ComputationalGraph:
    model_type = "deepseek_v3"
    b = GraphBuilder(model_type, mode, cfg, model_type)
    experts = require(cfg, "n_routed_experts", model_type)
    top_k = require(cfg, "num_experts_per_tok", model_type)
    shared = cfg.get("n_shared_experts") or 0
    expert_intermediate = require(cfg, "moe_intermediate_size", model_type)
    first_dense = cfg.get("first_k_dense_replace") or 0
    freq = cfg.get("moe_layer_freq") or 1
    # Same rule as transformers' DeepseekV3 decoder layers.
    dense, moe = layer_groups(b.num_layers, lambda i: experts > 0 and i >= first_dense and i % freq == 0)
    intermediate = require(cfg, "intermediate_size", model_type) if dense else 0
    b.embedding()
    mla_attention(b, range(b.num_layers), cfg)
    if dense:
        b.dense_mlp(dense, intermediate)
    if moe:
        b.moe(
            moe, experts, top_k, expert_intermediate, shared_intermediate=shared * expert_intermediate, router_bias=True
        )
    b.head()
    heads = require(cfg, "num_attention_heads", model_type)
    return b.graph(
        num_attention_heads=heads,
        num_key_value_heads=heads,
        head_dim=cfg["v_head_dim"],
        intermediate_size=intermediate,
        moe_intermediate_size=expert_intermediate,
        num_experts=experts,
        top_k=top_k,
        dense_layers=len(dense),
        moe_layers=len(moe),
        params_mtp=_mtp_params(b, cfg, moe or dense),
    )


def _mtp_params(b: GraphBuilder, cfg: Mapping, layer_kind: list[int]) -> int:
    """Unique parameters of the MTP modules: one decoder layer like the last main layer, plus
    eh_proj (2h -> h) and three RMSNorms (enorm, hnorm, head norm); embedding and head are shared."""
    depth = cfg.get("num_nextn_predict_layers") or 0
    last = layer_kind[-1]
    layer = sum(prod(w) for n in b.nodes if last in n.layers for w in n.weights)
    return depth * (layer + 2 * b.hidden * b.hidden + 3 * b.hidden)
