"""The `torch_fused` stack's kernels (plain PyTorch as Megatron's local spec runs it), and which kernel
set times which stack (`kernels_for`). The transformers kernels they extend are in kernels.py."""

from __future__ import annotations

from collections.abc import Mapping

from framework.core.errors import ConfigError
from sims.calibration.kernels import Bench, HFKernels, attention_heads
from sims.ir import OpNode


class FusedTorchKernels(HFKernels):
    """The `torch_fused` stack (sims/stacks.yaml): plain PyTorch as Megatron's local spec runs it.
    One F.rms_norm kernel per norm (the residual add is its own node), q/k/v as one GEMM and gate/up
    as one GEMM; rotary and the cache write are not in its graph. Attention, the grouped expert GEMMs
    and their activation are the same torch kernels transformers uses; the router and the MoE block
    are the plain-torch ones of sims/benchmarks/plain_decoder.py (transformers' experts module sorts,
    histograms and masks on every call: its shuffles cost several times more)."""

    SPLIT_GEMMS = ()
    SPLIT_GATE_UP = False

    def _norm(self, node: OpNode, b: int, s: int) -> Bench:
        import torch.nn.functional as F

        width = node.inputs[0][-1]
        weight = self.randn(width)
        return Bench(lambda x: F.rms_norm(x, (width,), weight, 1e-6), lambda: (self.randn(b, s, width),), (weight,))

    def _act(self, node: OpNode, b: int, s: int) -> Bench:
        """silu(gate) * up on the two halves of the fused gate/up GEMM's output (Megatron's GLU, the
        plain decoder's chunk): in a backward their gradients are written back into one tensor."""
        import torch.nn.functional as F

        width = node.outputs[0][-1]

        def act(gate_up):
            gate, up = gate_up.chunk(2, dim=-1)
            return F.silu(gate) * up

        return Bench(act, lambda: (self.randn(b, s, 2 * width),))

    def _qk_norm(self, b: int, s: int) -> Bench:
        import torch.nn.functional as F

        heads, kv_heads, head_dim = attention_heads(self.attn)
        weight = self.randn(head_dim)

        def qk_norm(q, k):
            return F.rms_norm(q, (head_dim,), weight, 1e-6), F.rms_norm(k, (head_dim,), weight, 1e-6)

        return Bench(qk_norm, lambda: (self.randn(b, s, heads, head_dim), self.randn(b, s, kv_heads, head_dim)),
                     (weight,))


    def _router(self, tokens: int) -> Bench:
        import torch.nn.functional as F

        weight = self.randn(self.experts.num_experts, self.model.config.hidden_size) * 0.02

        def route(x):
            top, index = F.linear(x, weight).topk(self.router.top_k, dim=-1)
            return top.softmax(dim=-1), index

        return Bench(route, lambda: (self.randn(tokens, self.model.config.hidden_size),), (weight,))

    def moe_block(self, tokens: int) -> Bench | None:
        """Token copies gathered in expert order (index_select), grouped GEMMs with the gate between,
        the weighted copies added back per token (index_add_), as plain_decoder.ExpertParallelDecoder at
        ep = 1; the expert order is computed from the routing outside the timed call, as it does."""
        if self.experts is None:
            return None
        from transformers.integrations.moe import _grouped_linear

        torch, experts, top_k = self.torch, self.experts, self.router.top_k

        def block(x, pair_token, weights, offsets):
            routed = x.index_select(0, pair_token)
            gate_up = _grouped_linear(routed, experts.gate_up_proj, offsets, is_transposed=experts.is_transposed)
            out = _grouped_linear(experts._apply_gate(gate_up), experts.down_proj, offsets,
                                  is_transposed=experts.is_transposed)
            return torch.zeros_like(x).index_add_(0, pair_token, out * weights.unsqueeze(-1))

        def make_args():
            index, weights = self.routing(tokens)
            order = torch.argsort(index.reshape(-1), stable=True)
            counts = torch.bincount(index.reshape(-1), minlength=experts.num_experts)
            return (self.randn(tokens, self.model.config.hidden_size), order // top_k,
                    weights.reshape(-1).index_select(0, order), torch.cumsum(counts, dim=0, dtype=torch.int32))

        return Bench(block, make_args)


KERNELS_BY_STACK = {"transformers": HFKernels, "torch_fused": FusedTorchKernels}


def kernels_for(stack: str, hf_config: Mapping, device: str, dtype: str) -> HFKernels:
    """The kernel set that times `stack`'s nodes (the xla stack is not measurable from torch)."""
    if stack not in KERNELS_BY_STACK:
        raise ConfigError(f"stack {stack!r} cannot be calibrated with torch kernels; valid: {', '.join(KERNELS_BY_STACK)}")
    return KERNELS_BY_STACK[stack](hf_config, device, dtype)
