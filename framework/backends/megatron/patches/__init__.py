"""Patches of backend=megatron, one topic per module (the runtime imports every module of this package;
registration happens at import, bodies import megatron).

    cpu_device     megatron's hard-coded CUDA calls run on the CPU
    cpu_rng        model-parallel RNG streams on the CPU generator
    cpu_clip_grad  gradient clipping on CPU tensors
    checkpoint_metadata  the same state saves to the same bytes (any device)
"""
