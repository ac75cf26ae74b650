"""A valid call's step time, memory and result fields (api.simulate and api.simulate_many).

`finish` does one configuration through estimate_step and estimate_memory. `finish_together` does a sweep's
configurations (costed, stage-summed and with their activations derived: api.simulate_many) in one loop: what
configurations share (stage ops per binding and stage key, the pipeline send/recv time, model FLOPs, weight,
KV-cache and training-state bytes) is found once per key of the call and handed to the same step_of, memory_of and
fill that the one-configuration path runs, so every number is computed by the same code from the same values.
"""

from __future__ import annotations

from sims.calculator import Context
from sims.ir import ComputationalGraph
from sims.memory import (
    _activations,
    _activations_key,
    _kv_cache_bytes,
    _weight_bytes,
    estimate_memory,
    memory_of,
    training_state,
)
from sims.step import _pipeline_p2p_s, _stage_ops, _stages_key, estimate_step, model_flops, step_of


def finish(call, result, graph: ComputationalGraph, ctx: Context):
    """The step time and memory of one valid call, into its result."""
    step = estimate_step(graph, call.hw, ctx.layout, ctx.workload, ctx)
    return fill(call, result, ctx, step, estimate_memory(graph, call.hw, ctx.layout, ctx.workload, ctx).breakdown_gb)


def finish_together(call, prepared: list[tuple]) -> list:
    """finish for every (result, graph, context) of `prepared` with a context (the others are final already)."""
    groups, weights, kv, p2p, states = {}, {}, {}, {}, {}
    for result, graph, ctx in prepared:
        if ctx is None:
            continue
        layout, workload = ctx.layout, ctx.workload
        tp, dp, ep, pp = layout.tp, layout.dp, layout.ep, layout.pp
        # what the stage and activation keys and model FLOPs read: the graph, workload, dp (fsdp's rows) and pp
        group = groups.get((id(graph), id(workload), dp, pp))
        if group is None:
            group = groups[(id(graph), id(workload), dp, pp)] = (
                _stages_key(ctx), _activations_key(ctx), model_flops(graph, workload), workload.mode == "train")
        stages_key, activations_key, flops, training = group
        derived = ctx.costs.derived
        ops = derived.get(stages_key) or _stage_ops(graph, ctx)
        p2p_s = 0.0
        if pp > 1:  # _pipeline_p2p_s's key
            key = (id(graph), ctx.dims["tokens"], ctx.precision.act_bytes, layout.devices, workload.mode)
            p2p_s = p2p.get(key)
            if p2p_s is None:
                p2p_s = p2p[key] = _pipeline_p2p_s(graph, ctx)
        step = step_of(graph, ctx, ops, p2p_s, flops)
        key = (id(graph), tp, ep, pp, workload.dtype, training)  # _weight_bytes's key
        stage_weights = weights.get(key)
        if stage_weights is None:
            stage_weights = weights[key] = _weight_bytes(graph, ctx)
        activations = derived.get(activations_key) or _activations(graph, ctx)
        if training:
            key = (id(graph), tp, ep, pp, dp if workload.zero else None, workload.dtype)  # training_state's key
            state = states.get(key)
            if state is None:
                state = states[key] = training_state(graph, layout, workload)
            parts = {"weights": stage_weights, "gradients": state[0], "optimizer": state[1],
                     "activations": activations}
        else:
            key = (id(graph), tp, pp, id(workload), dp)  # _kv_cache_bytes reads these (and dims of graph, dp, workload)
            cache = kv.get(key)
            if cache is None:
                cache = kv[key] = _kv_cache_bytes(graph, ctx)
            parts = {"weights": stage_weights, "kv_cache": cache, "activations": activations}
        fill(call, result, ctx, step, memory_of(parts, pp).breakdown_gb)
    return [result for result, _, _ in prepared]


def fill(call, result, ctx: Context, step, breakdown: dict[str, float]):
    """The step and memory breakdown into the result's fields, its fit and warnings."""
    layout, workload, hw = ctx.layout, ctx.workload, call.hw
    latency, devices = step.latency_s, layout.devices
    result.latency_s = latency
    result.tokens_per_s_per_device = workload.batch * workload.query_len / latency / devices
    result.mfu = step.model_flops / (latency * devices * ctx.precision.gemm_peak)  # gemm_peak: the dtype's peak
    result.memory_breakdown_gb = breakdown
    result.memory_capacity_gb = hw.memory_gb
    result.row_source = step.rows
    if not result.fits:  # one rule for fitting: SimResult.fits
        result.reason = f"needs {result.memory_per_device_gb:.1f} GB per device, {hw.memory_gb:g} GB available"
        result.warnings.append(f"does not fit: {result.reason}")
    if call.warning:
        result.warnings.append(call.warning)
    return result
