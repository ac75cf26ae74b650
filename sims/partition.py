"""How a layout splits a graph: tp split factors, pipeline stages, parameters per device."""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass
from functools import lru_cache
from math import prod

import numpy as np

from sims.cache import GraphCache
from sims.ir import ComputationalGraph, OpNode
from sims.workload import Layout


def numel(shape, dims: dict[str, float]) -> float:
    constant, symbols = split_shape(shape)
    for symbol in symbols:
        constant *= dims[symbol]
    return constant


@lru_cache(maxsize=4096)
def split_shape(shape: tuple) -> tuple[int, tuple[str, ...]]:
    """(product of the integer dims, the symbolic dims): evaluation then multiplies a few floats."""
    return prod(d for d in shape if isinstance(d, int)), tuple(d for d in shape if isinstance(d, str))


@lru_cache(maxsize=4096)
def weight_numel(weights: tuple) -> int:
    return sum(prod(w) for w in weights)


def tp_split(node: OpNode, tp: int) -> float:
    """How many ways tp splits this op (kv heads stop splitting at num_key_value_heads). A fused
    QKV GEMM splits its q part tp ways and its k/v part (`limited_width` of its output) at most
    `limited_split` ways: the result is its whole width over the width one device computes."""
    if node.parallel.tp_mode == "replicated":
        return 1
    limited = node.attrs.get("limited_width")
    if limited:
        width = node.weights[0][-1]
        return width / ((width - limited) / tp + limited / min(tp, node.attrs["limited_split"]))
    return min(tp, node.attrs.get("max_split", tp))


def stage_layer_bounds(num_layers: int, pp: int) -> list[int]:
    """First layer of each stage plus the end: layers split as evenly as possible, the first
    stages taking one extra layer when pp does not divide num_layers."""
    base, extra = divmod(num_layers, pp)
    bounds = [0]
    for stage in range(pp):
        bounds.append(bounds[-1] + base + (1 if stage < extra else 0))
    return bounds


@dataclass(frozen=True)
class StageSplit:
    """How pp pipeline stages split a graph: counts[stage][node index], the executions of each node
    per forward pass on that stage (the embedding, layer -1, runs on the first stage; final norm and
    head, layer L, on the last), and the same as (stage x node) float arrays of counts and of 0/1."""

    counts: list[list[int]]
    matrix: np.ndarray
    runs: np.ndarray


def stage_split(graph: ComputationalGraph, pp: int) -> StageSplit:
    return _STAGE_SPLITS.get(graph, pp, lambda: _shared_split(graph, pp))


def _shared_split(graph: ComputationalGraph, pp: int) -> StageSplit:
    """The split kept per the graph's columns too (op_columns.per_nodes: a node's counts are its layers'), so that a
    model's graphs with the same nodes share it and its training graph takes rows of it."""
    from sims.op_columns import per_nodes  # op_columns imports this module; only a split's first build comes here

    return per_nodes(_STAGE_SPLITS, graph, ("split", pp), lambda: _split_stages(graph, pp), _split_rows)


def _split_rows(split: StageSplit, take: np.ndarray) -> StageSplit:
    rows = take.tolist()
    return StageSplit([[counts[row] for row in rows] for counts in split.counts], split.matrix.take(take, axis=1),
                      split.runs.take(take, axis=1))


def stage_counts(graph: ComputationalGraph, pp: int) -> list[list[int]]:
    return stage_split(graph, pp).counts


def _split_stages(graph: ComputationalGraph, pp: int) -> StageSplit:
    if pp == 1:  # one stage runs every layer: no layers to sort and split
        return _as_split([[len(node.layers) for node in graph.nodes]])
    interior = stage_layer_bounds(graph.meta["num_layers"], pp)[1:-1]
    counts = [[0] * len(graph.nodes) for _ in range(pp)]
    for index, layers in enumerate(_STAGE_SPLITS.get(graph, "sorted layers", lambda: _sorted_layers(graph))):
        # stage s holds the layers from interior[s - 1] up to interior[s] (the ends open)
        edges = [0, *(bisect_left(layers, bound) for bound in interior), len(layers)]
        for stage in range(pp):
            counts[stage][index] = edges[stage + 1] - edges[stage]
    return _as_split(counts)


def _as_split(counts: list[list[int]]) -> StageSplit:
    matrix = np.array(counts, dtype=float)
    return StageSplit(counts, matrix, (matrix > 0).astype(float))


def _sorted_layers(graph: ComputationalGraph) -> list[list[int]]:
    return [sorted(node.layers) for node in graph.nodes]


_STAGE_SPLITS = GraphCache(maxsize=256)


def expert_data_parallel(layout: Layout) -> int:
    """Replicas of each expert shard: tp*dp/ep devices hold the same experts when ep > 1; with
    ep = 1 experts are tp-split like dense weights and replicated dp times."""
    return layout.tp * layout.dp // layout.ep if layout.ep > 1 else layout.dp


def stack(arrays: list[np.ndarray]) -> np.ndarray:
    """np.stack(arrays) of arrays of one shape and dtype (the same array), as one concatenate reshaped: np.stack's
    Python steps per array cost 3-4 times as much for the tens of rows a sweep stacks."""
    return np.concatenate(arrays).reshape(len(arrays), *arrays[0].shape)


def per_stage(matrix: np.ndarray, rows: list[np.ndarray]) -> list[list[float]]:
    """`matrix @ row` (per stage, from per node values) for each binding's row: one matmul over their stack, which
    numpy runs as the same matrix-vector product per row as for a row alone (so each equals it bit for bit)."""
    if len(rows) == 1:  # that product itself, without stacking one row
        return [(matrix @ rows[0]).tolist()]
    return (matrix @ stack(rows)[:, :, None])[..., 0].tolist()
