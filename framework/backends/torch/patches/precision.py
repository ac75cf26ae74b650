"""Mixed precision on CPUs: bf16 autocast only where the CPU computes bf16 natively."""

from __future__ import annotations

import logging

from framework.core.patches import PatchContext, Phase, register_patch

log = logging.getLogger(__name__)


def _bf16_on_cpu(ctx: PatchContext) -> bool:
    config = ctx.backend_config
    return config.device == "cpu" and config.task.compute_dtype == "bfloat16"


@register_patch("torch-cpu-fp32-without-bf16", backend="torch", phase=Phase.CONVERT, hardware=["cpu"],
                condition=_bf16_on_cpu, requires={"torch": ">=2.4", "trl": ">=1.0,<2"},
                description="compute in float32 on CPUs without native bf16 (no AVX512-BF16/AMX): bf16 autocast "
                            "there is emulated, slower and less exact")
def cpu_fp32_without_bf16(ctx: PatchContext) -> None:
    import torch

    if torch.ops.mkldnn._is_mkldnn_bf16_supported():
        return
    config = ctx.backend_config
    log.warning("this CPU has no native bf16: %s.compute_dtype bfloat16 -> float32", config.task_name)
    config.task.compute_dtype = "float32"
