"""A training step's work per micro-batch outside the graph's nodes, as rows per pipeline stage (sims/step.py adds
their time to each stage's): the loss over the vocabulary where lm_head runs, the weight gradients' accumulation into
the fp32 main grads, a scanned stack's copies and fsdp's collectives (sims/scan_update.py), and the wait for an eager
stack's host (host_dispatch). Each row is kept per what it depends on (the loss per the logits a device holds, the
accumulation per the parameters it holds), and what a plan and stage key fix is looked up once for all their bindings,
so a sweep computes each once.
"""

from __future__ import annotations

import numpy as np

from sims.cache import PerHardware
from sims.calculator import Context
from sims.calibration.backward import BackwardRatios
from sims.ir import ComputationalGraph
from sims.memory import local_params
from sims.partition import stage_layer_bounds, stage_split
from sims.scan_update import fsdp_rows, saved_layer_bytes, scan_rows
from sims.stacks import DEFAULT_STACK, stack
from sims.train_work import GRAD_ACCUMULATE_BYTES, TRAIN_BACKWARD_FACTOR, loss_work
from sims.vector_cost import Costs

_CACHES = PerHardware()  # loss and accumulation rows, per parsed hardware spec (and so per efficiency table)


def train_stage_rows(graph: ComputationalGraph, contexts: list[Context], costs: list[Costs],
                      ratios: BackwardRatios | None, heads: list[bool], stage_s: list[list[float]],
                      split_weights: list[np.ndarray]) -> tuple[list, list[list[float]]]:
    """Per binding of one stage key (any plans): each stage's training rows outside the graph (loss, grad
    accumulation, scan copies, fsdp collectives, host wait) and its time with them. What a plan fixes with the key
    (the accumulation, fsdp's rows) is looked up once per plan, the stack's sections once for all of them."""
    section = stack(graph.meta.get("stack", DEFAULT_STACK))
    saved = None
    if section.scanned_update is not None:
        saved = saved_layer_bytes(graph, contexts, [c.inputs for c in costs], [c.outputs for c in costs],
                                  stage_split(graph, contexts[0].layout.pp).matrix)
    per_plan, losses, rows, times = {}, {}, [], []
    for b, (one, c) in enumerate(zip(contexts, costs)):
        if id(c.plan) not in per_plan:  # the plan's tp, ep and dtype with the key's pp and fsdp shards
            per_plan[id(c.plan)] = _accumulate_rows_of(graph, one), fsdp_rows(graph, one)
        accumulate, fsdp = per_plan[id(c.plan)]
        key = (one.dims["logit_tokens"], one.layout.tp, one.workload.dtype)  # _loss_of's: bindings share few
        loss = losses.get(key)
        if loss is None:
            loss = losses[key] = _loss_of(graph, one, ratios)
        stage_rows = [(loss, row) if head else (row,) for head, row in zip(heads, accumulate)]
        if saved is not None:
            stage_rows = [in_stage + scan for in_stage, scan in zip(stage_rows, scan_rows(graph, one, saved[b]))]
        if fsdp[0]:  # fsdp's collectives (every stage has them or none does)
            stage_rows = [in_stage + shards for in_stage, shards in zip(stage_rows, fsdp)]
        stage_times = [t + _rows_s(in_stage) for t, in_stage in zip(stage_s[b], stage_rows)]
        if section.host_dispatch is not None:
            waits = host_waits_s(graph, one, c, split_weights[b], stage_times)
            stage_rows = [in_stage + ((("host_dispatch_wait", "idle", 1, 0.0, 0.0, wait, "host"),) if wait else ())
                          for in_stage, wait in zip(stage_rows, waits)]
            stage_times = [t + wait for t, wait in zip(stage_times, waits)]
        rows.append(stage_rows)
        times.append(stage_times)
    return rows, times


def _rows_s(rows: tuple) -> float:
    """sum(row[5] for row in rows) (the rows' time, added in order from 0), without a generator per stage."""
    total = 0
    for row in rows:
        total += row[5]
    return total


def host_waits_s(graph: ComputationalGraph, ctx: Context, costs: Costs, weights: np.ndarray,
                 stage_s: list[float]) -> list[float]:
    """Per stage, how long one training micro-batch's GPU work waits for the host beyond its kernels'
    time: an eager stack's host launches every kernel of the forward and the backward (the stack's
    measured `host_dispatch`: per decoder layer, and per collective call: the tp all-reduces, twice
    per micro-batch with the backward's), and a micro-batch takes the longer of the two. Zero for a
    stack without a measured host_dispatch."""
    dispatch = stack(graph.meta.get("stack", DEFAULT_STACK)).host_dispatch
    if dispatch is None:
        return [0.0] * len(stage_s)
    bounds = stage_layer_bounds(graph.meta["num_layers"], ctx.layout.pp)
    collectives = np.array([node.is_comm for node in graph.nodes]) & costs.runs
    calls = (weights @ collectives.astype(float)).tolist()  # executions with the backward's (and recompute's)
    host = [(bounds[i + 1] - bounds[i]) * dispatch.layer_us * 1e-6 + calls[i] * dispatch.collective_us * 1e-6
            for i in range(len(stage_s))]
    return [max(0.0, h - t) for h, t in zip(host, stage_s)]


