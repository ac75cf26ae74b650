"""One decode step of a Qwen3-MoE-shaped model split over tensor and expert parallel ranks (plain torch).

Used by sims.benchmarks.layouts; imported only inside a torch.distributed job. The kernels follow
transformers' Qwen3-MoE (its RMSNorm and rotary, torch SDPA with GQA, its grouped-GEMM experts),
the stack the shipped H100 efficiency table was measured on. Ranks are ordered tp innermost, then
dp (the simulator's convention); ep groups are consecutive ranks carved from tp x dp.

    attention  q/kv column-parallel (kv heads replicated when tp > kv heads), o row-parallel + all-reduce
    MoE, ep=1  every rank holds all experts, split over tp like a dense MLP, + all-reduce
    MoE, ep>1  each tp rank takes 1/tp of its replica's tokens, all-to-all to the experts' ranks
               (num_experts/ep whole experts each) and back, then an all-gather over tp

Routing is deterministic and balanced (token t of a replica picks experts (t*k + j) mod E, j < k),
as the simulator assumes; the router still runs and its probabilities weight the expert outputs.
Weights and the KV cache are random, drawn from per-name seeds as whole tensors and then sliced,
so every layout computes the same function (the benchmark checks that its logits agree).
"""

from __future__ import annotations

import zlib

import torch
import torch.distributed as dist
import torch.nn.functional as F
from transformers.integrations.moe import _grouped_linear
from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeRMSNorm, apply_rotary_pos_emb

from sims.benchmarks.layouts import Shapes, route_plan

_GROUPS: dict[tuple[int, ...], object] = {}


class Mesh:
    """This rank's place in a (tp, ep) layout over the whole world (dp = world / tp)."""

    def __init__(self, tp: int, ep: int):
        world, rank = dist.get_world_size(), dist.get_rank()
        self.tp, self.ep, self.dp = tp, ep, world // tp
        self.tp_rank, self.replica, self.ep_rank = rank % tp, rank // tp, rank % ep
        self.tp_group = _group(tp, world, rank)
        self.ep_group = _group(ep, world, rank)


def _group(size: int, world: int, rank: int):
    """The group of `size` consecutive ranks holding `rank` (None for one rank); every rank creates every group."""
    if size == 1:
        return None
    mine = None
    for first in range(0, world, size):
        ranks = tuple(range(first, first + size))
        if ranks not in _GROUPS:
            _GROUPS[ranks] = dist.new_group(list(ranks))
        if first <= rank < first + size:
            mine = _GROUPS[ranks]
    return mine


def _seeded(name: str, shape: tuple, std: float, device, dtype) -> torch.Tensor:
    gen = torch.Generator(device=device).manual_seed(zlib.crc32(name.encode()))
    return (torch.randn(shape, generator=gen, device=device, dtype=torch.float32) * std).to(dtype)


