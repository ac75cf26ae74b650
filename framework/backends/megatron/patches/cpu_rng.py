"""megatron-core's model-parallel RNG tracker keeps its streams in the CPU generator on a CPU run.

`tensor_parallel.random` saves and restores "the CUDA RNG state" around dropout and initialisation
(`get_cuda_rng_tracker().fork()`) with `_get_cuda_rng_state`/`_set_cuda_rng_state`; on a torch
without CUDA the setter queues a lazy call that never runs, so forked streams would silently not
be restored. Here both work on the CPU generator, which makes forks exact and runs repeatable.
"""

from __future__ import annotations

from framework.core.patches import Phase, register_patch


def install() -> None:
    import torch
    from megatron.core.tensor_parallel import random

    random._get_cuda_rng_state = lambda *args, clone=False, **kwargs: (
        torch.get_rng_state().clone() if clone else torch.get_rng_state())
    random._set_cuda_rng_state = lambda new_state, *args, **kwargs: torch.set_rng_state(new_state)


@register_patch("megatron.cpu_rng", backend="megatron", phase=Phase.SETUP,
                requires={"megatron-core": ">=0.16,<0.17", "torch": ">=2.6"},
                hardware=["cpu"], priority=11,
                description="model-parallel RNG streams on the CPU generator (torch CPU build)")
def cpu_rng(ctx) -> None:
    install()