def train_rows(
    graph: ComputationalGraph, ctx: Context, ratios: BackwardRatios | None, heads: list[bool]
) -> list[tuple]:
    """Per stage, one micro-batch's training work outside the graph's nodes: the loss over the
    vocabulary, forward and backward, where lm_head runs; the weight gradients added into the fp32
    main grads on every stage (`heads`: whether each stage runs lm_head)."""
    loss, accumulate = _loss_of(graph, ctx, ratios), _accumulate_rows_of(graph, ctx)
    return [(loss, row) if head else (row,) for head, row in zip(heads, accumulate)]


def _loss_of(graph: ComputationalGraph, ctx: Context, ratios: BackwardRatios | None) -> tuple:
    """The loss row, kept per the logits a device holds: a sweep computes each once."""
    key = ("loss", ctx.dims["logit_tokens"], ctx.layout.tp, ctx.workload.dtype)
    return _CACHES.of(ctx.hw).get(graph, key, lambda: _loss_row(graph, ctx, ratios))


def log_prob_rows(graph: ComputationalGraph, ctx: Context) -> list[tuple]:
    """Per stage, a forward pass's log-probs over the vocabulary at the positions it projects (prefill with
    workload.loss_len: the GRPO log-prob passes), on the last stage, the one with lm_head: the cross-entropy's forward
    (its measured curve; no backward); () on the others and without loss_len."""
    if ctx.workload.mode != "prefill" or not ctx.workload.loss_len:
        return [()] * ctx.layout.pp
    flops, nbytes = loss_work(ctx.dims["logit_tokens"], graph.meta["vocab_size"], ctx.layout.tp,
                              ctx.precision.act_bytes)
    seconds, bound = extra_op_s("cross_entropy", "elementwise", flops, nbytes, ctx)
    return [()] * (ctx.layout.pp - 1) + [(("log_probs", "elementwise", 1, flops, nbytes, seconds, bound),)]


def _accumulate_rows_of(graph: ComputationalGraph, ctx: Context) -> list[tuple]:
    """Per stage, the grad accumulation row, kept per the parameters a device holds."""
    layout, w = ctx.layout, ctx.workload
    shards = layout.dp if w.shard_weights else 1  # fsdp accumulates its shard's gradients
    key = ("accumulate", layout.tp, layout.ep, layout.pp, shards, w.dtype)
    return _CACHES.of(ctx.hw).get(graph, key, lambda: _accumulate_rows(graph, ctx))


def _loss_row(graph: ComputationalGraph, ctx: Context, ratios: BackwardRatios | None) -> tuple:
    layout, act_bytes = ctx.layout, ctx.precision.act_bytes
    flops, nbytes = loss_work(ctx.dims["logit_tokens"], graph.meta["vocab_size"], layout.tp, act_bytes)
    loss_s, loss_bound = extra_op_s("cross_entropy", "elementwise", flops, nbytes, ctx)
    loss_ratio = ratios.ratio("cross_entropy", "elementwise", loss_s) if ratios else TRAIN_BACKWARD_FACTOR
    return ("cross_entropy", "elementwise", 1, flops * (1 + TRAIN_BACKWARD_FACTOR),
            nbytes * (1 + TRAIN_BACKWARD_FACTOR), loss_s * (1 + loss_ratio), loss_bound)


def _accumulate_rows(graph: ComputationalGraph, ctx: Context) -> list[tuple]:
    rows = []
    for stage in range(ctx.layout.pp):
        params = sum(local_params(graph, ctx.layout, stage)) / (ctx.layout.dp if ctx.workload.shard_weights else 1)
        accumulate_bytes = params * GRAD_ACCUMULATE_BYTES
        accumulate_s, bound = extra_op_s("grad_accumulate", "elementwise", params, accumulate_bytes, ctx)
        rows.append(("grad_accumulate", "elementwise", 1, params, accumulate_bytes, accumulate_s, bound))
    return rows


def extra_op_s(op: str, op_class: str, flops: float, nbytes: float, ctx: Context) -> tuple[float, str]:
    """(time, bound) of work that is no graph node (the loss, the grad accumulation, the optimizer):
    the table's measured curve for `op` when it has one, else the roofline with the op's or its
    class's efficiency and floor."""
    hw = ctx.hw
    eff = hw.efficiency.for_op(op, op_class)
    compute_s = flops / (ctx.precision.other_peak * eff.compute)
    memory_s = nbytes / (hw.memory_bytes_per_s * eff.memory)
    floor_s = eff.floor_us * 1e-6
    bound = "compute" if compute_s >= memory_s else "memory"
    dtype = "bf16" if ctx.precision.dtype == "fp8" else ctx.precision.dtype
    measured = ctx.op_interpolator.time_s(op, dtype, flops, nbytes, floor_s) if ctx.op_interpolator else None
    if measured is not None:
        return max(measured, floor_s), bound if measured > floor_s else "floor"
    return max(compute_s, memory_s) + floor_s, bound if floor_s < max(compute_s, memory_s) else "floor"
