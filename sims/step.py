"""One step from the per-op costs: pipeline stages and schedule, the data-parallel gradient sync and
the optimizer update, shared across a sweep where layouts bind the ops alike.

Pipeline with per-micro-batch stage times t_i and m micro-batches:
  step = sum_i t_i + (m - 1) * max_i t_i     (= (m + pp - 1) * t for equal stages; bubble (pp-1)/(m+pp-1))
Training: an op's backward = its forward time x its measured backward/forward ratio when the efficiency
table has backward measurements (sims/calibration/backward.py), else 2x; collectives run once more;
recompute adds a forward of every decoder-layer op (not of the op types the layers keep). Per micro-batch
also the loss over the vocabulary (forward + backward, on the last stage) and the weight gradients'
accumulation into fp32 main grads (every stage), a scanned stack's copies and fsdp's weight gathers and
gradient scatters (sims/scan_update.py; these rows per stage: sims/train_rows.py); per step the dp gradient sync and the optimizer (Adam +
clipping). Inference on fsdp-sharded weights (an FSDP rollout) gathers them every forward pass
(sims/sharded_forward.py); a scanned forward pass slices each layer's weights out of the stack (sims/scan_forward.py). Nothing overlaps. An eager stack with a measured host_dispatch (sims/stacks.yaml) makes a
training micro-batch last at least as long as its host takes to launch it.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial

import numpy as np

from sims.cache import GraphCache, PerHardware
from sims.calculator import (
    OP_CLASS,
    Context,
    StepEstimate,
    all_gather_s,
    all_reduce_s,
    bind_dims,
    reduce_scatter_s,
    send_recv_s,
)
from sims.calibration.backward import BackwardRatios
from sims.train_work import GRAD_BYTES, TRAIN_BACKWARD_FACTOR, optimizer_bytes_per_param
from sims.hardware import HardwareSpec
from sims.ir import ComputationalGraph, OpNode
from sims.memory import local_params
from sims.op_columns import columns, per_nodes, work_coefficients
from sims.partition import expert_data_parallel, per_stage, stage_split
from sims.scan_forward import head_cast_rows, scanned_forward_rows
from sims.sharded_forward import sharded_forward_rows
from sims.train_rows import extra_op_s, log_prob_rows, train_stage_rows
from sims.vector_cost import Costs, costs_for
from sims.workload import Layout, Workload


def passes(node: OpNode, workload: Workload, num_layers: int) -> tuple[float, float]:
    """(time/FLOP multiplier per forward execution, model-FLOP multiplier): forward only for
    inference; forward + 2x backward for training (collectives repeat once in backward), plus a
    second forward of every decoder-layer op under activation recompute, but for the op types the
    layers keep (workload.recompute_keeps)."""
    if workload.mode != "train":
        return 1.0, 1.0
    model = 1.0 + TRAIN_BACKWARD_FACTOR
    backward = 1.0 if node.is_comm else TRAIN_BACKWARD_FACTOR
    in_layer = 0 <= node.layers[0] < num_layers
    recompute = 1.0 if workload.recompute and in_layer and node.op_type not in workload.recompute_keeps else 0.0
    return 1.0 + backward + recompute, model


def pass_multipliers(graph: ComputationalGraph, workload: Workload) -> np.ndarray:
    """passes(node, ...)[0] of every node at once (whole numbers, so the same floats)."""
    if workload.mode != "train":
        return np.ones(len(graph.nodes))
    cols = columns(graph)
    recompute = workload.recompute & (cols.attrs["in_layer"] > 0)
    for kept in workload.recompute_keeps:
        recompute = recompute & ~cols.mask(kept)
    return 1.0 + np.where(cols.comm, 1.0, TRAIN_BACKWARD_FACTOR) + recompute


def estimate_step(
    graph: ComputationalGraph, hw: HardwareSpec, layout: Layout, workload: Workload, ctx: Context | None = None
) -> StepEstimate:
    ctx = ctx or Context.for_step(graph, hw, layout, workload)
    return step_of(graph, ctx, _stage_ops(graph, ctx), _pipeline_p2p_s(graph, ctx), model_flops(graph, workload))


def step_of(graph: ComputationalGraph, ctx: Context, ops: "StageOps", p2p_s: float,
            whole_flops: float) -> StepEstimate:
    """The step from its stage ops, pipeline send/recv time and model FLOPs (estimate_step; sims/finish.py finds
    those once per key that configurations of a sweep share)."""
    m = ctx.workload.microbatches
    update = update_rows(graph, ctx, ops.slowest) if ctx.workload.mode == "train" else ()
    latency = pipeline_time_s([s + p2p_s for s in ops.stage_s], m)
    for row in update:
        latency += row["time_s"]
    return StepEstimate(latency, whole_flops, partial(step_rows, graph, ctx.layout.pp, m, ops, p2p_s, update),
                        ops.slowest)


def update_rows(graph: ComputationalGraph, ctx: Context, slowest: int) -> list[dict] | tuple:
    """A training step's data-parallel gradient sync and optimizer rows (none outside training), kept per key."""
    layout, workload = ctx.layout, ctx.workload
    if workload.mode != "train":
        return ()
    key = ("update", layout.tp, layout.dp, layout.ep, layout.pp, slowest, workload.zero, workload.shard_weights,
           workload.dtype)
    return _STEP_CACHES.of(ctx.hw).get(graph, key, lambda: _training_update_rows(graph, ctx, slowest))


