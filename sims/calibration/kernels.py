"""Simulator IR nodes as transformers runs them: the callables the micro-benchmarks time.

`HFKernels(hf_config, device, dtype)` builds the architecture with transformers' `from_config`
(random weights, no download; one decoder layer, two when the model mixes dense and MoE layers)
and hands out, for an IR node and the dims a workload binds, the node's kernels as transformers
executes them, on tensors of those shapes:

    input_layernorm, *_post_attention_layernorm, final_norm   residual add + the model's RMSNorm
    qk_norm                      q_norm and k_norm on the per-head views
    q_proj, o_proj, *_down_proj  one F.linear
    kv_proj, *_gate_up_proj      two F.linear (transformers keeps k/v and gate/up apart)
    rotary                       apply_rotary_pos_emb on q and k in (batch, heads, seq, dim) views
    kv_cache_write               index_copy_ of k and v into a static cache (as StaticCache does)
    attention                    transformers' sdpa_attention_forward (torch SDPA, output transpose)
    *_act                        act_fn(gate) * up
    router                       the model's top-k router module
    experts_gate_up, _down       transformers' grouped GEMM (_grouped_linear) over random routing
    experts_act                  the experts module's gate on the routed copies
    embed_tokens, lm_head        the embedding lookup; F.linear on each sequence's last token (every
                                 token in a training graph)

`FusedTorchKernels` (sims/calibration/kernels_fused.py) times the `torch_fused` stack's graph
(single F.rms_norm kernels, one QKV and one gate/up GEMM, a separate residual add). `moe_block` times the experts module whole; what it takes beyond its two grouped GEMMs and the
activation is the permutation into expert order and the weighted un-permutation (the IR's
moe_permute and moe_unpermute). Nodes with no entry here (MLA's absorbed per-head GEMMs,
collectives) return None. torch and transformers are imported here, inside the class.
"""

from __future__ import annotations

import copy
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from framework.core.errors import ConfigError
from sims.builders.registry import infer_model_type
from sims.ir import OpNode

MEASURABLE_DTYPES = ("bf16", "fp32")  # framework.core.dtypes.SHORT names


@dataclass
class Bench:
    fn: Callable
    make_args: Callable[[], tuple]  # a fresh argument set (new random tensors)
    params: tuple = ()  # weights held by fn (a module's): their gradients count in its backward
    grad_args: tuple[int, ...] | None = None  # the args a training step differentiates (None: every float one)


