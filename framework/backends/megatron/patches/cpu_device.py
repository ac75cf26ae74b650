"""megatron-core on a CPU: its modules see a `torch` whose "cuda" device is the CPU.

megatron-core (<= 0.16.1) hard-codes CUDA in the training path: `torch.cuda.current_device()` as the
device of the DDP gradient buffers, `torch.zeros(..., device="cuda")` in the schedules, grad clipping
and the causal mask, `torch.cuda.synchronize()` in timers, `Tensor.cuda()` for tied embeddings over
pipeline stages. Instead of editing those lines, each loaded `megatron.core` module's global `torch`
is replaced by a thin proxy: the tensor factories map a CUDA device to the CPU, and `torch.cuda` maps
current_device/synchronize/RNG calls to their CPU counterparts. Every other attribute is torch's own.
"""

from __future__ import annotations

import importlib
import sys
import types

from framework.core.patches import Phase, register_patch

# The megatron modules a pretraining run imports; the proxy goes into these and every megatron.core
# module they load.
ENTRY_MODULES = (
    "megatron.core.models.gpt.gpt_model", "megatron.core.models.gpt.gpt_layer_specs",
    "megatron.core.distributed", "megatron.core.optimizer", "megatron.core.pipeline_parallel.schedules",
    "megatron.core.optimizer_param_scheduler", "megatron.core.dist_checkpointing",
    "megatron.core.dist_checkpointing.strategies.torch", "megatron.core.transformer.utils",
    "megatron.core.tensor_parallel", "megatron.core.rerun_state_machine",
)
FACTORIES = ("zeros", "ones", "empty", "full", "tensor", "arange", "rand", "randn", "randint",
             "zeros_like", "ones_like", "empty_like", "full_like")


def _on_cpu(device):
    """A CUDA device (name, index or torch.device) becomes the CPU; anything else stays."""
    import torch

    if isinstance(device, int) or (isinstance(device, str) and device.startswith("cuda")):
        return "cpu"
    if isinstance(device, torch.device) and device.type == "cuda":
        return "cpu"
    return device


def _factory(fn):
    def on_cpu(*args, **kwargs):
        if "device" in kwargs:
            kwargs["device"] = _on_cpu(kwargs["device"])
        kwargs.pop("pin_memory", None)  # pinning needs a CUDA build
        return fn(*args, **kwargs)

    on_cpu.__name__ = fn.__name__
    return on_cpu


def _cuda_on_cpu():
    import torch

    cuda = types.ModuleType("torch.cuda")
    cuda.__getattr__ = lambda name: getattr(torch.cuda, name)
    cuda.current_device = lambda: "cpu"
    cuda.synchronize = lambda *args, **kwargs: None
    cuda.empty_cache = lambda: None
    cuda.get_rng_state = lambda *args, **kwargs: torch.get_rng_state()
    cuda.set_rng_state = lambda state, *args, **kwargs: torch.set_rng_state(state)
    cuda.manual_seed = torch.manual_seed
    return cuda


def torch_on_cpu() -> types.ModuleType:
    """The proxy megatron modules get instead of torch."""
    import torch

    proxy = types.ModuleType("torch")
    proxy.__getattr__ = lambda name: getattr(torch, name)
    for name in FACTORIES:
        setattr(proxy, name, _factory(getattr(torch, name)))
    proxy.cuda = _cuda_on_cpu()
    proxy.__crucible_cpu_proxy__ = True
    return proxy


def install() -> int:
    """Put the proxy into every loaded megatron.core module that uses torch; returns how many."""
    import torch

    for name in ENTRY_MODULES:
        importlib.import_module(name)
    proxy = torch_on_cpu()
    patched = 0
    for name, module in list(sys.modules.items()):
        if name.startswith("megatron.core") and getattr(module, "torch", None) is torch:
            module.torch = proxy
            patched += 1
    if not torch.cuda.is_available():  # megatron moves tied embeddings with Tensor.cuda()
        torch.Tensor.cuda = lambda self, *args, **kwargs: self
    return patched


@register_patch("megatron.cpu_device", backend="megatron", phase=Phase.SETUP,
                requires={"megatron-core": ">=0.16,<0.17", "torch": ">=2.6"},
                hardware=["cpu"], priority=10,
                description="megatron-core's hard-coded CUDA calls run on the CPU (torch >= 2.6, CPU build)")
def cpu_device(ctx) -> None:
    install()
