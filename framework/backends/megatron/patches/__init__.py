"""Patches of backend=megatron, one topic per module (registered on import; bodies import megatron).

    cpu_device     megatron's hard-coded CUDA calls run on the CPU
    cpu_rng        model-parallel RNG streams on the CPU generator
    cpu_clip_grad  gradient clipping on CPU tensors
    checkpoint_metadata  the same state saves to the same bytes (any device)
"""

from framework.backends.megatron.patches import checkpoint_metadata, cpu_clip_grad, cpu_device, cpu_rng  # noqa: F401