def build_hf_model(hf_config: Mapping, device: str, dtype: str, **overrides):
    """A randomly initialised transformers causal LM of this architecture (sdpa attention; MoE
    experts through grouped GEMMs on CUDA), in eval mode on `device`."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    settings = {k: v for k, v in hf_config.items() if k not in ("architectures", "model_type", "torch_dtype")}
    config = AutoConfig.for_model(infer_model_type(hf_config), **{**settings, **overrides})
    extra = {"experts_implementation": "grouped_mm"} if device.startswith("cuda") and _is_moe(config) else {}
    with torch.device(device):
        model = AutoModelForCausalLM.from_config(
            config, dtype=torch_dtype(dtype), attn_implementation="sdpa", **extra
        )
    return model.eval().requires_grad_(False)


def torch_dtype(dtype: str):
    from framework.core import dtypes

    if dtype not in MEASURABLE_DTYPES:
        raise ConfigError(f"dtype {dtype!r} cannot be measured; valid: {', '.join(MEASURABLE_DTYPES)}")
    return dtypes.torch_dtype(dtypes.LONG[dtype])


def _is_moe(config) -> bool:
    return bool(getattr(config, "num_experts", 0) or getattr(config, "n_routed_experts", 0))


class HFKernels:
    SPLIT_GEMMS = ("kv_proj",)  # GEMMs transformers runs as two F.linear
    SPLIT_GATE_UP = True

    def __init__(self, hf_config: Mapping, device: str, dtype: str):
        import torch

        self.torch = torch
        self.device, self.dtype = device, torch_dtype(dtype)
        self.model = build_hf_model(hf_config, device, dtype, **_small_model_overrides(hf_config))
        layers = self.model.model.layers
        self.attn = layers[0].self_attn
        self.norm = self.model.model.norm
        self.dense_mlp = next((layer.mlp for layer in layers if hasattr(layer.mlp, "gate_proj")), None)
        moe = next((layer.mlp for layer in layers if hasattr(layer.mlp, "experts")), None)
        self.experts = moe.experts if moe is not None else None
        self.router = moe.gate if moe is not None else None
        self.rotary_fn = importlib.import_module(type(self.attn).__module__).apply_rotary_pos_emb

    # --- helpers --------------------------------------------------------------------------------

    def randn(self, *shape: int):
        return self.torch.randn(*shape, device=self.device, dtype=self.dtype)

    def bench(self, node: OpNode, dims: Mapping[str, float]) -> Bench | None:
        """The node's kernels at the workload's dims, or None when it has no entry here."""
        b, s = int(dims["batch"]), int(dims["seq_len"])
        name, kind = node.name, node.op_type
        if kind == "embedding":
            return self._embedding(b, s)
        if kind == "norm":
            return self._qk_norm(b, s) if name == "qk_norm" else self._norm(node, b, s)
        if name.endswith("_residual_add"):
            width = node.outputs[0][-1]
            return Bench(lambda x, residual: residual + x, lambda: (self.randn(b, s, width), self.randn(b, s, width)))
        if kind == "gemm" and len(node.weights[0]) == 2:
            rows = (b, 1) if name == "lm_head" and dims["logit_tokens"] < dims["tokens"] else (b, s)
            return self._linear(node, rows)
        if kind == "router" and self.router is not None:
            return self._router(int(dims["tokens"]))
        if kind == "moe_gemm" and self.experts is not None:
            return self._grouped_gemm(node, int(dims["tokens"]))
        if kind == "attention" and not node.is_mla:
            return self._attention(b, s, int(dims["kv_len"]))
        if name == "rotary" and not node.is_mla:
            return self._rotary(b, s, int(dims["kv_len"]))
        if name == "kv_cache_write" and not node.is_mla:
            return self._kv_cache_write(b, s, int(dims["kv_len"]))
        if name == "experts_act" and self.experts is not None:
            return self._experts_act(int(dims["tokens"]))
        if kind == "elementwise" and name.endswith("_act") and self.dense_mlp is not None:
            return self._act(node, b, s)
        return None

    # --- dense nodes ----------------------------------------------------------------------------

    def _embedding(self, b: int, s: int) -> Bench:
        embed = self.model.model.embed_tokens
        vocab = embed.weight.shape[0]
        return Bench(embed, lambda: (self.torch.randint(0, vocab, (b, s), device=self.device),), (embed.weight,))

    def _norm(self, node: OpNode, b: int, s: int) -> Bench:
        width = node.inputs[0][-1]
        norm = self.norm if width == self.norm.weight.shape[0] else type(self.norm)(width).to(self.device, self.dtype)
        if node.attrs.get("fused_residual"):
            pair = lambda: (self.randn(b, s, width), self.randn(b, s, width))  # noqa: E731
            return Bench(lambda x, residual: norm(residual + x), pair, tuple(norm.parameters()))
        return Bench(norm, lambda: (self.randn(b, s, width),), tuple(norm.parameters()))

    def _qk_norm(self, b: int, s: int) -> Bench:
        a = self.attn
        heads, kv_heads, head_dim = attention_heads(a)

        def qk_norm(q, k):
            return a.q_norm(q), a.k_norm(k)

        return Bench(qk_norm, lambda: (self.randn(b, s, heads, head_dim), self.randn(b, s, kv_heads, head_dim)),
                     (a.q_norm.weight, a.k_norm.weight))

    def _linear(self, node: OpNode, rows: tuple[int, int]) -> Bench:
        """One F.linear, or two for the projections transformers keeps apart (k/v, gate/up)."""
        import torch.nn.functional as F

        k, n = node.weights[0]
        has_bias = len(node.weights) > 1
        split = node.name in self.SPLIT_GEMMS or (node.name.endswith("gate_up_proj") and self.SPLIT_GATE_UP)
        parts = 2 if split else 1

        def make_args():
            weights = [self.randn(n // parts, k) for _ in range(parts)]
            biases = [self.randn(n // parts) if has_bias else None for _ in range(parts)]
            return (self.randn(*rows, k), weights, biases)

        def linear(x, weights, biases):
            return [F.linear(x, w, bias) for w, bias in zip(weights, biases)]

        return Bench(linear, make_args)

    def _act(self, node: OpNode, b: int, s: int) -> Bench:
        act = self.dense_mlp.act_fn
        width = node.outputs[0][-1]
        return Bench(lambda gate, up: act(gate) * up, lambda: (self.randn(b, s, width), self.randn(b, s, width)))

    def _rotary(self, b: int, s: int, kv_len: int) -> Bench:
        heads, kv_heads, head_dim = attention_heads(self.attn)
        positions = self.torch.arange(kv_len - s, kv_len, device=self.device).expand(b, s)
        cos, sin = self.model.model.rotary_emb(self.randn(1), positions)

        def make_args():
            q = self.randn(b, s, heads, head_dim).transpose(1, 2)  # transformers' layout after q_norm
            return (q, self.randn(b, s, kv_heads, head_dim).transpose(1, 2), cos, sin)

        return Bench(self.rotary_fn, make_args, grad_args=(0, 1))  # q and k; cos and sin are constants

    def _kv_cache_write(self, b: int, s: int, kv_len: int) -> Bench:
        _, kv_heads, head_dim = attention_heads(self.attn)
        positions = self.torch.arange(kv_len - s, kv_len, device=self.device)

        def make_args():
            new = [self.randn(b, s, kv_heads, head_dim).transpose(1, 2) for _ in range(2)]
            return (self.randn(b, kv_heads, kv_len, head_dim), self.randn(b, kv_heads, kv_len, head_dim), *new)

        def write(keys, values, key, value):
            keys.index_copy_(2, positions, key)
            values.index_copy_(2, positions, value)

        return Bench(write, make_args)

    def _attention(self, b: int, s: int, kv_len: int) -> Bench:
        from transformers.integrations.sdpa_attention import sdpa_attention_forward

        a = self.attn
        heads, kv_heads, head_dim = attention_heads(a)

        def make_args():
            q = self.randn(b, s, heads, head_dim).transpose(1, 2)
            return (q, self.randn(b, kv_heads, kv_len, head_dim), self.randn(b, kv_heads, kv_len, head_dim))

        def attention(q, k, v):
            return sdpa_attention_forward(a, q, k, v, None, dropout=0.0, scaling=a.scaling)[0]

        return Bench(attention, make_args)

    # --- MoE nodes ------------------------------------------------------------------------------

    def routing(self, tokens: int):
        """Random top-k routing (each token picks top_k distinct experts uniformly): indices, weights."""
        torch = self.torch
        experts, top_k = self.experts.num_experts, self.router.top_k
        index = torch.rand(tokens, experts, device=self.device).topk(top_k, dim=-1).indices
        weights = torch.softmax(torch.randn(tokens, top_k, device=self.device), dim=-1).to(self.dtype)
        return index, weights

    def _sorted_offsets(self, tokens: int):
        index, _ = self.routing(tokens)
        counts = self.torch.bincount(index.reshape(-1), minlength=self.experts.num_experts)
        return self.torch.cumsum(counts, dim=0, dtype=self.torch.int32)

    def _router(self, tokens: int) -> Bench:
        router = copy.deepcopy(self.router)
        router.weight.data.normal_(0.0, 0.02)
        return Bench(router, lambda: (self.randn(tokens, self.model.config.hidden_size),), tuple(router.parameters()))

    def _grouped_gemm(self, node: OpNode, tokens: int) -> Bench:
        from transformers.integrations.moe import _grouped_linear

        experts = self.experts
        weight = experts.gate_up_proj if node.name == "experts_gate_up" else experts.down_proj
        in_width = node.weights[0][1]
        pairs = tokens * self.router.top_k

        def grouped(x, offsets):
            return _grouped_linear(x, weight, offsets, is_transposed=experts.is_transposed)

        return Bench(grouped, lambda: (self.randn(pairs, in_width), self._sorted_offsets(tokens)), (weight,))

    def _experts_act(self, tokens: int) -> Bench:
        experts = self.experts
        width = 2 * experts.intermediate_dim
        return Bench(experts._apply_gate, lambda: (self.randn(tokens * self.router.top_k, width),))

    def moe_block(self, tokens: int) -> Bench | None:
        """The experts module whole: permutation, grouped GEMMs, activation, weighted un-permutation."""
        if self.experts is None:
            return None

        def make_args():
            index, weights = self.routing(tokens)
            return (self.randn(tokens, self.model.config.hidden_size), index, weights)

        return Bench(self.experts, make_args)

    def fp8_linear(self, m: int, n: int, k: int) -> tuple[Bench, int]:
        """(bench, m used): y = x @ W^T with x, W in float8_e4m3fn and per-tensor scales, bf16 out
        (torch._scaled_mm, what fp8 inference runs). m is rounded up to a multiple of 16 where the
        kernel requires it."""
        torch = self.torch
        scale = torch.ones((), device=self.device, dtype=torch.float32)

        def mm(a, b):
            return torch._scaled_mm(a, b.t(), scale_a=scale, scale_b=scale, out_dtype=torch.bfloat16)

        def args_for(rows):
            return lambda: (self.randn(rows, k).to(torch.float8_e4m3fn), self.randn(n, k).to(torch.float8_e4m3fn))

        try:
            mm(*args_for(m)())
        except RuntimeError:  # shape constraint of the fp8 kernel
            m = -(-m // 16) * 16
        return Bench(mm, args_for(m)), m

    # --- the device itself ----------------------------------------------------------------------

    def copy(self, nbytes: int) -> Bench:
        """dst.copy_(src): reads and writes nbytes each (the achievable memory bandwidth)."""
        elements = nbytes // self.torch.empty(0, dtype=self.dtype).element_size()
        return Bench(lambda dst, src: dst.copy_(src), lambda: (self.randn(elements), self.randn(elements)))

    def launch(self) -> Bench:
        """The shortest kernel: one element added in place (the per-kernel floor)."""
        return Bench(lambda x: x.add_(1), lambda: (self.randn(1),))

    def launch_mixed(self) -> Bench:
        """Eight different one-element kernels in turn: the floor when each kernel follows another
        kind of kernel, as in a model, rather than a copy of itself."""

        def mixed(x):
            x.add_(1), x.mul_(0.5), x.sub_(0.25), x.div_(2), x.clamp_(-4, 4), x.neg_(), x.abs_(), x.sqrt_()

        return Bench(mixed, lambda: (self.randn(1),))


def attention_heads(attention) -> tuple[int, int, int]:
    config = attention.config
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    return heads, config.num_key_value_heads, head_dim


def _small_model_overrides(hf_config: Mapping) -> dict:
    """One decoder layer; two (dense first, MoE second) when the model has both kinds."""
    mixed = infer_model_type(hf_config) == "qwen3_moe" and (
        hf_config.get("mlp_only_layers") or (hf_config.get("decoder_sparse_step") or 1) > 1
    )
    if mixed:
        return {"num_hidden_layers": 2, "mlp_only_layers": [0], "decoder_sparse_step": 1}
    if hf_config.get("first_k_dense_replace"):
        return {"num_hidden_layers": 2, "first_k_dense_replace": 1}
    return {"num_hidden_layers": 1}
