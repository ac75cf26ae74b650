"""A plain-PyTorch decoder trained as Megatron-core's local spec trains it, for held-out training steps
(sims/benchmarks/train_steps.py): the `torch_fused` stack's kernels on one GPU.

Per layer: F.rms_norm, one QKV GEMM (+ bias for Qwen2), SDPA (causal, GQA, flash on GPUs), the output
transpose, o_proj, residual add, F.rms_norm, one gate/up GEMM, silu(gate) * up, down, residual add;
around them the embedding, the final norm, lm_head (tied to the embedding where the model ties them)
and Megatron's cross entropy over the vocabulary in fp32 (sims/calibration/kernels_backward.py). No
rotary embedding (the stack fuses it into neighbouring kernels). Mixed precision as Megatron's DDP and
optimizer run it without apex or Transformer Engine: bf16 weights; after each micro-batch's backward
every bf16 weight gradient is added into an fp32 main-grad buffer; then clipping by the global norm
(1.0), torch AdamW (foreach) on fp32 master weights, the master weights copied into the bf16 ones and
the buffer zeroed. `recompute`: every layer runs under torch.utils.checkpoint (full recompute).
Random weights and tokens; torch is imported inside functions.
"""

from __future__ import annotations

from collections.abc import Mapping

from sims.calibration.kernels_backward import vocab_cross_entropy


class TrainDecoder:
    def __init__(self, cfg: Mapping, device, dtype, recompute: bool):
        import torch

        self.torch, self.recompute = torch, recompute
        h, heads = cfg["hidden_size"], cfg["num_attention_heads"]
        self.kv_heads, self.head_dim = cfg["num_key_value_heads"], cfg.get("head_dim") or h // heads
        self.heads, self.eps = heads, cfg.get("rms_norm_eps", 1e-6)
        qkv = (heads + 2 * self.kv_heads) * self.head_dim
        inter, vocab = cfg["intermediate_size"], cfg["vocab_size"]
        bias = cfg.get("model_type") == "qwen2" or bool(cfg.get("attention_bias"))

        def weight(*shape, scale=0.02):
            return (torch.randn(*shape, device=device) * scale).to(dtype).requires_grad_(True)

        self.embed = weight(vocab, h)
        self.layers = [{
            "norm1": weight(h, scale=1.0), "qkv": weight(qkv, h), "qkv_bias": weight(qkv) if bias else None,
            "o": weight(h, heads * self.head_dim), "norm2": weight(h, scale=1.0), "gate_up": weight(2 * inter, h),
            "down": weight(h, inter),
        } for _ in range(cfg["num_hidden_layers"])]
        self.final_norm = weight(h, scale=1.0)
        self.head = self.embed if cfg.get("tie_word_embeddings") else weight(vocab, h)
        self.params = [self.embed, self.final_norm, *([] if self.head is self.embed else [self.head])]
        self.params += [w for layer in self.layers for w in layer.values() if w is not None]
        self.master = [p.detach().float() for p in self.params]
        self.main_grads = [torch.zeros_like(m) for m in self.master]
        for master, grad in zip(self.master, self.main_grads):
            master.grad = grad
        self.adam = torch.optim.AdamW(self.master, lr=1e-5, betas=(0.9, 0.95), weight_decay=0.1, foreach=True)
        self.cross_entropy = vocab_cross_entropy()

    def layer(self, w: dict, x):
        F = self.torch.nn.functional
        b, s, h = x.shape
        y = F.rms_norm(x, (h,), w["norm1"], self.eps)
        qkv = F.linear(y, w["qkv"], w["qkv_bias"])
        q, k, v = qkv.split([self.heads * self.head_dim, self.kv_heads * self.head_dim,
                             self.kv_heads * self.head_dim], dim=-1)
        q = q.view(b, s, self.heads, self.head_dim).transpose(1, 2)
        k = k.view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        v = v.view(b, s, self.kv_heads, self.head_dim).transpose(1, 2)
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.heads != self.kv_heads)
        x = x + F.linear(attn.transpose(1, 2).reshape(b, s, -1), w["o"])
        y = F.rms_norm(x, (h,), w["norm2"], self.eps)
        gate, up = F.linear(y, w["gate_up"]).chunk(2, dim=-1)
        return x + F.linear(F.silu(gate) * up, w["down"])

    def loss(self, ids, labels):
        from torch.utils.checkpoint import checkpoint

        F = self.torch.nn.functional
        x = F.embedding(ids, self.embed)
        for w in self.layers:
            x = checkpoint(self.layer, w, x, use_reentrant=False) if self.recompute else self.layer(w, x)
        x = F.rms_norm(x, (x.shape[-1],), self.final_norm, self.eps)
        logits = F.linear(x, self.head).view(-1, self.head.shape[0])
        return self.cross_entropy.apply(logits.float(), labels.view(-1)).mean()

    def step(self, batches: list[tuple]) -> None:
        """One optimizer step over the micro-batches (ids, labels)."""
        torch = self.torch
        for ids, labels in batches:
            (self.loss(ids, labels) / len(batches)).backward()
            for param, main_grad in zip(self.params, self.main_grads):  # Megatron's DDP grad hook
                main_grad.add_(param.grad)
                param.grad = None
        norms = torch._foreach_norm(self.main_grads)
        total = torch.linalg.vector_norm(torch.stack(norms))
        torch._foreach_mul_(self.main_grads, torch.clamp(1.0 / (total + 1e-6), max=1.0))
        self.adam.step()
        with torch.no_grad():
            for param, master in zip(self.params, self.master):
                param.copy_(master)
        torch._foreach_zero_(self.main_grads)
