"""Memory per device: weights, KV cache, activations, gradients and optimizer state.

Reported for the pipeline stage that needs the most. GB = 1e9 bytes; the hardware's memory_gb is
read as 1e9-byte GB too (an "80 GB" H100 has 85.5e9 bytes, part of which the CUDA context,
allocator slack and framework buffers take, which this model does not count).
"""

from __future__ import annotations

from dataclasses import dataclass

from sims.calculator import Context
from sims.hardware import HardwareSpec
from sims.cache import GraphCache
from sims.ir import ComputationalGraph, OpNode
from sims.partition import (
    expert_data_parallel,
    local_params,
    node_params_per_device,
    numel,
    shared_with_embedding,
    stage_counts,
    stage_layer_bounds,
    tp_split,
)
from sims.workload import Layout, Workload

GB = 1e9
OPTIMIZER_BYTES_PER_PARAM = {"bf16": 12, "fp8": 12, "fp32": 8}  # Adam m, v (+ fp32 master copy)
GRAD_BYTES_PER_PARAM = 4  # fp32 main grads (Megatron); not sharded by the distributed optimizer
LOGITS_BYTES = 4  # fp32 logits for sampling / the loss


@dataclass
class MemoryEstimate:
    breakdown_gb: dict[str, float]
    stage: int


def estimate_memory(
    graph: ComputationalGraph, hw: HardwareSpec, layout: Layout, workload: Workload, ctx: Context | None = None
) -> MemoryEstimate:
    ctx = ctx or Context.for_step(graph, hw, layout, workload)
    io_key = (layout.tp, *ctx.dims.values(), workload.mode, workload.dtype)
    io = _MEMO.get(graph, ("io", io_key), lambda: [_io_elements(node, ctx) for node in graph.nodes])
    per_stage = [_stage_breakdown(graph, ctx, stage, io, io_key) for stage in range(layout.pp)]
    stage = max(range(layout.pp), key=lambda s: sum(per_stage[s].values()))
    return MemoryEstimate({k: v / GB for k, v in per_stage[stage].items()}, stage)


# Parts shared across a sweep (weights per layout split, activations per bound dims): keyed by what
# they depend on, so layouts and batches that agree on it reuse them.
_MEMO = GraphCache(maxsize=16384)


def _stage_breakdown(graph: ComputationalGraph, ctx: Context, stage: int, io: list, io_key: tuple) -> dict[str, float]:
    """Bytes per component on one device of `stage`; io: (input, output) elements per node."""
    layout, workload, p = ctx.layout, ctx.workload, ctx.precision
    counts = stage_counts(graph, layout.pp)[stage]
    weight_key = ("weights", layout.tp, layout.ep, layout.pp, stage, p.gemm_weight_bytes, p.other_weight_bytes)
    weights = _MEMO.get(graph, weight_key, lambda: _weight_bytes(graph, ctx, counts))
    if workload.mode != "train":
        largest_key = ("largest", io_key, layout.pp, stage)
        return {
            "weights": weights,
            "kv_cache": _kv_cache_bytes(graph, ctx, counts),
            "activations": _MEMO.get(graph, largest_key, lambda: _inference_activation_bytes(graph, ctx, counts, io)),
        }
    dense, expert = local_params(graph, layout, stage)
    expert_dp = expert_data_parallel(layout)
    optimizer_params = dense / layout.dp + expert / expert_dp if workload.zero else dense + expert
    return {
        "weights": weights,
        "gradients": (dense + expert) * GRAD_BYTES_PER_PARAM,
        "optimizer": optimizer_params * OPTIMIZER_BYTES_PER_PARAM[workload.dtype],
        "activations": _MEMO.get(graph, ("train", io_key, layout.pp, stage, workload.microbatches, workload.recompute),
                                 lambda: _training_activation_bytes(graph, ctx, stage, counts, io)),
    }


def _weight_bytes(graph: ComputationalGraph, ctx: Context, counts: list[int]) -> float:
    p, layout, weights = ctx.precision, ctx.layout, 0.0
    for node, count in zip(graph.nodes, counts):
        if count and node.weights and not shared_with_embedding(node, layout):
            per_param = p.gemm_weight_bytes if node.op_type in ("gemm", "moe_gemm") else p.other_weight_bytes
            weights += count * node_params_per_device(node, layout) * per_param
    return weights


def _kv_cache_bytes(graph: ComputationalGraph, ctx: Context, counts: list[int]) -> float:
    """Every sequence of the replica keeps kv_len cached tokens per layer of the stage (all
    micro-batches stay resident). MLA caches one latent that every tp rank keeps whole."""
    sequences = ctx.workload.batch / ctx.layout.dp
    total = 0.0
    for node, count in zip(graph.nodes, counts):
        if count and node.op_type == "attention":
            a = node.attrs
            total += count * a["cache_dim"] / min(ctx.tp, a["cache_heads"])
    return total * sequences * ctx.dims["kv_len"] * ctx.precision.act_bytes