def step_rows(graph: ComputationalGraph, pp: int, m: int, ops: "StageOps", p2p_s: float, update) -> list[dict]:
    """The step's per-op rows, built when asked (a sweep mostly wants the latency alone)."""
    stage_s = [s + p2p_s for s in ops.stage_s]
    pipeline_s = pipeline_time_s(stage_s, m)
    scaled = [_row(name, op_type, n * m, flops * m, nbytes * m, time_s * m, bound)
              for name, op_type, n, flops, nbytes, time_s, bound in ops.slowest_rows(graph)]
    if pp > 1:
        scaled.append(_row("pp_send_recv", "send_recv", m, 0.0, 0.0, p2p_s * m, "comm"))
        scaled.append(_row("pipeline_bubble", "idle", 0, 0.0, 0.0, pipeline_s - m * stage_s[ops.slowest], "idle"))
    return scaled + [dict(row) for row in update]


@dataclass
class StageOps:
    """The ops of every pipeline stage for one micro-batch: time per stage (without send/recv), the
    slowest stage, and what its per-op rows are built from when asked (a sweep mostly is not)."""

    stage_s: list[float]
    slowest: int
    costs: Costs
    passes: np.ndarray  # forward executions per node (FLOPs and bytes): forward, backward as 2x, recompute
    time_multipliers: np.ndarray  # the same for time, with measured backward/forward ratios where the table has them
    counts: list[int]  # executions of each node on the slowest stage
    train_rows: tuple[tuple, ...] = ()  # the slowest stage's loss and grad accumulation, per micro-batch

    def slowest_rows(self, graph: ComputationalGraph) -> list[tuple]:
        """(name, op_type, executions, flops, bytes, time, bound) of the slowest stage's ops."""
        c, rows = self.costs, []
        per_op = zip(graph.nodes, c.flops.tolist(), c.bytes.tolist(), c.time_s.tolist(), self.passes.tolist(),
                     self.time_multipliers.tolist(), self.counts, c.runs, c.bounds)
        for node, flops, nbytes, time_s, passes, timed, n, runs, bound in per_op:
            if runs and n:
                rows.append((node.name, node.op_type, n, flops * n * passes, nbytes * n * passes, time_s * n * timed, bound))
        return rows + list(self.train_rows)


def _stage_ops(graph: ComputationalGraph, ctx: Context) -> StageOps:
    """Every op costed at once per binding (sims/vector_cost.py), then summed per stage: a sweep over
    dp, pp, batch and micro-batches costs each op once per size."""
    costs, key = costs_for(graph, ctx), _stages_key(ctx)
    stages = costs.derived.get(key)
    if stages is None:
        stages = costs.derived[key] = _cost_stages(graph, [ctx], [costs])[0]
    return stages


