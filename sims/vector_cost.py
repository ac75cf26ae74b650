"""Every op of a graph costed at once: sims/calculator.py's per-op cost (op_cost, the reference that
predict_op uses) as numpy vectors over the graph's nodes, instead of one Python call per op.

A `Plan` holds, for one (tp, ep, dtype, mode) on one hardware spec, every op's FLOPs and bytes per
unit of each feature of the bound dims (sims/op_columns.py), the roofline rates, and the collectives'
link model; its arrays but the collectives and the expert bytes are built for every tp size at once, shared by
every ep > 1, and sliced (_every_tp_arrays); the weight bytes, rates and collectives, which do not depend on the
mode's work, are kept per the graph's columns, so a model's decode graph takes its prefill graph's. Costing bindings
is then one matrix-vector product per binding (one matmul for all of them, whatever their plans: cost_bindings;
cost_together hands it a sweep's uncosted bindings for api.simulate_many) and the roofline on (binding x node)
arrays; ops the efficiency table has measured curves for are looked up one by one as in op_cost.
tests/sims/test_sims_vector_cost.py pins plans and op_cost equal, tests/sims/test_sims_many.py bindings costed
together and alone.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from functools import cached_property
from types import SimpleNamespace

import numpy as np

from sims.cache import PerHardware
from sims.calculator import OP_CLASS, Context, measured_gemm_s, measured_op_s
from sims.comm import BUS_FACTOR, link_model
from sims.ir import ComputationalGraph, OpNode
from sims.op_columns import TOKENS, Columns, columns, every_tp_work, per_nodes
from sims.partition import stack
from sims.shared_prefix import cascade_cost, shares_prefix


@dataclass
class Plan:
    columns: Columns
    nodes: list[OpNode]
    work: np.ndarray  # (4 node x feature): FLOPs, bytes moved, input and output activation elements, stacked
    const_bytes: np.ndarray  # weights read per execution
    expert_bytes: np.ndarray  # grouped expert GEMMs: weight bytes if every expert were hit
    miss: np.ndarray  # 1 - top_k / experts (1 elsewhere): the chance a token leaves an expert untouched
    hit_tokens_per_token: float  # tokens choosing among one device's experts, per token of the replica
    peak: np.ndarray  # achieved FLOP/s
    bandwidth: np.ndarray  # achieved bytes/s
    floor_s: np.ndarray
    runs: np.ndarray  # False for collectives that do not run in this layout
    latency_s: np.ndarray  # collectives: latency + bus factor * bytes / bus bandwidth
    bus_factor: np.ndarray
    bus_bandwidth: np.ndarray
    measurable: tuple[int, ...]  # nodes the efficiency table may hold measured curves for

    def __post_init__(self):  # what every binding would otherwise look up again
        self.tokens = self.columns.column(TOKENS)
        # count_nonzero: any()'s answer (NaN counts) at a third of its cost (a sweep builds tens of plans)
        self.has_experts = bool(np.count_nonzero(self.expert_bytes))
        self.has_comm = bool(np.count_nonzero(self.columns.comm))
        self.comm_row = self.columns.comm[None]

    @cached_property
    def rows(self) -> SimpleNamespace:
        """The per-node arrays as (1 x node) rows, for bindings of this plan alone: numpy combines one binding's
        (1 x node) arrays with them at the speed of equal shapes (with a 1-d array, at that of a broadcast), and a
        (binding x node) array as fast. A sweep's bindings of several plans stack the plans' arrays instead."""
        return SimpleNamespace(**{name: getattr(self, name)[None] for name in PER_NODE})

    def cost(self, ctx: Context) -> "Costs":
        return self.cost_many([ctx])[0]

    def cost_many(self, contexts: list[Context]) -> list["Costs"]:
        """Every op's cost for each context's binding (all of this plan's tp, ep, dtype and mode): cost_bindings."""
        return cost_bindings([self] * len(contexts), contexts)

    def _measured(self, ctx: Context, b: int, flops: np.ndarray, nbytes: np.ndarray, time_s: np.ndarray) -> dict:
        """Binding b's ops that the efficiency table has measured curves for: their time, put into time_s[b]."""
        measured = {}
        for i in self.measurable:
            node, floor_s = self.nodes[i], float(self.floor_s[i])
            seconds = measured_gemm_s(node, ctx)
            if seconds is None:
                seconds = measured_op_s(node, ctx, float(flops[b, i]), float(nbytes[b, i]), floor_s)
            if seconds is not None:
                measured[i] = seconds
                time_s[b, i] = max(seconds, floor_s)
        return measured


PER_NODE = ("const_bytes", "expert_bytes", "miss", "peak", "bandwidth", "floor_s", "latency_s", "bus_factor",
            "bus_bandwidth")


def cost_bindings(plans: list[Plan], contexts: list[Context]) -> list[Costs]:
    """Every op's cost for each context's binding under its plan (plans of one graph), as rows of (binding x node)
    arrays, each row equal to its binding costed alone: the product is one matmul of each binding's plan matrix
    with its feature vector, which numpy runs as the same matrix-vector product per binding (BLAS gemv), and the
    rest is elementwise over bindings, with each plan's per-node arrays as its bindings' rows."""
    first, features = plans[0], _features(plans[0].columns, contexts)
    position = {id(first): first} if len(plans) == 1 else {id(plan): plan for plan in plans}
    distinct = list(position.values())
    if len(distinct) == 1:
        r, matrices = first.rows, first.work
    else:
        order = {key: i for i, key in enumerate(position)}
        which = np.array([order[id(plan)] for plan in plans])
        r = SimpleNamespace(**{name: _rows_of(distinct, name, which) for name in PER_NODE})
        matrices = stack([p.work for p in distinct])[which]
    work = (matrices @ features[:, :, None]).reshape(len(contexts), 4, -1)  # FLOPs, bytes, inputs, outputs
    flops, nbytes = work[:, 0], work[:, 1] + r.const_bytes
    if first.has_experts:  # E * (1 - (1 - k/E)^T) of E experts touched by T tokens
        hits = first.hit_tokens_per_token  # a graph's plans all have experts or none
        if len(distinct) > 1:
            hits = np.array([plan.hit_tokens_per_token for plan in plans])[:, None]
        nbytes += r.expert_bytes * (1.0 - r.miss ** (features[:, first.tokens, None] * hits))
    compute_s, memory_s = flops / r.peak, nbytes / r.bandwidth
    time_s = np.maximum(compute_s, memory_s) + r.floor_s
    if first.has_comm:  # collectives take the link model's time: 0 for those that do not run (no latency nor bus)
        time_s = np.where(first.comm_row, r.latency_s + r.bus_factor * nbytes / r.bus_bandwidth, time_s)
    costs = [Costs(plan, flops[b], nbytes[b], time_s[b], compute_s[b], memory_s[b],
                   plan._measured(ctx, b, flops, nbytes, time_s) if plan.measurable else {}, work[b, 2], work[b, 3])
             for b, (plan, ctx) in enumerate(zip(plans, contexts))]
    for plan, ctx, binding in zip(plans, contexts, costs):
        if shares_prefix(ctx):
            _cascade_attention(plan, ctx, binding)
    return costs


def _features(cols: Columns, contexts: list[Context]) -> np.ndarray:
    """(binding x feature) values of the contexts' dims, each dims object's computed once (a sweep's contexts of one
    dp and workload share theirs: api._Call.context) and its row repeated: the same values as computed per binding."""
    dims = {id(ctx.dims): ctx.dims for ctx in contexts}
    if len(dims) == len(contexts):
        return cols.values([ctx.dims for ctx in contexts])
    row = {key: i for i, key in enumerate(dims)}
    return cols.values(list(dims.values()))[[row[id(ctx.dims)] for ctx in contexts]]


def _rows_of(plans: list[Plan], name: str, which: np.ndarray) -> np.ndarray:
    """The per-node array `name` of each binding's plan as (binding x node) rows, or one (1 x node) row when every
    plan holds the same array (the rates and floors of one dtype and mode): elementwise, a broadcast row gives each
    binding the same numbers as its own row, without the gather."""
    arrays = [getattr(plan, name) for plan in plans]
    if all(array is arrays[0] for array in arrays):
        return arrays[0][None]
    return stack(arrays)[which]


def _cascade_attention(plan: Plan, ctx: Context, costs: "Costs") -> None:
    """A shared-prefix decode's attention nodes: their two kernel calls and merge (sims/shared_prefix.py) in
    place of the one call over the repeated cache, as op_cost's measured figures, with cascade_cost's bound (that of
    the call that takes longest: the one-call roofline left in compute_s and memory_s is of no kernel that runs)."""
    for i in np.flatnonzero(plan.columns.mask("attention")).tolist():
        cost = cascade_cost(plan.nodes[i], ctx)
        costs.flops[i], costs.bytes[i], costs.time_s[i] = cost.flops, cost.bytes, cost.time_s
        costs.measured[i], costs.fixed_bounds[i] = cost.time_s, cost.bound


@dataclass
class Costs:
    """One forward execution of every op on one device for one binding: op_cost's figures, and what
    step.py and memory.py derive from them per pipeline split (`derived`)."""

    plan: Plan
    flops: np.ndarray
    bytes: np.ndarray
    time_s: np.ndarray  # 0 where the op does not run
    compute_s: np.ndarray
    memory_s: np.ndarray
    measured: dict[int, float]
    inputs: np.ndarray  # input elements of one execution of every op on one device (memory.py: what training saves)
    outputs: np.ndarray  # output elements of one execution of every op on one device (memory.py)
    derived: dict = field(default_factory=dict)
    fixed_bounds: dict[int, str] = field(default_factory=dict)  # nodes costed outside the roofline: their bound

    @property
    def runs(self) -> np.ndarray:
        return self.plan.runs

    @cached_property
    def bounds(self) -> list[str]:
        """op_cost's bound of every node: comm, floor, compute or memory."""
        floors, bounds = self.plan.floor_s, []
        for i, comm in enumerate(self.plan.columns.comm):
            compute_s, memory_s = self.compute_s[i], self.memory_s[i]
            bound = "compute" if compute_s >= memory_s else "memory"
            if comm:
                bound = "comm"
            elif i in self.fixed_bounds:
                bound = self.fixed_bounds[i]
            elif i in self.measured:
                bound = bound if self.measured[i] > floors[i] else "floor"
            elif floors[i] >= max(compute_s, memory_s):
                bound = "floor"
            bounds.append(bound)
        return bounds


def costs_for(graph: ComputationalGraph, ctx: Context) -> Costs:
    """Every op's cost for the context's binding, shared by the layouts and workloads that bind the
    ops alike (same tp, ep, dims per micro-batch, dtype, mode): a sweep costs each size once."""
    if ctx.costs is None:
        ctx.costs = _CACHES.of(ctx.hw).get(graph, _costs_key(ctx), lambda: plan_for(graph, ctx).cost(ctx))
    return ctx.costs


def cost_together(graph: ComputationalGraph, contexts: list[Context]) -> None:
    """Hand each context (one hardware spec) its binding's costs: those costed before, and the others costed
    together in one cost_bindings call (api.simulate_many)."""
    cache, by_plan = _CACHES.of(contexts[0].hw), {}
    for ctx in contexts:
        key = _costs_key(ctx)
        ctx.costs = cache.peek(graph, key)
        if ctx.costs is None:
            plan_key = (ctx.tp, ctx.ep, ctx.workload.dtype, ctx.workload.mode)
            by_plan.setdefault(plan_key, {}).setdefault(key, []).append(ctx)
    plans, firsts = [], []
    for bindings in by_plan.values():
        plan = plan_for(graph, next(iter(bindings.values()))[0])
        for members in bindings.values():
            plans.append(plan)
            firsts.append(members[0])
    if not firsts:
        return
    for (key, members), costs in zip(itertools.chain.from_iterable(b.items() for b in by_plan.values()),
                                     cost_bindings(plans, firsts)):
        cache.get(graph, key, lambda: costs)
        for ctx in members:
            ctx.costs = costs


def _costs_key(ctx: Context) -> tuple:
    return ("costs", ctx.tp, ctx.ep, *ctx.dims.values(), ctx.workload.dtype, ctx.workload.mode)


def plan_for(graph: ComputationalGraph, ctx: Context) -> Plan:
    w = ctx.workload
    return _CACHES.of(ctx.hw).get(graph, (ctx.tp, ctx.ep, w.dtype, w.mode), lambda: _build_plan(graph, ctx))


_CACHES = PerHardware()  # plans and costs, per parsed hardware spec (and so per efficiency table)


def _build_plan(graph: ComputationalGraph, ctx: Context) -> Plan:
    cols, tp, ep, w = columns(graph), ctx.tp, ctx.ep, ctx.workload
    sizes = cols.sizes_with(tp)
    work, const_bytes, peak, bandwidth = _every_tp_of(graph, ctx, sizes)
    _, _, floor_s, measurable = _efficiency_of(graph, ctx)
    latency, factor, bus, runs = _collectives_of(graph, ctx)
    # experts split tp ways with ep = 1, else ep ways: each expert's weight bytes if every expert were hit
    expert_bytes = cols.attrs["expert_weights"] / (tp if ep == 1 else ep) * ctx.precision.gemm_weight_bytes
    row = sizes.index(tp)
    return Plan(cols, graph.nodes, work[row], const_bytes[row], expert_bytes, cols.attrs["miss"],
                1.0 if ep == 1 else ep / tp, peak, bandwidth, floor_s, runs, latency, factor, bus, measurable)


def _every_tp_of(graph: ComputationalGraph, ctx: Context, sizes: tuple[int, ...]) -> tuple[np.ndarray, ...]:
    """_every_tp_arrays per the graph's columns (op_columns.per_nodes) and what they depend on (tp sizes, whether
    ep > 1, decode or not, precision): a model's bf16 prefill and training graphs share them (training keeps bf16
    weights; the training graph takes rows), its decode graph those of its own mode."""
    key = ("every tp", sizes, ctx.ep > 1, ctx.workload.mode == "decode", ctx.precision)
    return per_nodes(_CACHES.of(ctx.hw), graph, key, lambda: _every_tp_arrays(graph, ctx, sizes), _every_tp_rows)


def _every_tp_rows(arrays: tuple[np.ndarray, ...], take: np.ndarray) -> tuple[np.ndarray, ...]:
    work, const_bytes, peak, bandwidth = arrays
    nodes = work.shape[1] // 4
    blocks = np.concatenate([take + block * nodes for block in range(4)])  # the 4 stacked outputs
    return work.take(blocks, axis=1), const_bytes.take(take, axis=1), peak[take], bandwidth[take]


def _efficiency_of(graph: ComputationalGraph, ctx: Context) -> tuple:
    """_efficiency per the graph's columns (a node's efficiency is its name's and op type's)."""
    return per_nodes(_CACHES.of(ctx.hw), graph, "efficiency", lambda: _efficiency(graph, ctx), _efficiency_rows)


def _efficiency_rows(efficiency: tuple, take: np.ndarray) -> tuple:
    compute, memory, floor_s, measurable = efficiency
    kept = set(measurable)
    return compute[take], memory[take], floor_s[take], tuple(i for i, row in enumerate(take.tolist()) if row in kept)


def _every_tp_arrays(graph: ComputationalGraph, ctx: Context, sizes: tuple[int, ...]) -> tuple[np.ndarray, ...]:
    """A plan's arrays for every tp in `sizes` at once (elementwise in tp: each row equals its tp alone), shared
    by every ep > 1: (tp x 4 node x feature) work, (tp x node) weight bytes, and the (node) rates; the weight bytes
    and rates do not depend on the mode, and a model's prefill and decode graphs (the same columns) share them."""
    flops, moved, io_in, io_out = every_tp_work(graph, sizes, ctx.ep > 1, ctx.workload.mode)
    key = ("rates", sizes, ctx.precision)
    rates = per_nodes(_CACHES.of(ctx.hw), graph, key, lambda: _rates(graph, ctx, sizes))
    return np.concatenate([flops, moved * ctx.precision.act_bytes, io_in, io_out], axis=1), *rates


def _rates(graph: ComputationalGraph, ctx: Context, sizes: tuple[int, ...]) -> tuple[np.ndarray, ...]:
    """(tp x node) weight bytes read per execution, and each node's achieved FLOP/s and bytes/s."""
    cols, p = columns(graph), ctx.precision
    a = cols.attrs
    compute, memory, _, _ = _efficiency_of(graph, ctx)
    weight_bytes = np.where(cols.mask("gemm"), p.gemm_weight_bytes, p.other_weight_bytes)
    split = 1 / cols.splits(sizes)
    const_bytes = (a["linear"] * a["weights"] * split * weight_bytes
                   + (a["norm"] > 0) * a["weights"] * p.other_weight_bytes)
    peak = np.where(a["gemm_weights"] > 0, p.gemm_peak, p.other_peak) * compute
    return const_bytes, peak, ctx.hw.memory_bytes_per_s * memory


def _efficiency(graph: ComputationalGraph, ctx: Context) -> tuple:
    """(compute, memory) efficiency and floor (s) of every op from the hardware's table, and the ops
    it may hold measured curves for."""
    classes = [ctx.hw.efficiency.for_op(n.name, OP_CLASS[n.op_type]) if not n.is_comm else None for n in graph.nodes]
    compute = np.array([c.compute if c else 1.0 for c in classes])
    memory = np.array([c.memory if c else 1.0 for c in classes])
    floor_s = np.array([c.floor_us * 1e-6 if c else 0.0 for c in classes])
    measurable = tuple(
        i for i, node in enumerate(graph.nodes)
        if (ctx.interpolator is not None and node.op_type == "gemm" and len(node.weights[0]) == 2)
        or (ctx.op_interpolator is not None and node.op_type != "gemm" and not node.is_comm)
    )
    return compute, memory, floor_s, measurable


def _collectives_of(graph: ComputationalGraph, ctx: Context) -> tuple[np.ndarray, ...]:
    """_collectives per the graph's columns (its nodes; a model's prefill and decode graphs share them), tp, ep and
    whether training (which leaves out the inference-only collectives)."""
    key = ("collectives of", ctx.tp, ctx.ep, ctx.workload.mode == "train")
    return per_nodes(_CACHES.of(ctx.hw), graph, key, lambda: _collectives(graph, ctx))


def _collectives(graph: ComputationalGraph, ctx: Context) -> tuple[np.ndarray, ...]:
    """(latency s, bus factor, bus bytes/s, runs) of every node: calculator.comm_cost's link model."""
    n, cache, training = len(graph.nodes), _CACHES.of(ctx.hw), ctx.workload.mode == "train"
    latency, factor, bus, runs = np.zeros(n), np.zeros(n), np.ones(n), np.ones(n, dtype=bool)
    for i, op_type, by_tp, when, inference_only, gap_us in cache.get(graph, "collectives", lambda: _comm_nodes(graph)):
        group = ctx.tp if by_tp else ctx.ep
        skipped = (when == "ep_is_1" and ctx.ep > 1) or (when == "ep_gt_1" and ctx.ep == 1)
        if group <= 1 or skipped or (inference_only and training):
            runs[i] = False
            continue
        latency[i], bus[i], factor[i] = cache.get(graph, ("link", op_type, group), lambda: (
            *link_model(op_type, group, group, ctx.hw), BUS_FACTOR[op_type](group)))
        if not training:  # the stack's idle GPU around a forward's collective, as calculator.comm_cost adds it
            latency[i] += gap_us * 1e-6
    return latency, factor, bus, runs


def _comm_nodes(graph: ComputationalGraph) -> list[tuple]:
    """(index, op type, whether its group is tp (else ep), when it runs, inference only, the stack's forward gap in
    us) of each collective."""
    return [(i, node.op_type, node.parallel.group == "tp", node.parallel.when, bool(node.attrs.get("inference_only")),
             node.attrs.get("forward_gap_us", 0.0)) for i, node in enumerate(graph.nodes) if node.is_comm]
