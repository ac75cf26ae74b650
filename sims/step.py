"""One step from the per-op costs: pipeline stages and schedule, the data-parallel gradient sync and
the optimizer update, shared across a sweep where layouts bind the ops alike.

Pipeline with per-micro-batch stage times t_i and m micro-batches:
  step = sum_i t_i + (m - 1) * max_i t_i     (= (m + pp - 1) * t for equal stages; bubble (pp-1)/(m+pp-1))
Training: backward = 2x forward for every op (collectives once more), recompute adds a forward of
every decoder-layer op. Nothing overlaps: compute, collectives and the gradient sync add up.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sims.cache import GraphCache, PerHardware
from sims.calculator import (
    ADAM_BYTES_PER_PARAM,
    GRAD_BYTES,
    TRAIN_BACKWARD_FACTOR,
    Context,
    StepEstimate,
    all_gather_s,
    all_reduce_s,
    bind_dims,
    reduce_scatter_s,
    send_recv_s,
)
from sims.hardware import HardwareSpec
from sims.ir import ComputationalGraph, OpNode
from sims.memory import local_params
from sims.op_columns import columns, work_coefficients
from sims.partition import expert_data_parallel, stage_counts, stage_split
from sims.vector_cost import Costs, costs_for
from sims.workload import Layout, Workload


def passes(node: OpNode, workload: Workload, num_layers: int) -> tuple[float, float]:
    """(time/FLOP multiplier per forward execution, model-FLOP multiplier): forward only for
    inference; forward + 2x backward for training (collectives repeat once in backward), plus a
    second forward of every decoder-layer op under activation recompute."""
    if workload.mode != "train":
        return 1.0, 1.0
    model = 1.0 + TRAIN_BACKWARD_FACTOR
    backward = 1.0 if node.is_comm else TRAIN_BACKWARD_FACTOR
    in_layer = 0 <= node.layers[0] < num_layers
    recompute = 1.0 if workload.recompute and in_layer else 0.0
    return 1.0 + backward + recompute, model


def estimate_step(
    graph: ComputationalGraph, hw: HardwareSpec, layout: Layout, workload: Workload, ctx: Context | None = None
) -> StepEstimate:
    ctx = ctx or Context.for_step(graph, hw, layout, workload)
    ops = _stage_ops(graph, ctx)
    p2p_s = _pipeline_p2p_s(graph, ctx)
    stage_s = [s + p2p_s for s in ops.stage_s]
    m = workload.microbatches
    pipeline_s = pipeline_time_s(stage_s, m)
    latency = pipeline_s
    extra = []
    if layout.pp > 1:
        extra.append(_row("pp_send_recv", "send_recv", m, 0.0, 0.0, p2p_s * m, "comm"))
        extra.append(_row("pipeline_bubble", "idle", 0, 0.0, 0.0, pipeline_s - m * stage_s[ops.slowest], "idle"))
    if workload.mode == "train":
        key = ("update", layout.tp, layout.dp, layout.ep, layout.pp, ops.slowest, workload.zero, workload.dtype)
        for row in _STEP_CACHES.of(hw).get(graph, key, lambda: _training_update_rows(graph, ctx, ops.slowest)):
            extra.append(dict(row))
            latency += row["time_s"]

    def rows() -> list[dict]:
        scaled = [_row(name, op_type, n * m, flops * m, nbytes * m, time_s * m, bound)
                  for name, op_type, n, flops, nbytes, time_s, bound in ops.slowest_rows(graph)]
        return scaled + extra

    return StepEstimate(latency, model_flops(graph, workload), rows, ops.slowest)


@dataclass(frozen=True)
class StageOps:
    """The ops of every pipeline stage for one micro-batch: time per stage (without send/recv), the
    slowest stage, and what its per-op rows are built from when asked (a sweep mostly is not)."""

    stage_s: list[float]
    slowest: int
    costs: Costs
    multipliers: np.ndarray
    counts: list[int]  # executions of each node on the slowest stage

    def slowest_rows(self, graph: ComputationalGraph) -> list[tuple]:
        """(name, op_type, executions, flops, bytes, time, bound) of the slowest stage's ops."""
        c, rows = self.costs, []
        per_op = zip(graph.nodes, c.flops.tolist(), c.bytes.tolist(), c.time_s.tolist(), self.multipliers.tolist(),
                     self.counts, c.runs, c.bounds)
        for node, flops, nbytes, time_s, mult, n, runs, bound in per_op:
            if runs and n:
                rows.append((node.name, node.op_type, n, flops * n * mult, nbytes * n * mult, time_s * n * mult, bound))
        return rows


def _stage_ops(graph: ComputationalGraph, ctx: Context) -> StageOps:
    """Every op costed at once per binding (sims/vector_cost.py), then summed per stage: a sweep over
    dp, pp, batch and micro-batches costs each op once per size."""
    costs, w, pp = costs_for(graph, ctx), ctx.workload, ctx.layout.pp
    key = ("stages", pp, w.recompute)
    stages = costs.derived.get(key)
    if stages is None:
        stages = costs.derived[key] = _cost_stages(graph, ctx, costs)
    return stages


