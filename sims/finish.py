"""A valid call's step time, memory and result fields (api.simulate and api.simulate_many).

`finish` does one configuration through estimate_step and estimate_memory. `finish_together` does a sweep's
configurations (costed, stage-summed and with their activations derived: api.simulate_many) at once: what
configurations share (stage ops per binding and stage key, the pipeline send/recv time, model FLOPs, weight,
KV-cache and training-state bytes) is found once per key of the call; then, per pipeline split and mode, the
arithmetic of step_of, memory_of and fill runs on (configuration x stage) arrays, the same operations in the same
order on the same values as Python runs them for one configuration (numpy's max and argmax agree with Python's
max for numbers, not for a NaN), or, for a split of fewer than ARRAYS_FROM
configurations (numpy's three dozen calls cost more than they save there), through step_of, memory_of and fill
themselves. tests/sims/test_sims_finish.py pins both to simulate alone.
"""

from __future__ import annotations

from functools import partial

import numpy as np

from sims.calculator import Context
from sims.ir import ComputationalGraph
from sims.memory import (
    GB,
    _activations,
    _activations_key,
    _kv_cache_bytes,
    _weight_bytes,
    estimate_memory,
    memory_of,
    training_state,
)
from sims.step import (
    _pipeline_p2p_s,
    _stage_ops,
    _stages_key,
    estimate_step,
    model_flops,
    step_of,
    step_rows,
    update_rows,
)

# whether sum() of floats adds them in order from 0 as the arrays do (a compensated sum, Python 3.12 on, gives 1.0)
PLAIN_SUM = sum([1e16, 1.0, -1e16]) == 0.0
ARRAYS_FROM = 24  # configurations of one split: below it one at a time (about 1 us of numpy a call, 1-2 saved each)
TRAIN_PARTS = ("weights", "gradients", "optimizer", "activations")  # _stage_parts's, in its order
INFERENCE_PARTS = ("weights", "kv_cache", "activations")


def finish(call, result, graph: ComputationalGraph, ctx: Context):
    """The step time and memory of one valid call, into its result."""
    step = estimate_step(graph, call.hw, ctx.layout, ctx.workload, ctx)
    _fill_step(call, result, ctx, step, estimate_memory(graph, call.hw, ctx.layout, ctx.workload, ctx).breakdown_gb)
    return result


def finish_together(call, prepared: list[tuple]) -> list:
    """finish for every (result, graph, context) of `prepared` that has a context (the others are final already)."""
    splits: dict[tuple, list] = {}  # (pp, training) -> what each configuration's arithmetic reads
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
            parts = (stage_weights, *state, activations)
        else:
            key = (id(graph), tp, pp, id(workload), dp)  # _kv_cache_bytes reads these (and dims of graph, dp, workload)
            cache = kv.get(key)
            if cache is None:
                cache = kv[key] = _kv_cache_bytes(graph, ctx)
            parts = (stage_weights, cache, activations)
        splits.setdefault((pp, training), []).append((result, ctx, graph, ops, p2p_s, flops, parts))
    for (pp, training), members in splits.items():
        names = TRAIN_PARTS if training else INFERENCE_PARTS
        if PLAIN_SUM and len(members) >= ARRAYS_FROM:
            _finish_split(call, pp, names, members)
            continue
        for result, ctx, graph, ops, p2p_s, flops, parts in members:
            breakdown = memory_of(dict(zip(names, parts)), pp).breakdown_gb
            _fill_step(call, result, ctx, step_of(graph, ctx, ops, p2p_s, flops), breakdown)
    return [result for result, _, _ in prepared]


def _finish_split(call, pp: int, names: tuple[str, ...], members: list[tuple]) -> None:
    """The configurations of one pipeline split and mode: step_of's latency, fill's throughput and MFU and memory_of's
    stage as (configuration x stage) arrays; each operation is the one Python does for a configuration, in its order."""
    _, contexts, graphs, ops, p2p_s, flops, parts = zip(*members)
    updates = [()] * len(members)
    if names is TRAIN_PARTS:
        updates = [update_rows(graph, ctx, one.slowest) for ctx, graph, one in zip(contexts, graphs, ops)]
    stage_s = np.array([one.stage_s for one in ops], dtype=float) + np.array(p2p_s)[:, None]
    total = 0 + stage_s[:, 0]  # pipeline_time_s: sum(stage_s) from 0, then (m - 1) x the slowest stage
    for s in range(1, pp):
        total = total + stage_s[:, s]
    m = np.array([ctx.workload.microbatches for ctx in contexts])
    latency = total + (m - 1) * stage_s.max(axis=1)
    for j in range(max(map(len, updates))):  # step_of adds its update rows' time in order (+ 0.0 past the last)
        latency = latency + np.array([rows[j]["time_s"] if j < len(rows) else 0.0 for rows in updates])
    seconds = latency.tolist()
    devices = np.array([ctx.layout.devices for ctx in contexts])
    tokens = np.array([float(ctx.workload.batch * ctx.workload.query_len) for ctx in contexts])
    peaks = np.array([ctx.precision.gemm_peak for ctx in contexts])
    throughput = (tokens / latency / devices).tolist()
    mfu = (np.array(flops) / (latency * devices * peaks)).tolist()
    memory = np.array(parts, dtype=float)  # (configuration x part x stage) bytes
    stage = np.zeros(len(members), dtype=int)
    if pp > 1:  # memory_of: the stage whose parts sum (from 0, in order) the largest, the first of equals
        totals = 0 + memory[:, 0]
        for part in range(1, len(names)):
            totals = totals + memory[:, part]
        stage = totals.argmax(axis=1)
    breakdown = memory[np.arange(len(members)), :, stage] / GB  # (configuration x part)
    used = 0 + breakdown[:, 0]  # SimResult.memory_per_device_gb: the parts' sum from 0
    for part in range(1, len(names)):
        used = used + breakdown[:, part]
    used = used.tolist()
    for b, (result, ctx, graph, one, p2p, _, _) in enumerate(members):
        rows = partial(step_rows, graph, pp, ctx.workload.microbatches, one, p2p, updates[b])
        fill(call, result, seconds[b], throughput[b], mfu[b], rows, dict(zip(names, breakdown[b].tolist())), used[b])


def _fill_step(call, result, ctx: Context, step, breakdown: dict[str, float]) -> None:
    workload, latency, devices = ctx.workload, step.latency_s, ctx.layout.devices
    fill(call, result, latency, workload.batch * workload.query_len / latency / devices,
         step.model_flops / (latency * devices * ctx.precision.gemm_peak), step.rows, breakdown)  # the dtype's peak


def fill(call, result, latency: float, throughput: float, mfu: float, rows, breakdown: dict[str, float],
         used: float | None = None) -> None:
    """The step and memory into the result's fields, its fit and warnings; `used`: the breakdown's sum
    (SimResult.memory_per_device_gb) where the caller has it."""
    hw = call.hw
    result.latency_s, result.tokens_per_s_per_device, result.mfu = latency, throughput, mfu
    result.memory_breakdown_gb = breakdown
    result.memory_capacity_gb = hw.memory_gb
    result.row_source = rows
    if used is None:
        used = result.memory_per_device_gb
    if not used <= hw.memory_gb:  # SimResult.fits's rule
        result.reason = f"needs {used:.1f} GB per device, {call.available}"
        result.warnings.append("does not fit: " + result.reason)
    if call.warning:
        result.warnings.append(call.warning)