def _stages_key(ctx: Context) -> tuple:
    w = ctx.workload
    shards = ctx.layout.dp if w.shard_weights else 0  # fsdp's rows vary with dp
    return ("stages", ctx.layout.pp, w.recompute, w.recompute_keeps, shards, w.scanned, w.loss_len, w.param_dtype,
            w.logits_chunk if w.param_dtype else None)  # the head's casts are per chunk


def sum_stages_together(graph: ComputationalGraph, contexts: list[Context]) -> None:
    """Sum the stages of many costed contexts' bindings (vector_cost.cost_together) not summed yet, those of one
    stage key together whatever their plans (api.simulate_many); _stage_ops then finds each."""
    groups: dict[tuple, dict[int, Context]] = {}
    for ctx in contexts:
        key = _stages_key(ctx)
        if key not in ctx.costs.derived:
            groups.setdefault(key, {}).setdefault(id(ctx.costs), ctx)
    for key, members in groups.items():
        members = list(members.values())
        for ctx, stages in zip(members, _cost_stages(graph, members, [ctx.costs for ctx in members])):
            ctx.costs.derived[key] = stages


def _cost_stages(graph: ComputationalGraph, contexts: list[Context], costs: list[Costs]) -> list[StageOps]:
    """StageOps of bindings of one stage key (pp, recompute, fsdp shards; any plans): the stage sums of all of them
    in one matmul (partition.per_stage), the rest per binding."""
    ctx = contexts[0]
    w, pp, cache = ctx.workload, ctx.layout.pp, _STEP_CACHES.of(ctx.hw)
    passes, weights, counts, heads = stage_weights_of(graph, w, pp, cache)
    ratios = backward_ratios(graph, ctx.hw) if w.mode == "train" else None
    if ratios is None:
        multipliers, split_weights = [passes] * len(costs), [weights] * len(costs)
        stage_s = per_stage(weights, [c.time_s for c in costs])
    else:  # measured backward/forward ratios in place of the flat factor (time only)
        multipliers = [passes + np.array([0.0 if node.is_comm else ratios.ratio(node.name, OP_CLASS[node.op_type], t)
                                          - TRAIN_BACKWARD_FACTOR for node, t in zip(graph.nodes, c.time_s.tolist())])
                       for c in costs]
        split_weights = [stage_split(graph, pp).matrix * m for m in multipliers]
        stage_s = [(split @ c.time_s).tolist() for split, c in zip(split_weights, costs)]
    rows = [[()] * pp] * len(costs)
    if w.mode == "train":
        rows, stage_s = train_stage_rows(graph, contexts, costs, ratios, heads, stage_s, split_weights)
    elif w.shard_weights or w.scanned or w.loss_len:  # an FSDP forward gathers the weights first, a scanned one
        # slices them, a log-prob pass takes log-probs of its positions' logits (converting a wider stored head)
        rows = [[gathers + slices + probs + casts for gathers, slices, probs, casts in zip(
            sharded_forward_rows(graph, one), scanned_forward_rows(graph, one), log_prob_rows(graph, one),
            head_cast_rows(graph, one))] for one in contexts]
        stage_s = [[t + sum(row[5] for row in in_stage) for t, in_stage in zip(times, stage_rows)]
                   for times, stage_rows in zip(stage_s, rows)]
    ops = []
    for times, c, multiplier, in_stages in zip(stage_s, costs, multipliers, rows):
        slowest = max(range(pp), key=times.__getitem__)
        ops.append(StageOps(times, slowest, c, passes, multiplier, counts[slowest], in_stages[slowest]))
    return ops


def backward_ratios(graph: ComputationalGraph, hw: HardwareSpec) -> BackwardRatios | None:
    """The efficiency table's backward/forward ratios; None without backward measurements (2x)."""
    measurements = hw.efficiency.backward_measurements
    if not measurements:
        return None
    return _STEP_CACHES.of(hw).get(graph, "backward_ratios", lambda: BackwardRatios(measurements, TRAIN_BACKWARD_FACTOR))


