"""Every op of a graph costed at once: sims/calculator.py's per-op formulas as numpy vectors over
the graph's nodes (calculator.op_cost stays the per-op reference, which predict_op uses).

For fixed tp, ep, dtype and mode, an op's FLOPs, bytes and activation elements are linear in a few
products of the bound dims, its "features": the monomials its shapes use (tokens, routed_tokens,
batch*seq_len, ...), attention's causal query-key pairs, and for grouped expert GEMMs the fraction
of experts the tokens hit. A `Plan` holds those coefficients as (node x feature) matrices, built once
per (tp, ep, dtype, mode) from per-graph `Columns`; costing a binding of the dims is then two
matrix-vector products and the roofline on vectors instead of one Python call per op.
tests/sims/test_sims_vector_cost.py pins Plan and op_cost equal.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np

from sims.cache import GraphCache
from sims.calculator import OP_CLASS, Context, measured_gemm_s, measured_op_s
from sims.comm import BUS_FACTOR, link_model
from sims.ir import ComputationalGraph, OpNode
from sims.partition import _split_shape, weight_numel

PAIRS = ("pairs",)  # batch * causal query-key pairs per sequence (attention)
ATTENTION_FEATURES = (("batch", "seq_len"), ("batch", "kv_len"), PAIRS)


def _vector(values) -> np.ndarray:
    return np.array(values, dtype=float)


@dataclass(frozen=True)
class Columns:
    """What the formulas read from each node, per graph: shapes as (node x feature) element counts
    (first input, the other inputs, first output), masks per op type and per-node constants."""

    features: tuple[tuple[str, ...], ...]
    first_in: np.ndarray
    other_in: np.ndarray
    out: np.ndarray
    op_type: np.ndarray  # of str
    comm: np.ndarray  # bool
    attrs: dict[str, np.ndarray]

    def mask(self, *op_types: str) -> np.ndarray:
        return np.isin(self.op_type, op_types)

    def column(self, feature: tuple[str, ...]) -> int:
        return self.features.index(feature)

    def values(self, dims: dict[str, float]) -> np.ndarray:
        """The features' values for one binding of the dims."""
        values = []
        for feature in self.features:
            if feature == PAIRS:
                q, kv = dims["seq_len"], dims["kv_len"]
                values.append(dims["batch"] * (q * kv - q * (q - 1) / 2))
            else:
                value = 1.0
                for symbol in feature:
                    value *= dims[symbol]
                values.append(value)
        return _vector(values)

    def splits(self, tp: int) -> np.ndarray:
        """partition.tp_split for every node."""
        a = self.attrs
        plain = np.minimum(tp, a["max_split"])
        limited = a["width"] / ((a["width"] - a["limited_width"]) / tp + a["limited_width"] / np.minimum(tp, a["limited_split"]))
        return np.where(a["replicated"], 1.0, np.where(a["limited_width"] > 0, limited, plain))


def columns(graph: ComputationalGraph) -> Columns:
    return _COLUMNS.get(graph, None, lambda: _build_columns(graph))


_COLUMNS = GraphCache(maxsize=256)

NODE_ATTRS = ("k", "n", "experts", "top_k", "weights", "max_split", "limited_width", "limited_split", "width",
              "replicated", "in_split", "out_split", "io_in_split", "io_out_split", "passes", "per_element",
              "sequence_parallel", "heads", "kv_heads", "qk_dim", "v_dim", "kv_dim", "group_is_tp", "when_ep_is_1",
              "when_ep_gt_1", "inference_only", "gemm_weights")


def _node_attrs(node: OpNode) -> dict[str, float]:
    a, mode, op = node.attrs, node.parallel.tp_mode, node.op_type
    weights = node.weights[0] if node.weights else (0, 0)
    expert_shape = weights if op == "moe_gemm" else (1, 0, 0)
    return {
        "k": weights[-2] if len(weights) > 1 else 0,
        "n": expert_shape[2],
        "experts": expert_shape[0],
        "top_k": a.get("top_k", 0),
        "weights": weight_numel(node.weights),
        "max_split": a.get("max_split", np.inf),
        "limited_width": a.get("limited_width", 0),
        "limited_split": a.get("limited_split", 1),
        "width": weights[-1] if a.get("limited_width") else 1,
        "replicated": mode == "replicated",
        "in_split": mode in ("row", "heads"),
        "out_split": mode in ("column", "heads"),
        "io_in_split": mode in ("row", "heads", "sharded"),
        "io_out_split": mode in ("column", "heads", "sharded"),
        "passes": 4 if a.get("fused_residual") else 2,
        "per_element": a.get("flops_per_element", 1),
        "sequence_parallel": bool(a.get("sequence_parallel_with_ep")),
        "heads": a.get("heads", 0),
        "kv_heads": a.get("kv_heads", 1),
        "qk_dim": a.get("qk_dim", 0),
        "v_dim": a.get("v_dim", 0),
        "kv_dim": a.get("kv_dim", 0),
        "group_is_tp": node.parallel.group == "tp",
        "when_ep_is_1": node.parallel.when == "ep_is_1",
        "when_ep_gt_1": node.parallel.when == "ep_gt_1",
        "inference_only": bool(a.get("inference_only")),
        "gemm_weights": op in ("gemm", "moe_gemm"),
    }