def _cost_stages(graph: ComputationalGraph, ctx: Context, costs: Costs) -> StageOps:
    w, pp = ctx.workload, ctx.layout.pp
    multipliers, weights = _STEP_CACHES.of(ctx.hw).get(graph, ("passes", w.mode, w.recompute, pp), lambda: _stage_weights(
        graph, w, pp))
    stage_s = (weights @ costs.time_s).tolist()
    slowest = max(range(pp), key=stage_s.__getitem__)
    return StageOps(stage_s, slowest, costs, multipliers, stage_counts(graph, pp)[slowest])


def _stage_weights(graph: ComputationalGraph, workload: Workload, pp: int) -> tuple[np.ndarray, np.ndarray]:
    """(pass multiplier per node, executions x multiplier per stage and node)."""
    multipliers = np.array([passes(node, workload, graph.meta["num_layers"])[0] for node in graph.nodes])
    return multipliers, stage_split(graph, pp).matrix * multipliers


_STEP_CACHES = PerHardware()  # costed stages, per parsed hardware spec (and so per efficiency table)


def pipeline_time_s(stage_s: list[float], microbatches: int) -> float:
    """GPipe/1F1B step time: the first micro-batch crosses every stage, the other m-1 follow at
    the pace of the slowest. Equal stages t: (m + pp - 1) * t, a bubble of (pp-1)/(m+pp-1)."""
    return sum(stage_s) + (microbatches - 1) * max(stage_s)


def model_flops(graph: ComputationalGraph, workload: Workload) -> float:
    """FLOPs of one step of the whole model on the whole batch (layout-independent; replicated
    ops counted once; no recompute). The numerator of MFU."""
    key = (workload.mode, workload.batch, workload.seq_len, workload.context_len)
    return _MODEL_FLOPS.get(graph, key, lambda: _count_model_flops(graph, workload))


_MODEL_FLOPS = GraphCache(maxsize=4096)


def _count_model_flops(graph: ComputationalGraph, workload: Workload) -> float:
    whole = Workload(**{**workload.__dict__, "microbatches": 1})
    per_feature = _MODEL_FLOPS.get(graph, ("per_feature", workload.mode), lambda: _model_flops_per_feature(graph, whole))
    return float(per_feature @ columns(graph).values(bind_dims(graph, Layout(), whole)))


def _model_flops_per_feature(graph: ComputationalGraph, workload: Workload) -> np.ndarray:
    """Whole-model FLOPs per unit of each feature: every op's forward FLOPs at tp = ep = 1 (collectives
    have none) times its executions and passes."""
    flops = work_coefficients(graph, 1, 1, workload.mode)[0]
    executions = np.array([node.repeat * passes(node, workload, graph.meta["num_layers"])[1] for node in graph.nodes])
    return executions @ flops


def _pipeline_p2p_s(graph: ComputationalGraph, ctx: Context) -> float:
    if ctx.layout.pp == 1:
        return 0.0
    nbytes = ctx.dims["tokens"] * graph.meta["hidden_size"] * ctx.precision.act_bytes
    directions = 2 if ctx.workload.mode == "train" else 1  # activations forward, gradients back
    return directions * send_recv_s(nbytes, ctx.layout.devices, ctx.hw)


def _training_update_rows(graph: ComputationalGraph, ctx: Context, stage: int) -> list[dict]:
    """Data-parallel gradient sync and the Adam update of the parameters this device holds."""
    layout, workload, hw = ctx.layout, ctx.workload, ctx.hw
    dense, expert = local_params(graph, layout, stage)
    expert_dp = expert_data_parallel(layout)
    span = layout.tp * layout.dp  # replicas of a weight shard sit tp ranks apart
    sync_s = 0.0
    for params, group in ((dense, layout.dp), (expert, expert_dp)):
        grads = params * GRAD_BYTES
        if workload.zero:  # reduce-scatter grads, all-gather updated weights
            weights = params * ctx.precision.act_bytes
            sync_s += reduce_scatter_s(grads, group, hw, span) + all_gather_s(weights, group, hw, span)
        else:
            sync_s += all_reduce_s(grads, group, hw, span)
    updated = dense / layout.dp + expert / expert_dp if workload.zero else dense + expert
    optimizer = hw.efficiency.op_classes["optimizer"]
    opt_bytes = updated * ADAM_BYTES_PER_PARAM[workload.dtype]
    opt_s = opt_bytes / (hw.memory_bytes_per_s * optimizer.memory) + optimizer.floor_us * 1e-6
    rows = [_row("optimizer_step", "optimizer", 1, 10.0 * updated, opt_bytes, opt_s, "memory")]
    if sync_s:
        rows.insert(0, _row("dp_grad_sync", "all_reduce", 1, 0.0, (dense + expert) * GRAD_BYTES, sync_s, "comm"))
    return rows


def _row(name: str, op_type: str, count: float, flops: float, nbytes: float, time_s: float, bound: str) -> dict:
    return {
        "name": name,
        "op_type": op_type,
        "count": count,
        "flops": flops,
        "bytes": nbytes,
        "time_s": time_s,
        "bound": bound,
    }


