"""A transformers model's whole forward step, timed as the accuracy benchmarks time it: a static KV cache
whose write position stays put (so a decode step can be replayed as a CUDA graph), balanced or census'd
MoE routing, no padding masks, and a census of the kernels a step launches."""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from contextlib import contextmanager

from sims.calibration.timing import time_call
from sims.workload import parse_workload

MASK_BUILDERS = ("create_causal_mask", "create_sliding_window_causal_mask")


class FixedCache:
    """A static KV cache whose write position stays put: each call writes its new tokens at the
    end of `kv_len` positions (index_copy_, as transformers' StaticCache) and attention reads all
    of them, so one decode step can be replayed. Duck-types the one method attention calls."""

    def __init__(self, layers: int, batch: int, kv_heads: int, head_dim: int, kv_len: int, new: int, device, dtype):
        import torch

        shape = (batch, kv_heads, kv_len, head_dim)
        self.keys = [torch.randn(shape, device=device, dtype=dtype) for _ in range(layers)]
        self.values = [torch.randn(shape, device=device, dtype=dtype) for _ in range(layers)]
        self.positions = torch.arange(kv_len - new, kv_len, device=device)

    def update(self, key_states, value_states, layer_idx: int, *args, **kwargs):
        self.keys[layer_idx].index_copy_(2, self.positions, key_states)
        self.values[layer_idx].index_copy_(2, self.positions, value_states)
        return self.keys[layer_idx], self.values[layer_idx]


def time_model(model, workload: Mapping, device: str, warmup: int, repeats: int, profile: bool = False) -> dict:
    """One forward step of the whole model: CUDA graph replay and eager (on CPU: wall clock)."""
    import torch

    w = parse_workload(workload)
    config = model.config
    heads = config.num_attention_heads
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // heads
    cache = FixedCache(config.num_hidden_layers, w.batch, config.num_key_value_heads, head_dim, w.kv_len,
                       w.query_len, device, model.dtype)
    ids = torch.randint(0, config.vocab_size, (w.batch, w.query_len), device=device)
    positions = torch.arange(w.kv_len - w.query_len, w.kv_len, device=device).expand(w.batch, -1)

    def step():
        return model(input_ids=ids, position_ids=positions, past_key_values=cache, use_cache=True,
                     logits_to_keep=1).logits

    with torch.inference_mode(), no_padding_masks(model):
        natural = None
        if moe_routers(model):
            natural = time_call(step, [()], device, warmup, repeats, graphs=True, target_ms=0.0)
            natural_census = routing_census(model, step)
        with balanced_routing(model, w.batch * w.query_len):
            graphed = time_call(step, [()], device, warmup, repeats, graphs=True, target_ms=0.0)
            eager = time_call(step, [()], device, warmup, repeats, graphs=False)
            result = {"time_us": graphed.time_us, "timing": graphed.mode, "spread": graphed.spread,
                      "eager_us": eager.time_us}
            if profile:
                result["kernels"] = kernel_census(step)
            if natural is not None:
                result.update(routing=routing_census(model, step), natural_routing_us=natural.time_us,
                              natural_routing=natural_census)
    return result


def moe_routers(model) -> list:
    return [layer.mlp.gate for layer in model.model.layers if hasattr(layer.mlp, "experts")]


@contextmanager
def balanced_routing(model, tokens: int):
    """Each token's experts drawn uniformly at random (fixed per layer), as the simulator assumes
    and a router trained with a load-balancing loss comes close to. The router still runs (its
    kernels stay in the step); only its choice of experts is replaced. A random-weight router,
    left alone, concentrates tokens on a few experts in later layers."""
    import torch

    hooks = []
    for router in moe_routers(model):
        weight = router.weight
        choice = torch.rand(tokens, router.num_experts, device=weight.device).topk(router.top_k, dim=-1).indices

        def replace(module, args, output, choice=choice):
            return (*output[:-1], choice)

        hooks.append(router.register_forward_hook(replace))
    try:
        yield
    finally:
        for hook in hooks:
            hook.remove()


def routing_census(model, step) -> list[dict] | None:
    """Per MoE layer of one step: experts touched and the busiest expert's load over the mean
    (the simulator assumes balanced routing: 1.0)."""
    routers = moe_routers(model)
    chosen = []
    hooks = [r.register_forward_hook(lambda module, args, output: chosen.append(output[-1])) for r in routers]
    try:
        step()
    finally:
        for hook in hooks:
            hook.remove()
    census = []
    for index in chosen:
        load = index.flatten().bincount(minlength=routers[0].num_experts).float()
        census.append({"touched": int((load > 0).sum()), "max_over_mean": float(load.max() / load.mean())})
    return census


def kernel_census(step, top: int = 12) -> dict:
    """The GPU kernels of one eager step (torch.profiler): how many, their summed time, the largest."""
    from torch.profiler import ProfilerActivity, profile

    try:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            step()
        events = [e for e in prof.events() if e.device_type.name == "CUDA"]
    except Exception as error:  # diagnostics only: never lose the case's timing over it
        return {"error": f"{type(error).__name__}: {error}"}
    by_name: dict[str, list[float]] = {}
    for event in events:
        by_name.setdefault(event.name[:80], []).append(getattr(event, "device_time", 0.0))
    largest = sorted(by_name.items(), key=lambda item: -sum(item[1]))[:top]
    return {"count": len(events), "total_us": sum(sum(times) for times in by_name.values()),
            "largest": [{"name": name, "count": len(times), "us": sum(times)} for name, times in largest]}


@contextmanager
def no_padding_masks(model):
    """Without padding, transformers' mask builders return None for these steps (sdpa's is_causal in
    prefill, no mask for one query token); with FixedCache they would ask it for sizes it does not
    track, so stand in for them with None while timing."""
    module = importlib.import_module(type(model.model).__module__)
    saved = {name: getattr(module, name) for name in MASK_BUILDERS if hasattr(module, name)}
    for name in saved:
        setattr(module, name, lambda *args, **kwargs: None)
    try:
        yield
    finally:
        for name, builder in saved.items():
            setattr(module, name, builder)
