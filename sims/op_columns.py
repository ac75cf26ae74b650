"""A graph's nodes as columns of numbers, for costing every op at once (sims/vector_cost.py).

For fixed tp, ep and mode, an op's FLOPs, bytes and activation elements are linear in a few
products of the bound dims, its "features": the monomials its shapes use (tokens, routed_tokens,
batch*seq_len, ...) and attention's causal query-key pairs (batch * pairs per sequence). `Columns`
holds per graph what the formulas of sims/calculator.py (gemm_work, attention_work, ...) and
sims/memory.py read from each node; `work_coefficients` turns them into (node x feature) matrices
for one tp and ep, built for every tp size of the graph at once (`every_tp_work`: elementwise in tp,
so each tp's slice equals it built alone). Grouped expert GEMMs' weight traffic (the experts the
tokens hit) is not linear and is added per binding by vector_cost.Plan. A model's graphs of several modes
share one Columns when their nodes are equal, or take rows of it (_from_sibling), and `per_nodes` keeps
what depends only on the nodes per Columns, so a sweep over modes builds it once.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Any

import numpy as np

from sims.cache import GraphCache
from sims.ir import TP_MODES, ComputationalGraph, OpNode
from sims.partition import split_shape, weight_numel

PAIRS = ("pairs",)
TOKENS, QUERIES, KEYS = ("tokens",), ("batch", "seq_len"), ("batch", "kv_len")


@dataclass(frozen=True)
class Columns:
    """Per graph: element counts per feature of each node's first input, other inputs and first
    output (node x feature), node positions by name, op-type masks, and per-node numbers (`attrs`)."""

    features: tuple[tuple[str, ...], ...]
    first_in: np.ndarray
    other_in: np.ndarray
    out: np.ndarray
    index: dict[str, int]
    op_types: np.ndarray  # each node's op type (str)
    masks: dict[str, np.ndarray]  # op type -> nodes of that type, built when first asked
    comm: np.ndarray
    attrs: dict[str, np.ndarray]
    tp_sizes: tuple[int, ...]  # the tp sizes a layout may use (layout_problem): the divisors of the attention heads
    split_memo: dict[tuple[int, ...], np.ndarray]
    term_numbers: np.ndarray  # (term x node): each node's number of each work term (0 where it has none)
    term_bases: np.ndarray  # (term x node): the basis each term's number multiplies
    monomials: tuple[frozenset, ...]  # the symbol products each node's shapes use (its share of `features`)
    parent: tuple["Columns", np.ndarray] | None  # columns this graph's nodes are rows of, and which (_from_sibling)
    work_memo: dict[tuple, tuple[np.ndarray, ...]]  # (sizes, whether ep > 1) -> every tp's work, and per decode
    tables: tuple[np.ndarray, np.ndarray]  # (3 x node x feature) counts, (attr x node) numbers: their rows are above

    def mask(self, op_type: str) -> np.ndarray:
        mask = self.masks.get(op_type)
        if mask is None:
            mask = self.masks[op_type] = self.op_types == op_type
        return mask

    def column(self, feature: tuple[str, ...]) -> int:
        return self.features.index(feature)

    def values(self, bindings: list[dict[str, float]]) -> np.ndarray:
        """(binding x feature): the features' values for each binding of the dims."""
        rows = []
        for dims in bindings:
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
            rows.append(values)
        return np.array(rows)

    def splits(self, sizes: tuple[int, ...]) -> np.ndarray:
        """partition.tp_split of every node for each tp in `sizes` (Columns.sizes_with), a (tp x node) array
        (read-only): elementwise in tp, so each row equals its tp alone."""
        split = self.split_memo.get(sizes)
        if split is None:
            split = self.split_memo[sizes] = self._splits(tp_column(sizes))
        return split

    def work(self, sizes: tuple[int, ...], expert_parallel: bool, decode: bool) -> tuple[np.ndarray, ...]:
        """every_tp_work per (sizes, whether ep > 1, decode): decode and the other modes share all but the saved
        inputs; columns that are rows of another's (`parent`) take rows of its (elementwise over nodes)."""
        key = (sizes, expert_parallel, decode)
        found = self.work_memo.get(key)
        if found is None and self.parent is not None:
            parent, take = self.parent
            found = self.work_memo[key] = tuple(m[:, take] for m in parent.work(sizes, expert_parallel, decode))
        elif found is None:
            parts = self.work_memo.get((sizes, expert_parallel))
            if parts is None:
                variants = (False, True) if self.attrs["sequence_parallel"].any() else (expert_parallel,)
                for variant, built in zip(variants, _work_coefficients(self, sizes, variants)):
                    self.work_memo.setdefault((sizes, variant), built)
                parts = self.work_memo[(sizes, expert_parallel)]
            flops, moved, io_in, io_out, keys, kv_dim = parts
            if not decode:  # outside decode attention saves k and v too (memory.py)
                io_in = io_in.copy()
                io_in[..., keys] += kv_dim
            found = self.work_memo[key] = (flops, moved, io_in, io_out)
        return found

    def sizes_with(self, tp: int) -> tuple[int, ...]:
        """The tp sizes whose values are built together with tp's: all of them, or tp alone outside them."""
        return self.tp_sizes if tp in self.tp_sizes else (tp,)

    def _splits(self, tps: np.ndarray) -> np.ndarray:
        a = self.attrs
        plain = np.minimum(tps, a["max_split"])
        width, limited = a["width"], a["limited_width"]
        partly = width / ((width - limited) / tps + limited / np.minimum(tps, a["limited_split"]))
        return np.where(a["replicated"] > 0, 1.0, np.where(limited > 0, partly, plain))