def _build_columns(graph: ComputationalGraph) -> Columns:
    nodes = graph.nodes
    monomials = {_split_shape(shape)[1] for node in nodes for shape in (*node.inputs, node.outputs[0])}
    features = tuple(dict.fromkeys((*sorted(monomials), *ATTENTION_FEATURES, ("tokens",))))
    index = {feature: i for i, feature in enumerate(features)}
    first_in, other_in, out = (np.zeros((len(nodes), len(features))) for _ in range(3))
    for row, node in enumerate(nodes):
        for target, shapes in ((first_in, node.inputs[:1]), (other_in, node.inputs[1:]), (out, node.outputs[:1])):
            for shape in shapes:
                constant, symbols = _split_shape(shape)
                target[row, index[symbols]] += constant
    per_node = [_node_attrs(node) for node in nodes]
    attrs = {name: _vector([values[name] for values in per_node]) for name in NODE_ATTRS}
    op_type = np.array([node.op_type for node in nodes])
    comm = np.array([node.is_comm for node in nodes])
    return Columns(features, first_in, other_in, out, op_type, comm, attrs)


@dataclass(frozen=True)
class Plan:
    """The coefficients of every op for one (tp, ep, dtype, mode) on one hardware spec: FLOPs, bytes
    and (input, output) activation elements per unit of each feature, the roofline rates, and the
    collectives' link model. `cost(ctx)` evaluates it for one binding of the dims."""

    columns: Columns
    nodes: list[OpNode]
    flops: np.ndarray  # (node x feature)
    bytes: np.ndarray
    const_bytes: np.ndarray  # weights read per execution
    expert_bytes: np.ndarray  # grouped expert GEMMs: weight bytes when every expert is hit
    miss: np.ndarray  # 1 - top_k / experts (1 elsewhere): a token leaves an expert untouched
    hit_tokens_per_token: float  # tokens that pick experts from one device's set, per replica token
    peak: np.ndarray  # FLOP/s and bytes/s achieved, kernel floor (s)
    bandwidth: np.ndarray
    floor_s: np.ndarray
    runs: np.ndarray  # False for collectives that do not run in this layout
    latency_s: np.ndarray  # collectives: latency, bus factor and bus bytes/s
    bus_factor: np.ndarray
    bus_bandwidth: np.ndarray
    io_in: np.ndarray  # (node x feature) activation elements, for the memory estimate
    io_out: np.ndarray
    measurable: tuple[int, ...]  # nodes the efficiency table may hold measured curves for

    def cost(self, ctx: Context) -> "Costs":
        features = self.columns.values(ctx.dims)
        flops = self.flops @ features
        nbytes = self.bytes @ features + self.const_bytes
        if self.expert_bytes.any():
            hit = 1.0 - self.miss ** (ctx.dims["tokens"] * self.hit_tokens_per_token)
            nbytes = nbytes + self.expert_bytes * hit
        compute_s, memory_s = flops / self.peak, nbytes / self.bandwidth
        time_s = np.maximum(compute_s, memory_s) + self.floor_s
        comm = self.columns.comm
        time_s = np.where(comm, self.latency_s + self.bus_factor * nbytes / self.bus_bandwidth, time_s)
        time_s = np.where(self.runs, time_s, 0.0)
        measured = {}
        for i in self.measurable:
            node, floor_s = self.nodes[i], float(self.floor_s[i])
            seconds = measured_gemm_s(node, ctx)
            if seconds is None:
                seconds = measured_op_s(node, ctx, float(flops[i]), float(nbytes[i]), floor_s)
            if seconds is not None:
                measured[i] = seconds
                time_s[i] = max(seconds, floor_s)
        return Costs(self, features, flops, nbytes, time_s, compute_s, memory_s, measured)


