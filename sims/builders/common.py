"""Blocks shared by the decoder-only builders: embedding, GQA attention, dense MLP, MoE, head."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from framework.core.errors import ConfigError
from sims.ir import ComputationalGraph, OpNode, ParallelSpec

DTYPE_NAMES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "float8_e4m3fn": "fp8"}
COLUMN = ParallelSpec(tp_mode="column", tp_dim=-1)
ROW = ParallelSpec(tp_mode="row", tp_dim=-2)
HEADS = ParallelSpec(tp_mode="heads", tp_dim=0)  # per-head batched GEMM, weight (heads, K, N)
ATTENTION_HEADS = ParallelSpec(tp_mode="heads")
SHARDED = ParallelSpec(tp_mode="sharded")
REPLICATED = ParallelSpec()


def require(cfg: Mapping, key: str, model_type: str) -> int:
    """An integer field of the HF config, or a one-line ConfigError naming it."""
    value = cfg.get(key)
    if value is None:
        raise ConfigError(f"hf_config.{key} is missing; the {model_type} graph builder needs it")
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigError(f"hf_config.{key} is {value!r}; expected a non-negative integer")
    return value


def tp_comm(name: str, layers: Sequence[int], hidden: int, when: str = "always", op_type: str = "all_reduce") -> OpNode:
    return OpNode(
        name,
        op_type,
        inputs=(("tokens", hidden),),
        outputs=(("tokens", hidden),),
        parallel=ParallelSpec(group="tp", when=when),
        layers=tuple(layers),
    )


class GraphBuilder:
    """Collects nodes; each block method appends the kernels of one kind of layer."""

    def __init__(self, name: str, mode: str, cfg: Mapping, model_type: str):
        self.name, self.mode, self.cfg, self.model_type = name, mode, cfg, model_type
        self.dtype = DTYPE_NAMES.get(str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16"), "bf16")
        self.hidden = require(cfg, "hidden_size", model_type)
        self.num_layers = require(cfg, "num_hidden_layers", model_type)
        self.vocab = require(cfg, "vocab_size", model_type)
        self.nodes: list[OpNode] = []

    def add(
        self, name: str, op_type: str, layers: Sequence[int], inputs, outputs, weights=(), parallel=REPLICATED, **kw
    ):
        self.nodes.append(
            OpNode(
                name, op_type, tuple(inputs), tuple(outputs), tuple(weights), self.dtype, parallel, tuple(layers), **kw
            )
        )

    def graph(self, **meta) -> ComputationalGraph:
        base = {
            "model_type": self.model_type,
            "num_layers": self.num_layers,
            "hidden_size": self.hidden,
            "vocab_size": self.vocab,
            "tie_word_embeddings": bool(self.cfg.get("tie_word_embeddings", False)),
            "dtype": self.dtype,
            # the positions the model was built for; None (not in the config): any length is costed
            "max_positions": require(self.cfg, "max_position_embeddings", self.model_type)
            if self.cfg.get("max_position_embeddings") is not None else None,
        }
        return ComputationalGraph(self.name, self.mode, list(self.nodes), {**base, **meta})

    # --- blocks -------------------------------------------------------------------------------

    def embedding(self) -> None:
        h = self.hidden
        self.add(
            "embed_tokens",
            "embedding",
            [-1],
            [("tokens",)],
            [("tokens", h)],
            [(self.vocab, h)],
            ParallelSpec(tp_mode="vocab", tp_dim=0),
        )
        self.nodes.append(tp_comm("embed_all_reduce", [-1], h))

    def head(self) -> None:
        h, end = self.hidden, [self.num_layers]
        # The final norm runs on every token (transformers, vLLM); only the head is limited to logit_tokens.
        self.add("final_norm", "norm", end, [("tokens", h)], [("tokens", h)], [(h,)], attrs={"fused_residual": True})
        self.add(
            "lm_head",
            "gemm",
            end,
            [("logit_tokens", h)],
            [("logit_tokens", self.vocab)],
            [(h, self.vocab)],
            COLUMN,
            attrs={"tied": bool(self.cfg.get("tie_word_embeddings", False))},
        )
        self.add(
            "logits_all_gather",
            "all_gather",
            end,
            [("logit_tokens", self.vocab)],
            [("logit_tokens", self.vocab)],
            parallel=ParallelSpec(group="tp"),
            attrs={"inference_only": True},  # training computes a vocab-parallel loss instead
        )

    def gqa_attention(
        self,
        layers: Sequence[int],
        heads: int,
        kv_heads: int,
        head_dim: int,
        qkv_bias: bool = False,
        qk_norm: bool = False,
    ) -> None:
        h, q_width, kv_width = self.hidden, heads * head_dim, 2 * kv_heads * head_dim
        attn = {"is_attention": True}
        self.add(
            "input_layernorm", "norm", layers, [("tokens", h)], [("tokens", h)], [(h,)], attrs={"fused_residual": True}
        )
        self.add(
            "q_proj",
            "gemm",
            layers,
            [("tokens", h)],
            [("tokens", q_width)],
            [(h, q_width)] + ([(q_width,)] if qkv_bias else []),
            COLUMN,
            **attn,
        )
        # k and v as one GEMM; with tp > kv_heads each kv head is replicated (vLLM), so at most kv_heads-way split.
        self.add(
            "kv_proj",
            "gemm",
            layers,
            [("tokens", h)],
            [("tokens", kv_width)],
            [(h, kv_width)] + ([(kv_width,)] if qkv_bias else []),
            COLUMN,
            attrs={"max_split": kv_heads},
            **attn,
        )
        if qk_norm:
            self.add(
                "qk_norm",
                "norm",
                layers,
                [("tokens", (heads + kv_heads) * head_dim)],
                [("tokens", (heads + kv_heads) * head_dim)],
                [(head_dim,), (head_dim,)],
                SHARDED,
                **attn,
            )
        self.add(
            "rotary",
            "elementwise",
            layers,
            [("tokens", (heads + kv_heads) * head_dim)],
            [("tokens", (heads + kv_heads) * head_dim)],
            parallel=SHARDED,
            attrs={"flops_per_element": 3},
            **attn,
        )
        self.kv_cache_write(layers, kv_width, kv_heads, SHARDED, **attn)
        self.add(
            "attention",
            "attention",
            layers,
            [
                ("batch", "seq_len", heads, head_dim),
                ("batch", "kv_len", kv_heads, head_dim),
                ("batch", "kv_len", kv_heads, head_dim),
            ],
            [("batch", "seq_len", heads, head_dim)],
            parallel=ATTENTION_HEADS,
            is_attention=True,
            attrs={
                "heads": heads,
                "kv_heads": kv_heads,
                "qk_dim": head_dim,
                "v_dim": head_dim,
                "kv_dim": 2 * head_dim,
                "cache_dim": kv_width,
                "cache_heads": kv_heads,
            },
        )
        self.add("o_proj", "gemm", layers, [("tokens", q_width)], [("tokens", h)], [(q_width, h)], ROW, **attn)
        self.nodes.append(tp_comm("attn_all_reduce", layers, h))

    def kv_cache_write(
        self, layers: Sequence[int], width: int, max_split: int, parallel: ParallelSpec, **flags
    ) -> None:
        """Inference writes each new token's keys and values (or MLA latent) into the cache."""
        if self.mode == "train":
            return
        self.add(
            "kv_cache_write",
            "elementwise",
            layers,
            [("tokens", width)],
            [("tokens", width)],
            parallel=parallel,
            attrs={"flops_per_element": 0, "max_split": max_split},
            **flags,
        )

    def dense_mlp(
        self,
        layers: Sequence[int],
        intermediate: int,
        prefix: str = "mlp",
        with_norm: bool = True,
        all_reduce: bool = True,
    ) -> None:
        h = self.hidden
        if with_norm:
            self.post_attention_norm(layers, prefix)
        self.add(
            f"{prefix}_gate_up_proj",
            "gemm",
            layers,
            [("tokens", h)],
            [("tokens", 2 * intermediate)],
            [(h, 2 * intermediate)],
            COLUMN,
        )
        self.add(
            f"{prefix}_act",
            "elementwise",
            layers,
            [("tokens", 2 * intermediate)],
            [("tokens", intermediate)],
            parallel=SHARDED,
            attrs={"flops_per_element": 5},
        )
        self.add(
            f"{prefix}_down_proj", "gemm", layers, [("tokens", intermediate)], [("tokens", h)], [(intermediate, h)], ROW
        )
        if all_reduce:
            self.nodes.append(tp_comm(f"{prefix}_all_reduce", layers, h))

    def post_attention_norm(self, layers: Sequence[int], prefix: str) -> None:
        h = self.hidden
        self.add(
            f"{prefix}_post_attention_layernorm",
            "norm",
            layers,
            [("tokens", h)],
            [("tokens", h)],
            [(h,)],
            attrs={"fused_residual": True},
        )

    def moe(
        self,
        layers: Sequence[int],
        experts: int,
        top_k: int,
        expert_intermediate: int,
        shared_intermediate: int = 0,
        router_bias: bool = False,
    ) -> None:
        """Router, routed experts (grouped GEMMs) and optional shared experts. With ep > 1 tokens
        travel by all-to-all (dispatch/combine); with ep = 1 experts are tp-split like a dense MLP."""
        h, moe = self.hidden, {"is_moe": True}
        expert_split = {"tp_mode": "column", "tp_dim": -1, "expert_parallel": True}
        self.post_attention_norm(layers, "moe")
        self.add(
            "router",
            "router",
            layers,
            [("tokens", h)],
            [("tokens", experts)],
            [(h, experts)] + ([(experts,)] if router_bias else []),
            attrs={"top_k": top_k},
            **moe,
        )
        if shared_intermediate:
            self.dense_mlp(layers, shared_intermediate, prefix="shared_experts", with_norm=False, all_reduce=False)
        # Token copies gathered into expert order (sort by expert, gather, group offsets) and, after the
        # experts, weighted by the router and summed back per token. tp ranks split the tokens with ep > 1.
        token_split = {"sequence_parallel_with_ep": True}
        routed = [("routed_tokens", h)]
        exchange = {"parallel": ParallelSpec(group="ep", when="ep_gt_1"), **moe}  # dispatch and combine
        self.add("moe_permute", "elementwise", layers, routed, routed,
                 attrs={"flops_per_element": 0, **token_split}, **moe)
        self.add("moe_dispatch", "all_to_all", layers, routed, routed, **exchange)
        self.add("experts_gate_up", "moe_gemm", layers, routed, [("routed_tokens", 2 * expert_intermediate)],
                 [(experts, h, 2 * expert_intermediate)], ParallelSpec(**expert_split), attrs={"top_k": top_k}, **moe)
        self.add("experts_act", "elementwise", layers, [("routed_tokens", 2 * expert_intermediate)],
                 [("routed_tokens", expert_intermediate)], parallel=SHARDED, attrs={"flops_per_element": 5}, **moe)
        self.add("experts_down", "moe_gemm", layers, [("routed_tokens", expert_intermediate)], routed,
                 [(experts, expert_intermediate, h)], ParallelSpec(**{**expert_split, "tp_mode": "row", "tp_dim": -2}),
                 attrs={"top_k": top_k}, **moe)
        self.add("moe_combine", "all_to_all", layers, routed, routed, **exchange)
        self.add("moe_unpermute", "elementwise", layers, routed, [("tokens", h)],
                 attrs={"flops_per_element": 2 * top_k, **token_split}, **moe)
        # Shared experts are tp-split, so their partial sums need the all-reduce even with ep > 1.
        self.nodes.append(tp_comm("moe_all_reduce", layers, h, when="always" if shared_intermediate else "ep_is_1"))


def layer_groups(num_layers: int, is_moe_layer) -> tuple[list[int], list[int]]:
    """Split layer indices into (dense, moe) by a predicate."""
    dense = [i for i in range(num_layers) if not is_moe_layer(i)]
    moe = [i for i in range(num_layers) if is_moe_layer(i)]
    return dense, moe