def tp_column(sizes: tuple[int, ...]) -> np.ndarray:
    """The tp sizes as a (tp x 1) float column: float like the per-node numbers it meets, so that numpy runs one
    float loop per operation (an int column costs a cast, and in a fresh process a first call per dtype mix); the
    sizes are small integers, exact in float, so every result is the same."""
    return np.array(sizes, dtype=float)[:, None]


def columns(graph: ComputationalGraph) -> Columns:
    return _COLUMNS.get(graph, None, lambda: _from_sibling(graph) or _build_columns(graph))


def per_nodes(cache: GraphCache, graph: ComputationalGraph, key: Hashable, compute: Callable[[], Any],
              take_rows: Callable[[Any, np.ndarray], Any] | None = None) -> Any:
    """`compute()` kept in `cache` per the graph's columns: for a value that depends only on the graph's nodes,
    num_layers and attention heads, which a model's graphs with the same nodes (prefill, decode) share. With
    `take_rows` (values elementwise over nodes), a graph whose columns are rows of another's takes rows of its value."""
    cols = columns(graph)
    if take_rows is None or cols.parent is None:  # nothing to take rows of: one lookup
        return cache.get(cols, key, compute)
    found = cache.peek(cols, key)
    if found is None:
        parent, take = cols.parent
        kept = cache.peek(parent, key)
        found = None if kept is None else take_rows(kept, take)
    return cache.get(cols, key, compute if found is None else lambda: found)


def _from_sibling(graph: ComputationalGraph) -> Columns | None:
    """A graph's columns as those of a graph built before whose nodes include its nodes (a model's prefill and decode
    graphs often hold the same nodes, its training graph those less the KV cache write), or rows of them: a node's
    numbers are its own, so the rows equal those built here if the feature sets (the matrices' columns) agree."""
    nodes, meta = graph.nodes, graph.meta
    for other, cols in _COLUMNS.entries(None):
        if (cols.parent is not None or other.meta["num_layers"] != meta["num_layers"]
                or other.meta["num_attention_heads"] != meta["num_attention_heads"]):
            continue
        rows = [cols.index.get(node.name) for node in nodes]
        if None in rows or any(other.nodes[row] != node for row, node in zip(rows, nodes)):
            continue
        if len(rows) == len(other.nodes) and rows == list(range(len(rows))):
            return cols  # the same nodes: the same columns (their memos are per node data, sizes and mode)
        monomials = frozenset().union(*(cols.monomials[row] for row in rows))
        if _features(monomials) != cols.features:
            continue
        take = np.array(rows)
        counts, table = cols.tables[0].take(take, axis=1), cols.tables[1].take(take, axis=1)
        return Columns(cols.features, *counts, {node.name: i for i, node in enumerate(nodes)}, cols.op_types[take], {},
                       cols.comm[take], dict(zip(_DEFAULTS, table)), cols.tp_sizes, {},
                       cols.term_numbers.take(take, axis=1), cols.term_bases.take(take, axis=1),
                       tuple(cols.monomials[row] for row in rows), (cols, take), {}, (counts, table))
    return None


_COLUMNS = GraphCache(maxsize=256)


