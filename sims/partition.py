"""How a layout splits a graph: tp split factors, pipeline stages, parameters per device."""

from __future__ import annotations

from bisect import bisect_right
from functools import lru_cache
from math import prod

import numpy as np

from sims.cache import GraphCache
from sims.ir import ComputationalGraph, OpNode
from sims.workload import Layout


def numel(shape, dims: dict[str, float]) -> float:
    constant, symbols = _split_shape(shape)
    for symbol in symbols:
        constant *= dims[symbol]
    return constant


@lru_cache(maxsize=4096)
def _split_shape(shape: tuple) -> tuple[int, tuple[str, ...]]:
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


def stage_counts(graph: ComputationalGraph, pp: int) -> list[list[int]]:
    """counts[stage][node index]: executions of each node per forward pass on that stage. The
    embedding (layer -1) runs on the first stage, final norm and head (layer L) on the last."""
    return _STAGE_COUNTS.get(graph, pp, lambda: _count_per_stage(graph, pp))


def _count_per_stage(graph: ComputationalGraph, pp: int) -> list[list[int]]:
    interior = stage_layer_bounds(graph.meta["num_layers"], pp)[1:-1]
    counts = [[0] * len(graph.nodes) for _ in range(pp)]
    for index, node in enumerate(graph.nodes):
        for layer in node.layers:
            counts[bisect_right(interior, layer)][index] += 1
    return counts


_STAGE_COUNTS = GraphCache(maxsize=256)


def stage_count_matrix(graph: ComputationalGraph, pp: int) -> np.ndarray:
    """stage_counts as a (stage x node) array."""
    return _STAGE_COUNTS.get(graph, ("matrix", pp), lambda: np.array(stage_counts(graph, pp), dtype=float))


def node_params_per_device(node: OpNode, layout: Layout) -> float:
    params = weight_numel(node.weights)
    if node.op_type == "moe_gemm":
        return params / (layout.ep if layout.ep > 1 else layout.tp)
    if node.parallel.tp_dim is None:
        return params
    return params / tp_split(node, layout.tp)


def local_params(graph: ComputationalGraph, layout: Layout, stage: int) -> tuple[float, float]:
    """(non-expert, expert) parameters one device of `stage` holds."""
    key = ("local_params", layout.tp, layout.ep, layout.pp, stage)
    return _LOCAL_PARAMS.get(graph, key, lambda: _count_local_params(graph, layout, stage))


_LOCAL_PARAMS = GraphCache(maxsize=4096)


def _count_local_params(graph: ComputationalGraph, layout: Layout, stage: int) -> tuple[float, float]:
    dense = expert = 0.0
    for node, count in zip(graph.nodes, stage_counts(graph, layout.pp)[stage]):
        if not count or not node.weights or shared_with_embedding(node, layout):
            continue
        params = count * node_params_per_device(node, layout)
        if node.op_type == "moe_gemm":
            expert += params
        else:
            dense += params
    return dense, expert


def shared_with_embedding(node: OpNode, layout: Layout) -> bool:
    """A tied lm_head shares the embedding's storage when both sit on one device (pp = 1)."""
    return bool(node.attrs.get("tied")) and layout.pp == 1


def expert_data_parallel(layout: Layout) -> int:
    """Replicas of each expert shard: tp*dp/ep devices hold the same experts when ep > 1; with
    ep = 1 experts are tp-split like dense weights and replicated dp times."""
    return layout.tp * layout.dp // layout.ep if layout.ep > 1 else layout.dp