@dataclass(frozen=True)
class Costs:
    """One forward execution of every op on one device for one binding (op_cost's figures)."""

    plan: Plan
    features: np.ndarray
    flops: np.ndarray
    bytes: np.ndarray
    time_s: np.ndarray  # 0 where the op does not run
    compute_s: np.ndarray
    memory_s: np.ndarray
    measured: dict[int, float]

    @property
    def runs(self) -> np.ndarray:
        return self.plan.runs

    @cached_property
    def bounds(self) -> list[str]:
        """op_cost's bound per node: comm, floor, compute or memory."""
        plan, bounds = self.plan, []
        roof = np.maximum(self.compute_s, self.memory_s)
        for i, comm in enumerate(plan.columns.comm):
            bound = "compute" if self.compute_s[i] >= self.memory_s[i] else "memory"
            if comm:
                bound = "comm"
            elif i in self.measured:
                bound = bound if self.measured[i] > plan.floor_s[i] else "floor"
            elif plan.floor_s[i] >= roof[i]:
                bound = "floor"
            bounds.append(bound)
        return bounds

    @cached_property
    def io_elements(self) -> tuple[np.ndarray, np.ndarray]:
        """(input, output) elements of one execution of every op on one device (sims/memory.py)."""
        return self.plan.io_in @ self.features, self.plan.io_out @ self.features


def plan_for(graph: ComputationalGraph, ctx: Context) -> Plan:
    """The plan of this graph for the context's tp, ep, dtype and mode, shared across a sweep."""
    w = ctx.workload
    cache = _plan_cache(ctx.hw)
    return cache.get(graph, (ctx.tp, ctx.ep, w.dtype, w.mode), lambda: _build_plan(graph, ctx, cache))


_PLAN_CACHES: dict[int, tuple[object, GraphCache]] = {}


def _plan_cache(hw) -> GraphCache:
    """One cache of plans and costs per parsed hardware spec (and so per efficiency table)."""
    cached = _PLAN_CACHES.get(id(hw))
    if cached is None or cached[0] is not hw:
        cached = _PLAN_CACHES[id(hw)] = (hw, GraphCache(maxsize=8192))
    return cached[1]


def _efficiency(graph: ComputationalGraph, hw) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(compute, memory) efficiency and floor (s) of every op from the hardware's table."""
    classes = [hw.efficiency.for_op(n.name, OP_CLASS[n.op_type]) if not n.is_comm else None for n in graph.nodes]
    compute = _vector([c.compute if c else 1.0 for c in classes])
    memory = _vector([c.memory if c else 1.0 for c in classes])
    return compute, memory, _vector([c.floor_us * 1e-6 if c else 0.0 for c in classes])


def _build_plan(graph: ComputationalGraph, ctx: Context, cache: GraphCache) -> Plan:
    cols, a, p, tp, ep = columns(graph), columns(graph).attrs, ctx.precision, ctx.tp, ctx.ep
    compute_eff, memory_eff, floor_s = cache.get(graph, "efficiency", lambda: _efficiency(graph, ctx.hw))
    flops, nbytes, io_in, io_out = _work_coefficients(cols, tp, ep, p.act_bytes, ctx.workload.mode)
    linear, norm, moe = cols.mask("gemm", "router"), cols.mask("norm"), cols.mask("moe_gemm")
    split = cols.splits(tp)
    weight_bytes = np.where(cols.mask("gemm"), p.gemm_weight_bytes, p.other_weight_bytes)
    const_bytes = np.where(linear, a["weights"] / split * weight_bytes, np.where(norm, a["weights"] * p.other_weight_bytes, 0.0))
    experts_here = a["experts"] / tp if ep == 1 else a["experts"] / ep
    expert_bytes = np.where(moe, experts_here * a["k"] * a["n"] * p.gemm_weight_bytes, 0.0)
    miss = np.where(moe, 1.0 - a["top_k"] / a["experts"], 1.0)
    peak = np.where(a["gemm_weights"] > 0, p.gemm_peak, p.other_peak) * compute_eff
    bandwidth = ctx.hw.memory_bytes_per_s * memory_eff
    latency, factor, bus, runs = _collectives(graph, cols, ctx)
    measurable = tuple(
        i for i, node in enumerate(graph.nodes)
        if (ctx.interpolator is not None and node.op_type == "gemm" and len(node.weights[0]) == 2)
        or (ctx.op_interpolator is not None and node.op_type != "gemm" and not node.is_comm)
    )
    return Plan(cols, graph.nodes, flops, nbytes, const_bytes, expert_bytes, miss, 1.0 if ep == 1 else ep / tp,
                peak, bandwidth, floor_s, runs, latency, factor, bus, io_in, io_out, measurable)