# The per-node numbers (Columns.attrs) and their value where they do not apply: a node sets only those its op type
# reads (those of the formulas of sims/calculator.py and sims/memory.py; bytes in activation elements).
_DEFAULTS = {
    # _every_tp_arrays: GEMM and norm weight reads; _work_coefficients: MoE token shuffles
    "linear": 0.0, "norm": 0.0, "sequence_parallel": 0.0,
    # moe_gemm_work: per token of the replica, and the weights of all experts
    "moe_flops": 0.0, "moe_elements": 0.0, "expert_weights": 0.0, "miss": 1.0,
    # attention_work: per query-key pair, per query, per cached key
    "attention_flops": 0.0, "query_elements": 0.0, "kv_dim": 0.0, "kv_heads": 1.0, "saved_per_query": 0.0,
    "out_per_query": 0.0,
    # memory.py: weights and KV cache
    "weights": 0.0, "gemm_weights": 0.0, "tp_split_weights": 0.0, "tied": 0.0, "cache_dim": 0.0, "cache_heads": 1.0,
    "in_layer": 0.0,
    # partition.tp_split
    "max_split": np.inf, "limited_width": 0.0, "limited_split": 1.0, "width": 1.0, "replicated": 0.0,
}
# The terms of the work coefficients (_work_coefficients): an output (FLOPs, elements moved, saved inputs, outputs)
# per element of one of a node's element counts (FLOPS_OUT: FLOPs per element of its first output, ...); each node's
# term is a number times one basis, a function of tp.
FLOPS_OUT, FLOPS_IN, MOVED_IN, MOVED_OTHER, MOVED_OUT, IO_IN, IO_OUT = range(7)
SPLIT, SHUFFLE, PER_TP, ONE, EMBEDDING = range(5)  # 1 / tp_split, MoE shuffles' split, 1 / tp, 1, 1 / tp + 1
# What a tp mode splits: (input, output) of GEMMs, (input, output) of saved activations
_MODE_SPLITS = {mode: (mode in ("row", "heads"), mode in ("column", "heads"), mode in ("row", "heads", "sharded"),
                       mode in ("column", "heads", "sharded")) for mode in TP_MODES}
_SPLIT_LIMITS = frozenset(("max_split", "limited_width", "limited_split"))