class DecodeModel:
    """Weights, KV cache and routing of one rank for `layers` decoder layers plus embedding and head."""

    def __init__(self, s: Shapes, mesh: Mesh, batch: int, context_len: int, device, dtype):
        self.s, self.mesh, self.batch, self.ctx = s, mesh, batch, context_len
        self.device, self.dtype = device, dtype
        tp, r = mesh.tp, mesh.tp_rank
        self.q_heads = s.heads // tp
        kv_split = min(tp, s.kv_heads)
        self.kv_heads = s.kv_heads // kv_split
        kv_first = (r * kv_split // tp) * self.kv_heads  # tp > kv heads: neighbouring ranks share a kv head
        q_cols = slice(r * self.q_heads * s.head_dim, (r + 1) * self.q_heads * s.head_dim)
        kv_cols = slice(kv_first * s.head_dim, (kv_first + self.kv_heads) * s.head_dim)
        self.vocab_slice = slice(r * s.vocab // tp, (r + 1) * s.vocab // tp)
        w = self._weight
        self.embed = w("embed", (s.vocab, s.hidden), 1.0)[self.vocab_slice].contiguous()
        self.lm_head = w("lm_head", (s.vocab, s.hidden), s.hidden ** -0.5)[self.vocab_slice].contiguous()
        self.final_norm = self._norm(s.hidden)
        self.plan = route_plan(s, tp, mesh.ep, dist.get_rank(), batch)
        self.layers = [self._layer(i, q_cols, kv_cols, kv_first) for i in range(s.layers)]
        self._routing_tensors()
        pos = torch.tensor([context_len - 1], device=device)
        inv_freq = 1.0 / s.rope_theta ** (torch.arange(0, s.head_dim, 2, device=device).float() / s.head_dim)
        freqs = torch.cat([pos.float()[:, None] * inv_freq] * 2, dim=-1)[None]  # (1, 1, head_dim)
        self.cos, self.sin, self.position = freqs.cos().to(dtype), freqs.sin().to(dtype), pos

    def _weight(self, name: str, shape: tuple, std: float) -> torch.Tensor:
        return _seeded(name, shape, std, self.device, self.dtype)

    def _norm(self, width: int) -> Qwen3MoeRMSNorm:
        norm = Qwen3MoeRMSNorm(width, eps=self.s.eps).to(self.device, self.dtype)
        norm.requires_grad_(False)
        return norm

    def _layer(self, i: int, q_cols: slice, kv_cols: slice, kv_first: int) -> dict:
        s, m, w = self.s, self.mesh, self._weight
        std = s.hidden ** -0.5
        k_w, v_w = (w(f"{i}.{n}", (s.kv_heads * s.head_dim, s.hidden), std)[kv_cols] for n in ("k", "v"))
        per_rank = s.experts // m.ep
        experts = slice(m.ep_rank * per_rank, (m.ep_rank + 1) * per_rank)
        inter = s.expert_intermediate // (m.tp if m.ep == 1 else 1)
        cols = slice(m.tp_rank * inter, (m.tp_rank + 1) * inter) if m.ep == 1 else slice(None)
        # Expert weights in torch's (experts, out, in) order, as transformers stores them.
        expert_in = (s.experts, s.expert_intermediate, s.hidden)
        gate, up = (w(f"{i}.{n}", expert_in, std)[experts, cols] for n in ("gate", "up"))
        down = w(f"{i}.down", (s.experts, s.hidden, s.expert_intermediate), s.expert_intermediate ** -0.5)
        cache_shape = (self.batch, s.kv_heads, self.ctx, s.head_dim)
        heads = slice(kv_first, kv_first + self.kv_heads)
        seed = f"{i}.replica{m.replica}"
        return {
            "input_norm": self._norm(s.hidden), "q_norm": self._norm(s.head_dim), "k_norm": self._norm(s.head_dim),
            "q": w(f"{i}.q", (s.heads * s.head_dim, s.hidden), std)[q_cols].contiguous(),
            "kv": torch.cat([k_w, v_w]).contiguous(),
            "o": w(f"{i}.o", (s.hidden, s.heads * s.head_dim), (s.heads * s.head_dim) ** -0.5)[:, q_cols].contiguous(),
            "post_norm": self._norm(s.hidden),
            "router": w(f"{i}.router", (s.experts, s.hidden), std),
            "gate_up": torch.cat([gate, up], dim=1).contiguous(),
            "down": down[experts][..., cols].contiguous(),
            "k_cache": w(f"{seed}.k_cache", cache_shape, 1.0)[:, heads].contiguous(),
            "v_cache": w(f"{seed}.v_cache", cache_shape, 1.0)[:, heads].contiguous(),
        }

    def _routing_tensors(self) -> None:
        p, dev = self.plan, self.device
        def index(values: list) -> torch.Tensor:  # long even when empty (a rank may receive no copies)
            return torch.tensor(values, device=dev, dtype=torch.long)

        self.choice, self.send_rows, self.unpermute = index(p.choice), index(p.send_rows), index(p.unpermute)
        self.recv_sort = index(p.recv_sort)
        self.recv_unsort = torch.argsort(self.recv_sort)
        self.offsets = torch.cumsum(torch.tensor(p.expert_counts, device=dev), 0).to(torch.int32)

    def token_ids(self) -> torch.Tensor:
        """This replica's new tokens (replicas decode different sequences)."""
        t = torch.arange(self.batch, device=self.device)
        return (t * 7919 + self.mesh.replica * 131 + 1) % self.s.vocab

    # --- the step -----------------------------------------------------------------------------

    def step(self, ids: torch.Tensor) -> torch.Tensor:
        """Logits (batch, vocab) of this replica's next tokens."""
        return self.head(self.run_layers(self.embedding(ids)))

    def embedding(self, ids: torch.Tensor) -> torch.Tensor:
        local = ids - self.vocab_slice.start
        inside = (local >= 0) & (local < self.embed.shape[0])
        x = F.embedding(local.clamp(0, self.embed.shape[0] - 1), self.embed) * inside[:, None].to(self.dtype)
        return self._all_reduce(x)

    def run_layers(self, x: torch.Tensor) -> torch.Tensor:
        for layer in self.layers:
            x = x + self.attention(layer, x)
            x = x + self.moe(layer, x)
        return x

    def head(self, x: torch.Tensor) -> torch.Tensor:
        logits = F.linear(self.final_norm(x), self.lm_head)
        group = self.mesh.tp_group
        if group is None:
            return logits
        batch, shard = logits.shape
        gathered = torch.empty((self.mesh.tp * batch, shard), device=self.device, dtype=logits.dtype)
        _all_gather(gathered, logits, group)  # (tp x batch, vocab / tp): vocab shards stacked
        return gathered.view(self.mesh.tp, batch, shard).permute(1, 0, 2).reshape(batch, -1)

    def attention(self, layer: dict, x: torch.Tensor) -> torch.Tensor:
        s, b = self.s, x.shape[0]
        h = layer["input_norm"](x)
        q = layer["q_norm"](F.linear(h, layer["q"]).view(b, self.q_heads, 1, s.head_dim))
        k, v = F.linear(h, layer["kv"]).view(b, 2, self.kv_heads, 1, s.head_dim).unbind(1)
        q, k = apply_rotary_pos_emb(q, layer["k_norm"](k), self.cos, self.sin)
        layer["k_cache"].index_copy_(2, self.position, k)
        layer["v_cache"].index_copy_(2, self.position, v)
        out = F.scaled_dot_product_attention(q, layer["k_cache"], layer["v_cache"],
                                             enable_gqa=self.q_heads != self.kv_heads)
        return self._all_reduce(F.linear(out.transpose(1, 2).reshape(b, -1), layer["o"]))

    def moe(self, layer: dict, x: torch.Tensor) -> torch.Tensor:
        m, p = self.mesh, self.plan
        h = layer["post_norm"](x)
        if m.ep > 1:
            h = h[p.tokens[0]:p.tokens[1]]
        probs = F.softmax(F.linear(h, layer["router"]), dim=-1, dtype=torch.float32)
        weights = probs.gather(1, self.choice)
        weights = (weights / weights.sum(-1, keepdim=True)).to(x.dtype)
        rows = h[self.send_rows]
        if m.ep > 1:
            rows = self._all_to_all(rows, p.recv_splits, p.send_splits)[self.recv_sort]
        gate, up = _grouped_linear(rows, layer["gate_up"], self.offsets).chunk(2, dim=-1)
        out = _grouped_linear(F.silu(gate) * up, layer["down"], self.offsets)
        if m.ep > 1:
            out = self._all_to_all(out[self.recv_unsort], p.send_splits, p.recv_splits)
        out = (out[self.unpermute].view(h.shape[0], self.s.top_k, -1) * weights[..., None]).sum(1)
        if m.ep == 1:
            return self._all_reduce(out)
        if m.tp_group is None:
            return out
        full = torch.empty((self.batch, out.shape[1]), device=self.device, dtype=out.dtype)
        _all_gather(full, out, m.tp_group)
        return full

    def _all_reduce(self, x: torch.Tensor) -> torch.Tensor:
        if self.mesh.tp_group is not None:
            dist.all_reduce(x, group=self.mesh.tp_group)
        return x

    def _all_to_all(self, rows: torch.Tensor, out_splits: list[int], in_splits: list[int]) -> torch.Tensor:
        out = torch.empty((sum(out_splits), rows.shape[1]), device=self.device, dtype=rows.dtype)
        dist.all_to_all_single(out, rows.contiguous(), out_splits, in_splits, group=self.mesh.ep_group)
        return out


def _all_gather(out: torch.Tensor, x: torch.Tensor, group) -> None:
    gather = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor  # renamed in torch 2.13
    gather(out, x.contiguous(), group=group)