def stage_weights_of(graph: ComputationalGraph, workload: Workload, pp: int, cache: GraphCache) -> tuple:
    """_stage_weights kept in `cache` per the graph's columns (its nodes: a model's prefill and decode graphs share
    them, every inference mode the same passes), whether training, recompute and pp."""
    key = ("passes", workload.mode == "train", workload.recompute, workload.recompute_keeps, pp)
    return per_nodes(cache, graph, key, lambda: _stage_weights(graph, workload, pp))


def _stage_weights(graph: ComputationalGraph, workload: Workload, pp: int) -> tuple:
    """(pass multiplier per node, executions x multiplier per stage and node, executions per stage
    and node, whether each stage runs lm_head): what a split needs for every binding, looked up once."""
    multipliers = pass_multipliers(graph, workload)
    split, head = stage_split(graph, pp), columns(graph).index.get("lm_head")
    heads = [head is not None and bool(counts[head]) for counts in split.counts]
    return multipliers, split.matrix * multipliers, split.counts, heads


_STEP_CACHES = PerHardware()  # costed stages, per parsed hardware spec (and so per efficiency table)


def pipeline_time_s(stage_s: list[float], microbatches: int) -> float:
    """GPipe/1F1B step time: the first micro-batch crosses every stage, the other m-1 follow at
    the pace of the slowest. Equal stages t: (m + pp - 1) * t, a bubble of (pp-1)/(m+pp-1)."""
    return sum(stage_s) + (microbatches - 1) * max(stage_s)


def model_flops(graph: ComputationalGraph, workload: Workload) -> float:
    """FLOPs of one step of the whole model on the whole batch (layout-independent; replicated
    ops counted once; no recompute). The numerator of MFU."""
    key = (workload.mode, workload.batch, workload.seq_len, workload.context_len, workload.loss_len)
    return _MODEL_FLOPS.get(graph, key, lambda: _count_model_flops(graph, workload))


_MODEL_FLOPS = GraphCache(maxsize=4096)


def _count_model_flops(graph: ComputationalGraph, workload: Workload) -> float:
    whole = Workload(**{**workload.__dict__, "microbatches": 1})
    per_feature = per_nodes(_MODEL_FLOPS, graph, ("per_feature", workload.mode == "train"),  # inference: one pass
                            lambda: _model_flops_per_feature(graph, whole))
    return float(per_feature @ columns(graph).values([bind_dims(graph, Layout(), whole)])[0])


def _model_flops_per_feature(graph: ComputationalGraph, workload: Workload) -> np.ndarray:
    """Whole-model FLOPs per unit of each feature: every op's forward FLOPs at tp = ep = 1 (collectives
    have none) times its executions and passes."""
    flops = work_coefficients(graph, 1, 1, workload.mode)[0]
    executions = np.array([node.repeat * passes(node, workload, graph.meta["num_layers"])[1] for node in graph.nodes])
    return executions @ flops


def _pipeline_p2p_s(graph: ComputationalGraph, ctx: Context) -> float:
    if ctx.layout.pp == 1:
        return 0.0
    key = ("p2p", ctx.dims["tokens"], ctx.precision.act_bytes, ctx.layout.devices, ctx.workload.mode)
    return _STEP_CACHES.of(ctx.hw).get(graph, key, lambda: _count_pipeline_p2p_s(graph, ctx))


def _count_pipeline_p2p_s(graph: ComputationalGraph, ctx: Context) -> float:
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
        # none for a dense model's expert part; fsdp's are every micro-batch's (sims/scan_update.py)
        if not params or workload.shard_weights:
            continue
        grads = params * GRAD_BYTES
        if workload.zero:  # reduce-scatter grads, all-gather updated weights
            weights = params * ctx.precision.act_bytes
            sync_s += reduce_scatter_s(grads, group, hw, span) + all_gather_s(weights, group, hw, span)
        else:
            sync_s += all_reduce_s(grads, group, hw, span)
    updated = dense / layout.dp + expert / expert_dp if workload.zero else dense + expert
    opt_bytes = updated * optimizer_bytes_per_param(workload.dtype)
    opt_s, bound = extra_op_s("optimizer_step", "optimizer", 10.0 * updated, opt_bytes, ctx)
    rows = [_row("optimizer_step", "optimizer", 1, 10.0 * updated, opt_bytes, opt_s, bound)]
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


