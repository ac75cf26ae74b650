"""Training-only kernels for the micro-benchmarks: an IR node's forward + backward, the loss over the
vocabulary, the gradient accumulation into fp32 main grads and the optimizer step, each as the
stack runs it (torch is imported inside the functions).

    with_backward(bench)   the node's forward, then torch.autograd.grad of its outputs (random
                           output gradients) with respect to every floating input and the weights
                           it holds: GEMM dgrad + wgrad, SDPA's flash backward, the norm's dx and
                           dweight, the activation's, the embedding's dense weight gradient
    loss(stack, ...)       torch_fused: Megatron's vocab-parallel cross entropy at tp=1 (logits
                           cast to fp32, max, subtract, exp, sum, divide in place; backward: the
                           saved softmax minus one-hot, times the output gradient, cast back);
                           transformers: F.cross_entropy on logits.float() (ForCausalLMLoss)
    grad_accumulate(...)   main_grad.add_(grad): a bf16 gradient added into the fp32 buffer, per
                           parameter and micro-batch (Megatron's DDP without gradient-accumulation
                           fusion; plain PyTorch's AccumulateGrad takes the first micro-batch's
                           gradient without an add, so the simulator's charge on every micro-batch
                           is one add high there)
    optimizer(stack, ...)  torch_fused: Megatron's optimizer without apex/TE: clip by the global
                           norm (foreach norm + scale), torch AdamW (foreach) on the fp32 master
                           weights, copy into the bf16 weights, zero the grad buffer;
                           transformers: clip_grad_norm_ + fused torch AdamW on fp32 weights
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

from sims.calibration.kernels import Bench


def _floating_leaves(value, leaves: list):
    """`value` with every floating tensor replaced by a leaf copy that requires grad (collected)."""
    import torch

    if isinstance(value, torch.Tensor):
        if value.is_floating_point():
            leaf = value.detach().clone().requires_grad_(True)
            leaves.append(leaf)
            return leaf
        return value
    if isinstance(value, (list, tuple)):
        return type(value)(_floating_leaves(v, leaves) for v in value)
    return value


def _tensors(value) -> list:
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


def with_backward(bench: Bench, residual_arg: int | None = None) -> Bench:
    """The bench's forward followed by its backward, one call. `residual_arg`: the argument that is the
    residual stream, which the model also carries past the op: its two gradients are added (the
    add kernel a residual fork costs in every backward)."""
    import torch

    def make_args():
        leaves: list = []
        args = tuple(_floating_leaves(arg, leaves) if bench.grad_args is None or i in bench.grad_args else arg
                     for i, arg in enumerate(bench.make_args()))
        with torch.no_grad():
            outs = [t for t in _tensors(bench.fn(*args)) if t.is_floating_point()]
        if residual_arg is not None:
            outs.append(args[residual_arg])
        return args, leaves + list(bench.params), [torch.randn_like(t) for t in outs]

    def forward_backward(args, leaves, grads):
        for param in bench.params:  # only here: the forward benches of the same module stay inference-like
            param.requires_grad_(True)
        try:
            outs = [t for t in _tensors(bench.fn(*args)) if t.is_floating_point()]
            if residual_arg is not None:
                outs.append(args[residual_arg])
            return torch.autograd.grad(outs, leaves, grads, allow_unused=True)
        finally:
            for param in bench.params:
                param.requires_grad_(False)

    return Bench(forward_backward, make_args)


def loss(stack: str, tokens: int, vocab: int, device: str, dtype) -> Bench:
    """The loss over the vocabulary on bf16 (fp32 on a CPU check) logits of `tokens` rows."""
    import torch
    import torch.nn.functional as F

    def make_args():
        return (torch.randn(tokens, vocab, device=device, dtype=dtype),
                torch.randint(0, vocab, (tokens,), device=device))

    if stack == "torch_fused":
        cross_entropy = vocab_cross_entropy()
        return Bench(lambda logits, target: cross_entropy.apply(logits.float(), target).mean(), make_args)
    return Bench(lambda logits, target: F.cross_entropy(logits.float(), target), make_args)


@functools.cache
def vocab_cross_entropy():
    """The autograd Function (built on first use: torch stays out of this module's import)."""
    import torch

    class VocabCrossEntropy(torch.autograd.Function):
        """megatron.core.tensor_parallel.cross_entropy at tp=1, the same in-place passes."""

        @staticmethod
        def forward(ctx, logits, target):
            logits_max = torch.max(logits, dim=-1)[0]
            logits -= logits_max.unsqueeze(-1)
            rows = torch.arange(logits.size(0), device=logits.device)
            predicted = logits[rows, target].clone()
            torch.exp(logits, out=logits)
            sum_exp = logits.sum(dim=-1)
            loss = torch.log(sum_exp) - predicted
            logits.div_(sum_exp.unsqueeze(-1))
            ctx.save_for_backward(logits, target)
            return loss

        @staticmethod
        def backward(ctx, grad_output):
            softmax, target = ctx.saved_tensors
            rows = torch.arange(softmax.size(0), device=softmax.device)
            softmax[rows, target] -= 1.0
            softmax.mul_(grad_output.unsqueeze(-1))
            return softmax, None

    return VocabCrossEntropy


def grad_accumulate(params: int, device: str, dtype) -> Bench:
    """An (act-dtype) gradient of `params` elements added into an fp32 buffer."""
    import torch

    def make_args():
        return (torch.zeros(params, device=device, dtype=torch.float32), torch.randn(params, device=device, dtype=dtype))

    return Bench(lambda main_grad, grad: main_grad.add_(grad), make_args)


def optimizer(stack: str, shapes: Sequence[tuple[int, ...]], device: str, dtype) -> Bench:
    """One optimizer step over parameters of `shapes` with gradient clipping at 1.0, as `stack` runs it."""
    import torch

    master = [torch.randn(*shape, device=device, dtype=torch.float32) * 0.02 for shape in shapes]
    grads = [torch.randn_like(p) for p in master]
    for param, grad in zip(master, grads):
        param.grad = grad
    fused = stack != "torch_fused" and device.startswith("cuda")
    adam = torch.optim.AdamW(master, lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=fused or None,
                             foreach=None if fused else True)
    model = [p.to(dtype) for p in master] if stack == "torch_fused" else []

    def step():
        norms = torch._foreach_norm(grads)
        total = torch.linalg.vector_norm(torch.stack(norms))
        torch._foreach_mul_(grads, torch.clamp(1.0 / (total + 1e-6), max=1.0))
        adam.step()
        for weight, main in zip(model, master):  # Megatron: main params copied into the model's
            weight.copy_(main)
        if model:
            torch._foreach_zero_(grads)  # the grad buffer zeroed for the next step

    return Bench(step, lambda: ())