def _inference_activation_bytes(graph: ComputationalGraph, ctx: Context, counts: list[int], io: list) -> float:
    """The largest single op's inputs + outputs (activations are freed layer by layer), plus fp32 logits."""
    largest = max((sum(pair) for pair, c in zip(io, counts) if c), default=0.0)
    logits = _logits_elements(graph, ctx, counts)
    return largest * ctx.precision.act_bytes + logits * LOGITS_BYTES


def _training_activation_bytes(
    graph: ComputationalGraph, ctx: Context, stage: int, counts: list[int], io: list
) -> float:
    """Inputs every op saves for backward, per micro-batch, times the micro-batches a stage holds
    under 1F1B (stage i of pp: min(pp - i, m)). With recompute a layer keeps only its input and one
    layer's saved set is live at a time."""
    layout, workload = ctx.layout, ctx.workload
    in_flight = min(layout.pp - stage, workload.microbatches)
    num_layers = graph.meta["num_layers"]
    saved = [pair[0] if c else 0.0 for pair, c in zip(io, counts)]
    outside_layers = sum(s * c for s, c, n in zip(saved, counts, graph.nodes) if not 0 <= n.layers[0] < num_layers)
    if workload.recompute:
        bounds = stage_layer_bounds(num_layers, layout.pp)
        layers_here = bounds[stage + 1] - bounds[stage]
        checkpoints = layers_here * ctx.dims["tokens"] * graph.meta["hidden_size"]
        per_micro_batch = checkpoints + outside_layers
        live = _largest_layer_saved(graph, saved, bounds[stage], bounds[stage + 1])
    else:
        per_micro_batch = sum(s * c for s, c in zip(saved, counts))
        live = 0.0
    logits = _logits_elements(graph, ctx, counts)
    return (in_flight * per_micro_batch + live) * ctx.precision.act_bytes + logits * LOGITS_BYTES


def _largest_layer_saved(graph: ComputationalGraph, saved: list[float], first: int, end: int) -> float:
    largest = 0.0
    for layers, members in _layer_kinds(graph).items():
        if any(first <= layer < end for layer in layers):
            largest = max(largest, sum(saved[i] for i in members))
    return largest


def _layer_kinds(graph: ComputationalGraph) -> dict[tuple[int, ...], list[int]]:
    """Layers grouped by the set of nodes they run (e.g. dense vs MoE layers): layers -> node indices."""
    return _LAYER_KINDS.get(graph, None, lambda: _group_layers(graph))


def _group_layers(graph: ComputationalGraph) -> dict[tuple[int, ...], list[int]]:
    by_layer: dict[int, list[int]] = {}
    for index, node in enumerate(graph.nodes):
        for layer in node.layers:
            if 0 <= layer < graph.meta["num_layers"]:
                by_layer.setdefault(layer, []).append(index)
    kinds: dict[tuple[int, ...], list[int]] = {}
    for layer, members in by_layer.items():
        kinds.setdefault(tuple(members), []).append(layer)
    return {tuple(layers): list(members) for members, layers in kinds.items()}


_LAYER_KINDS = GraphCache(maxsize=256)


def _logits_elements(graph: ComputationalGraph, ctx: Context, counts: list[int]) -> float:
    for node, count in zip(graph.nodes, counts):
        if count and node.name == "lm_head":
            return ctx.dims["logit_tokens"] * graph.meta["vocab_size"] / ctx.tp
    return 0.0


def _io_elements(node: OpNode, ctx: Context) -> tuple[float, float]:
    """(input, output) elements of one execution on one device. Attention's input is q, k, v
    (decode: q only; k and v are the KV cache) plus the softmax statistics."""
    dims, tp = ctx.dims, ctx.tp
    if node.is_comm or node.op_type == "embedding":
        return 0.0, numel(node.outputs[0], dims) if node.op_type == "embedding" else 0.0
    if node.op_type == "attention":
        a = node.attrs
        heads = a["heads"] / tp
        q = dims["batch"] * dims["seq_len"] * heads
        kv = (
            0.0
            if ctx.workload.mode == "decode"
            else dims["batch"] * dims["kv_len"] * a["kv_dim"] * a["kv_heads"] / min(tp, a["kv_heads"])
        )
        return q * (a["qk_dim"] + 2) + kv, q * a["v_dim"]  # + fp32 log-sum-exp per query and head
    if node.op_type == "moe_gemm":
        return numel(node.inputs[0], dims) / tp, numel(node.outputs[0], dims) / tp
    split = tp_split(node, tp)
    mode = node.parallel.tp_mode
    inp = numel(node.inputs[0], dims) / (split if mode in ("row", "heads", "sharded") else 1)
    out = numel(node.outputs[0], dims) / (split if mode in ("column", "heads", "sharded") else 1)
    return inp, out
