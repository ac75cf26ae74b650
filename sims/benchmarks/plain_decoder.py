"""A plain-PyTorch decoder with the `torch_fused` stack's kernels, tensor-parallel (dense) or
expert-parallel (MoE) over the ranks of torch.distributed, and a lock-step timer for it (used by
sims/benchmarks/torch_fused.py).

Per layer, as the simulator's torch_fused graph lists them: residual add, F.rms_norm, one QKV
GEMM (column split), F.rms_norm on q and k heads (Qwen3), SDPA (causal prefill, or decode over a
preallocated KV cache: no rotary and no cache write, which that stack fuses into neighbours), the
output transpose, o_proj (row split) + all-reduce, residual add, F.rms_norm, one gate/up GEMM,
silu(gate) * up, down (row split) + all-reduce. Around them: a vocab-parallel embedding +
all-reduce, the final residual add + norm, lm_head on each sequence's last token + all-gather of
the logits. Random weights; torch is imported inside functions.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Mapping

from sims.calibration.timing import cuda_events_seconds


class PlainDecoder:
    def __init__(self, cfg: Mapping, tp: int, rank: int, device, dtype):
        import torch

        self.torch, self.tp, self.rank, self.device, self.dtype = torch, tp, rank, device, dtype
        h, heads = cfg["hidden_size"], cfg["num_attention_heads"]
        kv_heads, self.head_dim = cfg["num_key_value_heads"], cfg.get("head_dim") or h // heads
        if heads % tp or kv_heads % tp or cfg["intermediate_size"] % tp or cfg["vocab_size"] % tp:
            raise ValueError(f"tp={tp} must divide heads, kv heads, intermediate size and vocabulary")
        self.heads, self.kv_heads = heads // tp, kv_heads // tp
        self.eps = cfg.get("rms_norm_eps", 1e-6)
        inter, self.vocab_shard = cfg["intermediate_size"] // tp, cfg["vocab_size"] // tp
        qkv = (self.heads + 2 * self.kv_heads) * self.head_dim

        def weight(*shape):
            return (torch.randn(*shape, device=device) * 0.02).to(dtype)

        self.embed = weight(self.vocab_shard, h)
        self.layers = [
            {"norm1": weight(h) + 1, "qkv": weight(qkv, h), "q_norm": weight(self.head_dim) + 1,
             "k_norm": weight(self.head_dim) + 1, "o": weight(h, self.heads * self.head_dim),
             "norm2": weight(h) + 1, "gate_up": weight(2 * inter, h), "down": weight(h, inter)}
            for _ in range(cfg["num_hidden_layers"])
        ]
        self.final_norm, self.lm_head = weight(h) + 1, weight(self.vocab_shard, h)

    def kv_cache(self, batch: int, kv_len: int) -> list[tuple]:
        shape = (batch, self.kv_heads, kv_len, self.head_dim)
        return [(self.torch.randn(shape, device=self.device, dtype=self.dtype),
                 self.torch.randn(shape, device=self.device, dtype=self.dtype)) for _ in self.layers]

    def _all_reduce(self, x):
        if self.tp > 1:
            self.torch.distributed.all_reduce(x)
        return x

    def forward(self, ids, caches: list[tuple] | None):
        """One step: prefill of ids (caches None) or decode of one token per sequence over caches."""
        torch, F = self.torch, self.torch.nn.functional
        b, s = ids.shape
        local = ids - self.rank * self.vocab_shard
        outside = (local < 0) | (local >= self.vocab_shard)
        x = F.embedding(local.masked_fill(outside, 0), self.embed).masked_fill_(outside.unsqueeze(-1), 0)
        residual = torch.zeros_like(x)
        delta = self._all_reduce(x)
        for i, w in enumerate(self.layers):
            residual = residual + delta
            y = F.rms_norm(residual, (residual.shape[-1],), w["norm1"], self.eps)
            q, k, v = F.linear(y, w["qkv"]).split(
                [self.heads * self.head_dim, self.kv_heads * self.head_dim, self.kv_heads * self.head_dim], dim=-1)
            q = F.rms_norm(q.view(b, s, self.heads, self.head_dim), (self.head_dim,), w["q_norm"], self.eps)
            k = F.rms_norm(k.view(b, s, self.kv_heads, self.head_dim), (self.head_dim,), w["k_norm"], self.eps)
            if caches is None:
                keys, values = k.transpose(1, 2), v.view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
            else:
                keys, values = caches[i]
            out = F.scaled_dot_product_attention(q.transpose(1, 2), keys, values, is_causal=caches is None,
                                                 enable_gqa=True)
            out = out.transpose(1, 2).reshape(b, s, self.heads * self.head_dim)
            residual = residual + self._all_reduce(F.linear(out, w["o"]))
            delta = self._mlp(w, F.rms_norm(residual, (residual.shape[-1],), w["norm2"], self.eps))
        residual = residual + delta
        y = F.rms_norm(residual, (residual.shape[-1],), self.final_norm, self.eps)
        logits = F.linear(y[:, -1], self.lm_head)
        if self.tp > 1:
            gathered = logits.new_empty(self.tp * logits.shape[0], logits.shape[1])
            torch.distributed.all_gather_into_tensor(gathered, logits)
            return gathered
        return logits


    def _mlp(self, w: dict, y):
        F = self.torch.nn.functional
        gate, up = F.linear(y, w["gate_up"]).chunk(2, dim=-1)
        return self._all_reduce(F.linear(F.silu(gate) * up, w["down"]))


class ExpertParallelDecoder(PlainDecoder):
    """The same decoder with a Qwen3-MoE block instead of the dense MLP, experts split over the
    ranks (expert parallelism; attention data-parallel: tp = 1, every rank its own sequences).
    Router (GEMM + top-k + softmax), the token copies gathered in expert order, all-to-all to the
    experts' ranks, grouped GEMMs (torch._grouped_mm) with silu(gate) * up between, all-to-all
    back, weighted sum per token. Routing is balanced and fixed (token t's j-th expert is
    (t * top_k + j) mod experts), as the simulator assumes, so every all-to-all moves equal shares
    and the step can be captured in a CUDA graph; the router still runs."""

    def __init__(self, cfg: Mapping, ep: int, rank: int, device, dtype, tokens: int):
        super().__init__(cfg, 1, rank, device, dtype)
        torch = self.torch
        self.ep, self.experts, self.top_k = ep, cfg["num_experts"], cfg["num_experts_per_tok"]
        if self.experts % ep or tokens * self.top_k % self.experts:
            raise ValueError(f"ep={ep} must divide the experts and tokens*top_k={tokens * self.top_k} be a multiple of them")
        h, inter, local = cfg["hidden_size"], cfg["moe_intermediate_size"], self.experts // ep
        for w in self.layers:
            del w["gate_up"], w["down"]
            w["router"] = (torch.randn(self.experts, h, device=device) * 0.02).to(dtype)
            # stored (experts, out, in) and used transposed, as transformers' grouped_mm experts do
            w["experts_gate_up"] = (torch.randn(local, 2 * inter, h, device=device) * 0.02).to(dtype)
            w["experts_down"] = (torch.randn(local, h, inter, device=device) * 0.02).to(dtype)
        pairs = torch.arange(tokens * self.top_k, device=device)  # pair p = token p // k, choice p % k
        expert = pairs % self.experts
        self.pair_order = torch.argsort(expert * pairs.numel() + pairs)  # expert-major: experts of a rank contiguous
        self.pair_token = self.pair_order // self.top_k
        per_expert = tokens * self.top_k // self.experts  # pairs each expert gets from one rank
        chunk = per_expert * local  # what one rank sends to each rank
        local_order = [src * chunk + i * per_expert + j for i in range(local) for src in range(ep)
                       for j in range(per_expert)]
        self.local_order = torch.tensor(local_order, device=device)
        self.local_inverse = torch.argsort(self.local_order)
        self.offsets = torch.arange(1, local + 1, device=device, dtype=torch.int32) * per_expert * ep

    def _mlp(self, w: dict, y):
        torch, F = self.torch, self.torch.nn.functional
        shape = y.shape
        x = y.reshape(-1, shape[-1])
        top, _ = F.linear(x, w["router"]).topk(self.top_k, dim=-1)
        weights = top.softmax(dim=-1).reshape(-1).index_select(0, self.pair_order)
        routed = x.index_select(0, self.pair_token)  # moe_permute
        routed = self._exchange(routed).index_select(0, self.local_order)  # moe_dispatch
        gate_up = torch._grouped_mm(routed, w["experts_gate_up"].transpose(-2, -1), offs=self.offsets)
        gate, up = gate_up.chunk(2, dim=-1)
        out = torch._grouped_mm(F.silu(gate) * up, w["experts_down"].transpose(-2, -1), offs=self.offsets)
        out = self._exchange(out.index_select(0, self.local_inverse))  # moe_combine
        combined = torch.zeros_like(x).index_add_(0, self.pair_token, out * weights.unsqueeze(-1))  # unpermute
        return combined.reshape(shape)

    def _exchange(self, x):
        if self.ep == 1:
            return x
        received = self.torch.empty_like(x)
        self.torch.distributed.all_to_all_single(received, x)
        return received


def time_lockstep(fn: Callable[[], object], device, warmup: int, repeats: int, graphs: bool, target_ms: float = 2.0
                  ) -> tuple[float, str]:
    """(seconds per call, mode): CUDA-graph replays of as many calls as fill ~target_ms (every rank
    captures the same number), median of the replays, the slowest rank's; on the CPU the median
    of eager calls after a barrier. Every rank must call it with the same arguments."""
    import torch

    dist = torch.distributed if torch.distributed.is_initialized() else None
    if device.type != "cuda":
        for _ in range(warmup):
            fn()
        per_call = []
        for _ in range(repeats):
            if dist:
                dist.barrier()
            start = time.perf_counter()
            fn()
            per_call.append(time.perf_counter() - start)
        return _slowest(statistics.median(per_call), device, dist), "cpu"
    side = torch.cuda.Stream(device)
    side.wait_stream(torch.cuda.current_stream(device))
    with torch.cuda.stream(side):
        for _ in range(max(1, warmup)):
            fn()
    torch.cuda.current_stream(device).wait_stream(side)
    one = _slowest(cuda_events_seconds(fn, 1), device, dist)
    if not graphs:
        return _slowest(statistics.median(cuda_events_seconds(fn, 1) for _ in range(repeats)), device, dist), "cuda_events"
    calls = max(1, min(50, math.ceil(target_ms * 1e-3 / max(one, 1e-7))))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    graph.replay()
    per_call = statistics.median(cuda_events_seconds(graph.replay, 1) / calls for _ in range(repeats))
    del graph
    return _slowest(per_call, device, dist), "cuda_graph"


def _slowest(seconds: float, device, dist) -> float:
    if dist is None:
        return seconds
    import torch

    value = torch.tensor([seconds], device=device, dtype=torch.float64)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return value.item()
