"""Under bf16 every norm megatron's forward runs has a weight in the input's dtype (so F.rms_norm can use
its fused kernel on a GPU), as under Megatron-LM's Float16Module. Runs the real local spec's bf16
forward on the CPU."""

from __future__ import annotations

import dataclasses

import torch
from hydra.utils import instantiate

from tests.conftest import compose_config


def _bf16_engine(megatron_world, cache_dir):
    from framework.backends.megatron.engine import Engine
    from framework.backends.megatron.model import decoder_shape

    cfg = compose_config(["recipe=pretrain_megatron_cpu", "model=tiny_qwen3",
                          f"backend.adapter.cache_dir={cache_dir}"])  # qwen3: QK-norm too
    config = instantiate(cfg.backend.adapter).convert_config(cfg)
    task = dataclasses.replace(config.task, compute_dtype="bfloat16")
    return Engine(decoder_shape(config.hf_config), megatron_world, task, "local_sdpa", on_gpu=False), config


def _norms_seen_by_forward(engine, tokens):
    """(name, input dtype, weight dtype) of every RMSNorm the forward calls."""
    seen = []
    hooks = [module.register_forward_pre_hook(
        lambda mod, args, name=name: seen.append((name, args[0].dtype, mod.weight.dtype)))
        for name, module in engine.module.named_modules() if isinstance(module, torch.nn.RMSNorm)]
    positions = torch.arange(tokens.shape[1]).expand_as(tokens)
    try:
        with torch.no_grad():
            engine.forward_module(tokens, positions, None)
    finally:
        for hook in hooks:
            hook.remove()
    return seen


def test_bf16_norm_weights_match_their_inputs(megatron_world, cache_dir):
    engine, config = _bf16_engine(megatron_world, cache_dir)
    tokens = torch.randint(0, config.hf_config["vocab_size"], (2, 16), generator=torch.Generator().manual_seed(0))
    seen = _norms_seen_by_forward(engine, tokens)
    layers = config.hf_config["num_hidden_layers"]
    assert len(seen) == 4 * layers + 1  # input, q, k and pre-MLP norm per layer; the final norm
    assert all(inputs == weight == torch.bfloat16 for _, inputs, weight in seen), seen

    # every parameter in the compute dtype: megatron's Float16 optimizers then keep a float32 master
    # copy of each (CUDA tensors only, so not run here); before, the norms trained in float32 in place
    assert {p.dtype for p in engine.module.parameters()} == {torch.bfloat16}

def test_a_bf16_norm_gives_the_float32_norm_within_bf16_rounding():
    """What the cast costs: the norm with a bf16 weight against float32 weight and input, both
    rounded to bf16 once at the end."""
    generator = torch.Generator().manual_seed(0)
    x = torch.randn(64, 256, generator=generator).bfloat16()
    weight = 1 + 0.1 * torch.randn(256, generator=generator)
    reference = torch.nn.functional.rms_norm(x.float(), (256,), weight, 1e-6)
    ours = torch.nn.functional.rms_norm(x, (256,), weight.bfloat16(), 1e-6)
    assert ours.dtype == torch.bfloat16
    assert torch.allclose(ours.float(), reference, rtol=2 ** -7, atol=2 ** -7)
