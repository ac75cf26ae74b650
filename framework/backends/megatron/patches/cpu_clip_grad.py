"""Gradient clipping by global norm on the CPU.

megatron-core's `clip_grad_by_total_norm_fp32` asserts every gradient is a `torch.cuda.FloatTensor`
(so on a CPU only clip_grad=0 ran). This version keeps its arithmetic (scale by
max_norm / (norm + 1e-6) when that is below 1) and checks for fp32 on any device.
"""

from __future__ import annotations

from framework.core.patches import Phase, register_patch


def clip_grad_by_total_norm_fp32(parameters, max_norm, total_norm, use_decoupled_grad=False):
    import torch
    from megatron.core.utils import to_local_if_dtensor

    if isinstance(parameters, torch.Tensor):
        parameters = [parameters]
    attribute = "decoupled_grad" if use_decoupled_grad else "grad"
    grads = [to_local_if_dtensor(getattr(p, attribute)).detach() for p in parameters
             if getattr(p, attribute, None) is not None]
    if any(g.dtype != torch.float32 for g in grads):
        raise TypeError("clip_grad_by_total_norm_fp32: gradients must be float32")
    clip_coeff = max_norm / (total_norm + 1.0e-6)
    if clip_coeff < 1.0 and grads:
        torch._foreach_mul_(grads, clip_coeff)


def install() -> None:
    from megatron.core.optimizer import clip_grads, optimizer

    clip_grads.clip_grad_by_total_norm_fp32 = clip_grad_by_total_norm_fp32
    optimizer.clip_grad_by_total_norm_fp32 = clip_grad_by_total_norm_fp32


@register_patch("megatron.cpu_clip_grad", backend="megatron", phase=Phase.SETUP,
                requires={"megatron-core": ">=0.16,<0.17"},
                hardware=["cpu"], priority=12,
                description="grad clipping (optimizer.max_grad_norm > 0) on CPU tensors")
def cpu_clip_grad(ctx) -> None:
    install()