def _node_table(nodes: list[OpNode], num_layers: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Columns.attrs as an (attr x node) table (each per-node number a contiguous row: numpy's fast loops), and the work
    terms' numbers and bases (term x node), filled from lists in which each node sets only what it has."""
    rows = {name: [default] * len(nodes) for name, default in _DEFAULTS.items()}
    for i, node in enumerate(nodes):
        _set_node(rows, i, node, num_layers)
    numbers, bases = zip(*map(_work_terms, nodes))
    return np.array(list(rows.values()), dtype=float), np.array(numbers, dtype=float).T, np.array(bases).T


def _set_node(rows: dict[str, list], i: int, node: OpNode, num_layers: int) -> None:
    """Node i's numbers into `rows`: those every node has, then those its op type reads (the rest keep _DEFAULTS)."""
    a, op = node.attrs, node.op_type
    weights = node.weights[0] if node.weights else (0, 0)
    rows["replicated"][i] = node.parallel.tp_mode == "replicated"
    rows["weights"][i], rows["tp_split_weights"][i] = weight_numel(node.weights), node.parallel.tp_dim is not None
    rows["in_layer"][i], rows["tied"][i] = 0 <= node.layers[0] < num_layers, bool(a.get("tied"))
    rows["sequence_parallel"][i], rows["kv_heads"][i] = bool(a.get("sequence_parallel_with_ep")), a.get("kv_heads", 1)
    for name in _SPLIT_LIMITS.intersection(a):  # partition.tp_split's attrs, on the few nodes that have them
        rows[name][i] = a[name]
    if a.get("limited_width"):
        rows["width"][i] = weights[-1]
    if op in ("gemm", "router"):
        rows["linear"][i], rows["gemm_weights"][i] = 1.0, op == "gemm"
    elif op == "norm":
        rows["norm"][i] = 5.0
    elif op == "moe_gemm":
        (experts, k, n), top_k = weights, a["top_k"]
        rows["moe_flops"][i], rows["moe_elements"][i] = 2.0 * top_k * k * n, top_k * (k + n)
        rows["expert_weights"][i], rows["miss"][i] = experts * k * n, 1.0 - top_k / experts
        rows["gemm_weights"][i] = 1.0
    elif op == "attention":
        _set_attention(rows, i, a)


def _work_terms(node: OpNode) -> tuple[tuple[float, ...], tuple[int, ...]]:
    """Each work term's number and basis for one node, in term order (FLOPS_OUT ... IO_OUT): sims/calculator.py's
    gemm_work, norm_work, elementwise_work, embedding_work, moe_gemm_work; collectives move their input; memory.py's
    saved activations. A term a node does not have is 0 (its basis unused); attention and MoE FLOPs and bytes are
    per feature (_work_coefficients adds them)."""
    op, a = node.op_type, node.attrs
    split_in, split_out, saved_in, saved_out = _MODE_SPLITS[node.parallel.tp_mode]
    io_in, io_out = SPLIT if saved_in else ONE, SPLIT if saved_out else ONE
    if op in ("gemm", "router"):
        k = node.weights[0][-2] if node.weights and len(node.weights[0]) > 1 else 0
        return (2.0 * k, 0, 1.0, 0, 1.0, 1.0, 1.0), (SPLIT, SPLIT, SPLIT if split_in else ONE, SPLIT,
                                                     SPLIT if split_out else ONE, io_in, io_out)
    if op == "norm":
        return (0, 5.0, 4 if a.get("fused_residual") else 2, 0, 0, 1.0, 1.0), (SPLIT,) * 5 + (io_in, io_out)
    if op == "elementwise":  # MoE token shuffles: the whole replica's tokens, split over tp only under ep (SHUFFLE)
        return (a.get("flops_per_element", 1), 0, 1.0, 1.0, 1.0, 1.0, 1.0), (SHUFFLE,) * 5 + (io_in, io_out)
    if op == "embedding":
        return (0, 0, 0, 0, 1.0, 0, 1.0), (SPLIT, SPLIT, SPLIT, SPLIT, EMBEDDING, SPLIT, ONE)
    if op == "moe_gemm":
        return (0, 0, 0, 0, 0, 1.0, 1.0), (SPLIT,) * 5 + (PER_TP, PER_TP)
    if node.is_comm:
        moved_by = PER_TP if op == "all_to_all" else ONE
        return (0, 0, 1.0, 0, 0, 0, 0), (SPLIT, SPLIT, moved_by, SPLIT, SPLIT, SPLIT, SPLIT)
    return (0,) * 7, (SPLIT,) * 7


def _set_attention(rows: dict[str, list], i: int, a: dict) -> None:
    heads, qk, v = a.get("heads", 0), a.get("qk_dim", 0), a.get("v_dim", 0)
    rows["attention_flops"][i], rows["query_elements"][i] = 2.0 * heads * (qk + v), heads * (qk + v)
    rows["saved_per_query"][i], rows["out_per_query"][i] = heads * (qk + 2), heads * v
    rows["kv_dim"][i], rows["cache_dim"][i] = a.get("kv_dim", 0), a.get("cache_dim", 0)
    rows["cache_heads"][i] = a.get("cache_heads", 1)


def _build_columns(graph: ComputationalGraph) -> Columns:
    nodes = graph.nodes
    features, counts, monomials = _element_counts(nodes)
    table, numbers, bases = _node_table(nodes, graph.meta["num_layers"])
    index = {node.name: i for i, node in enumerate(nodes)}
    comm, op_types = np.array([n.is_comm for n in nodes]), np.array([n.op_type for n in nodes])
    heads = graph.meta["num_attention_heads"]
    tp_sizes = tuple(tp for tp in range(1, heads + 1) if heads % tp == 0)
    return Columns(features, *counts, index, op_types, {}, comm, dict(zip(_DEFAULTS, table)), tp_sizes, {}, numbers,
                   bases, monomials, None, {}, (counts, table))


def _features(monomials: frozenset) -> tuple[tuple[str, ...], ...]:
    return tuple(dict.fromkeys((*sorted(monomials), TOKENS, QUERIES, KEYS, PAIRS)))


def _element_counts(nodes: list[OpNode]) -> tuple[tuple[tuple[str, ...], ...], np.ndarray, tuple[frozenset, ...]]:
    """The features, the elements per feature of each node's first input, other inputs and first output (3 x node
    x feature), and each node's monomials; each shape split once, in one flat pass (not a comprehension per node and
    kind)."""
    shapes = []  # (kind, node, constant, symbols): kind 0 first input, 1 other inputs, 2 first output
    for row, node in enumerate(nodes):
        inputs = node.inputs
        if inputs:
            shapes.append((0, row, *split_shape(inputs[0])))
            for shape in inputs[1:]:
                shapes.append((1, row, *split_shape(shape)))
        if node.outputs:
            shapes.append((2, row, *split_shape(node.outputs[0])))
    per_node = [set() for _ in nodes]
    for _, row, _, symbols in shapes:
        per_node[row].add(symbols)
    monomials = tuple(map(frozenset, per_node))
    features = _features(frozenset().union(*monomials))
    position = {feature: i for i, feature in enumerate(features)}
    elements = [[[0.0] * len(features) for _ in nodes] for _ in range(3)]
    for kind, row, constant, symbols in shapes:
        elements[kind][row][position[symbols]] += constant
    return features, np.array(elements), monomials


def work_coefficients(graph: ComputationalGraph, tp: int, ep: int, mode: str) -> tuple[np.ndarray, ...]:
    """(flops, activation elements moved, input elements, output elements) per unit of each feature
    for every node: shared by the layouts of a sweep with this tp, whether ep > 1, and mode. Built
    for every tp that divides the attention heads at once (a sweep's tp sizes: layout_problem refuses
    the others; another tp alone), each tp's matrices a slice of one (tp x node x feature) array."""
    sizes = columns(graph).sizes_with(tp)
    return tuple(m[sizes.index(tp)] for m in every_tp_work(graph, sizes, ep > 1, mode))


def every_tp_work(graph: ComputationalGraph, sizes: tuple[int, ...], expert_parallel: bool,
                  mode: str) -> tuple[np.ndarray, ...]:
    """work_coefficients of every tp in `sizes` (Columns.sizes_with), as (tp x node x feature) arrays. A graph whose
    token shuffles split differently under expert parallelism gets both variants (ep = 1, ep > 1) in one pass: an
    MoE sweep uses both, and they share every array but the shuffles'."""
    return columns(graph).work(sizes, expert_parallel, mode == "decode")


def _work_coefficients(cols: Columns, sizes: tuple[int, ...], variants: tuple[bool, ...]) -> list[tuple]:
    """The matrices for the tp `sizes` (tp x node x feature), for each of `variants` (whether ep > 1) on a leading
    axis: elementwise in tp and variant, so each variant's tp slice is bit-identical to computing it alone. A node's
    coefficient of each term is one number times one basis (the formulas' other products are exact zeros for its op
    type, and adding them changed no bit), all in one product; each term times its element counts, summed per output
    in the formulas' order."""
    a, tps = cols.attrs, tp_column(sizes)
    per_split, per_tp = 1 / cols.splits(sizes), 1 / tps
    bases = np.empty((5, len(cols.index), len(variants), len(sizes)))  # (basis x node x variant x tp)
    bases[SPLIT], bases[PER_TP], bases[ONE], bases[EMBEDDING] = per_split.T[:, None], per_tp.T, 1.0, (per_tp + 1).T
    for v, expert_parallel in enumerate(variants):  # MoE token shuffles split over tp only under expert parallelism
        bases[SHUFFLE, :, v] = (np.where(a["sequence_parallel"] > 0, per_tp, per_split) if expert_parallel
                                else per_split).T
    numbers = cols.term_numbers[:, :, None, None] * bases[cols.term_bases, np.arange(len(cols.index))]
    numbers = numbers.transpose(0, 2, 3, 1)[..., None]  # (term x variant x tp x node x 1)
    first_in, out = cols.first_in, cols.out
    # one product per term: arrays the size of the outputs (one of every term at once outgrew malloc's small blocks)
    flops = numbers[FLOPS_OUT] * out
    flops += numbers[FLOPS_IN] * first_in
    moved = numbers[MOVED_IN] * first_in
    moved += numbers[MOVED_OTHER] * cols.other_in
    moved += numbers[MOVED_OUT] * out
    io_in, io_out = numbers[IO_IN] * first_in, numbers[IO_OUT] * out
    tokens, pairs, queries, keys = (cols.column(f) for f in (TOKENS, PAIRS, QUERIES, KEYS))
    flops[..., tokens] += a["moe_flops"] / tps
    moved[..., tokens] += a["moe_elements"] / tps
    flops[..., pairs] += a["attention_flops"] / tps
    moved[..., queries] += a["query_elements"] / tps
    kv_dim = a["kv_dim"] * (a["kv_heads"] / np.minimum(tps, a["kv_heads"]))  # kv heads replicated when tp > kv_heads
    moved[..., keys] += kv_dim
    # Activations (memory.py): attention saves q (+ fp32 log-sum-exp) and, outside decode, k and v (Columns.work).
    io_in[..., queries] += a["saved_per_query"] / tps
    io_out[..., queries] += a["out_per_query"] / tps
    return [(flops[v], moved[v], io_in[v], io_out[v], keys, kv_dim) for v in range(len(variants))]
