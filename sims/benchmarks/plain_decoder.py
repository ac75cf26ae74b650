"""A plain-PyTorch dense decoder with the `torch_fused` stack's kernels, tensor-parallel over the
ranks of torch.distributed, and a lock-step timer for it (used by sims/benchmarks/torch_fused.py).

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
            y = F.rms_norm(residual, (residual.shape[-1],), w["norm2"], self.eps)
            gate, up = F.linear(y, w["gate_up"]).chunk(2, dim=-1)
            delta = self._all_reduce(F.linear(F.silu(gate) * up, w["down"]))
        residual = residual + delta
        y = F.rms_norm(residual, (residual.shape[-1],), self.final_norm, self.eps)
        logits = F.linear(y[:, -1], self.lm_head)
        if self.tp > 1:
            gathered = logits.new_empty(self.tp * logits.shape[0], logits.shape[1])
            torch.distributed.all_gather_into_tensor(gathered, logits)
            return gathered
        return logits


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
    one = _slowest(_events_s(fn, 1), device, dist)
    if not graphs:
        return _slowest(statistics.median(_events_s(fn, 1) for _ in range(repeats)), device, dist), "cuda_events"
    calls = max(1, min(50, math.ceil(target_ms * 1e-3 / max(one, 1e-7))))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(calls):
            fn()
    graph.replay()
    per_call = statistics.median(_events_s(graph.replay, 1) / calls for _ in range(repeats))
    del graph
    return _slowest(per_call, device, dist), "cuda_graph"


def _events_s(fn: Callable, calls: int) -> float:
    import torch

    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(calls):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) * 1e-3 / calls


def _slowest(seconds: float, device, dist) -> float:
    if dist is None:
        return seconds
    import torch

    value = torch.tensor([seconds], device=device, dtype=torch.float64)
    dist.all_reduce(value, op=dist.ReduceOp.MAX)
    return value.item()