def _work_coefficients(cols: Columns, tp: int, ep: int, act: int, mode: str) -> tuple[np.ndarray, ...]:
    """(flops, bytes, input elements, output elements) per unit of each feature, for every node:
    the formulas of calculator.py's *_work functions and memory.py's activation count."""
    a, mask = cols.attrs, cols.mask
    linear, norm, elementwise, moe = mask("gemm", "router"), mask("norm"), mask("elementwise"), mask("moe_gemm")
    attention, embedding, all_to_all = mask("attention"), mask("embedding"), mask("all_to_all")
    split = cols.splits(tp)
    in_split, out_split = np.where(a["in_split"] > 0, split, 1.0), np.where(a["out_split"] > 0, split, 1.0)
    shuffle_split = np.where((a["sequence_parallel"] > 0) & (ep > 1), tp, split)  # elementwise ops
    on_first = (np.where(linear, act / in_split, 0.0) + np.where(norm, a["passes"] * act / split, 0.0)
                + np.where(elementwise, act / shuffle_split, 0.0) + np.where(cols.comm, act / np.where(all_to_all, tp, 1), 0.0))
    on_out = (np.where(linear, act / out_split, 0.0) + np.where(elementwise, act / shuffle_split, 0.0)
              + np.where(embedding, (1 / tp + 1) * act, 0.0))
    nbytes = on_first[:, None] * cols.first_in + np.where(elementwise, act / shuffle_split, 0.0)[:, None] * cols.other_in
    nbytes += on_out[:, None] * cols.out
    flops = (np.where(linear, 2.0 * a["k"] / split, 0.0) + np.where(elementwise, a["per_element"] / shuffle_split, 0.0))[:, None] * cols.out
    flops += np.where(norm, 5.0 / split, 0.0)[:, None] * cols.first_in
    tokens, pairs = cols.column(("tokens",)), cols.column(PAIRS)
    flops[:, tokens] += np.where(moe, 2.0 * a["top_k"] * a["k"] * a["n"] / tp, 0.0)
    nbytes[:, tokens] += np.where(moe, a["top_k"] * (a["k"] + a["n"]) * act / tp, 0.0)
    heads = a["heads"] / tp
    flops[:, pairs] += np.where(attention, 2.0 * heads * (a["qk_dim"] + a["v_dim"]), 0.0)
    query, keys = cols.column(("batch", "seq_len")), cols.column(("batch", "kv_len"))
    kv_heads = a["kv_heads"] / np.minimum(tp, a["kv_heads"])
    nbytes[:, query] += np.where(attention, heads * (a["qk_dim"] + a["v_dim"]) * act, 0.0)
    nbytes[:, keys] += np.where(attention, kv_heads * a["kv_dim"] * act, 0.0)
    # Activations: attention's input is q (+ fp32 log-sum-exp) and, outside decode, k and v.
    plain = ~(moe | attention | embedding | cols.comm)
    io_in = np.where(moe, 1 / tp, 0.0) + np.where(plain, 1 / np.where(a["io_in_split"] > 0, split, 1.0), 0.0)
    io_out = (np.where(moe, 1 / tp, 0.0) + np.where(plain, 1 / np.where(a["io_out_split"] > 0, split, 1.0), 0.0)
              + np.where(embedding, 1.0, 0.0))
    io_in, io_out = io_in[:, None] * cols.first_in, io_out[:, None] * cols.out
    io_in[:, query] += np.where(attention, heads * (a["qk_dim"] + 2), 0.0)
    io_out[:, query] += np.where(attention, heads * a["v_dim"], 0.0)
    if mode != "decode":
        io_in[:, keys] += np.where(attention, a["kv_dim"] * kv_heads, 0.0)
    return flops, nbytes, io_in, io_out


def _collectives(graph: ComputationalGraph, cols: Columns, ctx: Context) -> tuple[np.ndarray, ...]:
    """(latency s, bus factor, bus bytes/s, runs) per node: calculator.comm_cost's link model."""
    n = len(graph.nodes)
    latency, factor, bus, runs = np.zeros(n), np.zeros(n), np.ones(n), np.ones(n, dtype=bool)
    for i, node in enumerate(graph.nodes):
        if not node.is_comm:
            continue
        group = ctx.tp if node.parallel.group == "tp" else ctx.ep
        when = node.parallel.when
        skipped = (when == "ep_is_1" and ctx.ep > 1) or (when == "ep_gt_1" and ctx.ep == 1)
        if group <= 1 or skipped or (node.attrs.get("inference_only") and ctx.workload.mode == "train"):
            runs[i] = False
            continue
        latency[i], bus[i] = link_model(node.op_type, group, group, ctx.hw)
        factor[i] = BUS_FACTOR[node.op_type](group)
    return latency, factor, bus, runs


def costs_for(graph: ComputationalGraph, ctx: Context) -> Costs:
    """Every op's cost for the context's binding, shared by the layouts and workloads that bind the
    ops alike (same tp, ep, dims per micro-batch, dtype, mode): a sweep costs each size once."""
    w = ctx.workload
    key = ("costs", ctx.tp, ctx.ep, *ctx.dims.values(), w.dtype, w.mode)
    return _plan_cache(ctx.hw).get(graph, key, lambda: plan_for(graph, ctx).cost(ctx))
