"""Memory per device: weights, KV cache, activations, gradients and optimizer state.

Reported for the pipeline stage that needs the most. GB = 1e9 bytes; the hardware's memory_gb is
read as 1e9-byte GB too (an "80 GB" H100 has 85.5e9 bytes, part of which the CUDA context,
allocator slack and framework buffers take, which this model does not count).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from sims.calculator import Context, loss_positions
from sims.hardware import HardwareSpec
from sims.cache import GraphCache
from sims.ir import ComputationalGraph
from sims.op_columns import columns, per_nodes, tp_column
from sims.partition import expert_data_parallel, per_stage, stack, stage_counts, stage_layer_bounds, stage_split
from sims.shared_prefix import cached_tokens
from sims.vector_cost import costs_for
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
    return memory_of(_stage_parts(graph, ctx), layout.pp)


def memory_of(parts: dict[str, list[float]], pp: int) -> MemoryEstimate:
    """The breakdown of the stage that needs the most, from the bytes per component and stage."""
    stage = 0
    if pp > 1:
        totals = [sum(values) for values in zip(*parts.values())]
        stage = max(range(pp), key=totals.__getitem__)
    return MemoryEstimate({k: v[stage] / GB for k, v in parts.items()}, stage)


# Parts shared across a sweep (weights per layout split, activations per bound dims): keyed by what
# they depend on, so layouts and batches that agree on it reuse them. Each is a list over stages.
_MEMO = GraphCache(maxsize=16384)


def _stage_parts(graph: ComputationalGraph, ctx: Context) -> dict[str, list[float]]:
    """Bytes per component on one device of each pipeline stage."""
    layout, workload = ctx.layout, ctx.workload
    weights, activations = _weight_bytes(graph, ctx), _activations(graph, ctx)
    if workload.mode != "train":
        return {"weights": weights, "kv_cache": _kv_cache_bytes(graph, ctx), "activations": activations}
    gradients, optimizer = training_state(graph, layout, workload)
    return {"weights": weights, "gradients": gradients, "optimizer": optimizer, "activations": activations}


def training_state(graph: ComputationalGraph, layout: Layout, workload: Workload) -> tuple[list, list]:
    """_training_state_bytes, kept per what it depends on."""
    replicas = layout.dp if workload.zero else None  # only zero shards the state over dp
    state_key = ("state", layout.tp, layout.ep, layout.pp, replicas, workload.dtype)
    return _MEMO.get(graph, state_key, lambda: _training_state_bytes(graph, layout, workload))


def _activations(graph: ComputationalGraph, ctx: Context) -> list[float]:
    """Activation bytes per stage, kept with the binding's costs (with what else they depend on in the key), and
    computed once for the bindings of every ep (the same activations: _MEMO)."""
    costs, key = costs_for(graph, ctx), _activations_key(ctx)
    activations = costs.derived.get(key)
    if activations is None:
        layout, w = ctx.layout, ctx.workload
        any_ep = (*key, layout.tp, *ctx.dims.values(), w.dtype, w.mode)
        compute = _training_activation_bytes if w.mode == "train" else _inference_activation_bytes
        activations = costs.derived[key] = _MEMO.get(graph, any_ep, lambda: compute(graph, ctx))
    return activations


def _activations_key(ctx: Context) -> tuple:
    w = ctx.workload
    if w.mode != "train":  # a log-prob pass (loss_len) holds a chunk of its logits at a time
        return ("activations", ctx.layout.pp, w.logits_chunk if w.loss_len else None)
    return ("activations", ctx.layout.pp, w.microbatches, w.recompute, w.recompute_keeps, w.logits_chunk, w.loss_len)


def activations_together(graph: ComputationalGraph, contexts: list[Context]) -> None:
    """The activation bytes per stage of costed contexts (vector_cost.cost_together) not derived yet, those of one
    pipeline split computed together as (binding x stage) arrays (api.simulate_many): the same elementwise
    operations, maxima and matrix-vector products per binding as _inference_activation_bytes and
    _training_activation_bytes (which a recomputing layer still takes per binding), so each equals it alone."""
    groups: dict[int, dict[tuple, Context]] = {}
    for ctx in contexts:
        key = _activations_key(ctx)
        if key not in ctx.costs.derived:
            if ctx.workload.recompute and ctx.workload.mode == "train":
                _activations(graph, ctx)
            else:
                groups.setdefault(ctx.layout.pp, {}).setdefault((id(ctx.costs), key), ctx)
    for pp, members in groups.items():
        keys, members = [key for _, key in members], list(members.values())
        for ctx, key, activations in zip(members, keys, _activations_of_split(graph, pp, members)):
            ctx.costs.derived[key] = activations


def _activations_of_split(graph: ComputationalGraph, pp: int, contexts: list[Context]) -> list[list[float]]:
    split, costs = stage_split(graph, pp), [ctx.costs for ctx in contexts]
    head = columns(graph).index.get("lm_head")
    heads = np.array([head is not None and bool(counts[head]) for counts in split.counts])
    logits = np.where(heads, np.array([_logits_per_device(graph, ctx) for ctx in contexts])[:, None], 0.0)
    act_bytes = np.array([ctx.precision.act_bytes for ctx in contexts])[:, None]
    inputs = stack([c.inputs for c in costs])
    if contexts[0].workload.mode != "train":
        io = inputs + stack([_outputs(c.outputs, head, _logits_share(ctx.workload)) for c, ctx in zip(costs, contexts)])
        largest = (split.runs * io[:, None, :]).max(axis=2) if pp > 1 else io.max(axis=1)[:, None]
        return (largest * act_bytes + logits * LOGITS_BYTES).tolist()
    per_micro_batch = (split.matrix @ inputs[:, :, None])[..., 0]
    held = np.minimum(pp - np.arange(pp), np.array([ctx.workload.microbatches for ctx in contexts])[:, None])
    return ((held * per_micro_batch + 0.0) * act_bytes + logits * LOGITS_BYTES).tolist()


def _training_state_bytes(graph: ComputationalGraph, layout: Layout, workload: Workload) -> tuple[list, list]:
    """Per stage: fp32 gradients of the parameters a device holds, and the Adam state (sharded
    over the data-parallel replicas with zero)."""
    expert_dp = expert_data_parallel(layout)
    per_stage = [local_params(graph, layout, stage) for stage in range(layout.pp)]
    optimizer = [dense / layout.dp + expert / expert_dp if workload.zero else dense + expert for dense, expert in per_stage]
    return ([(dense + expert) * GRAD_BYTES_PER_PARAM for dense, expert in per_stage],
            [params * OPTIMIZER_BYTES_PER_PARAM[workload.dtype] for params in optimizer])


def local_params(graph: ComputationalGraph, layout: Layout, stage: int) -> tuple[float, float]:
    """(non-expert, expert) parameters one device of `stage` holds."""
    dense, _, _, experts = _stage_params(graph, layout)[stage]
    return dense, experts / _expert_split(layout)


def _expert_split(layout: Layout) -> int:
    """Experts split ep ways, or tp ways like a dense MLP with ep = 1."""
    return layout.ep if layout.ep > 1 else layout.tp


def _stage_params(graph: ComputationalGraph, layout: Layout) -> list[tuple[float, float, float, float]]:
    """Per stage: (non-expert, non-expert GEMM, other, all experts) parameters one device holds, the
    experts before _expert_split. Tp-split weights split by tp_split, the rest whole; a tied lm_head
    shares the embedding's storage when both sit on one device (pp = 1). Counted for every tp size at once, and
    kept per (tp, pp) too: one lookup for the several calls of each configuration."""
    return _MEMO.get(graph, ("params of tp", layout.tp, layout.pp), lambda: _params_of_tp(graph, layout.tp, layout.pp))


def _params_of_tp(graph: ComputationalGraph, tp: int, pp: int) -> list[tuple[float, float, float, float]]:
    sizes = columns(graph).sizes_with(tp)  # per the graph's columns (its nodes): a model's prefill and decode share it
    counted = per_nodes(_MEMO, graph, ("params", sizes, pp), lambda: _count_stage_params(graph, sizes, pp))
    return counted[sizes.index(tp)]


def _count_stage_params(graph: ComputationalGraph, sizes: tuple[int, ...],
                        pp: int) -> list[list[tuple[float, float, float, float]]]:
    """_stage_params of every tp in `sizes`: one matmul over the (tp x node x kind) stack, which numpy runs as the
    same matrix product per tp as for a tp alone (so each equals it bit for bit)."""
    apart = pp > 1 and bool(columns(graph).attrs["tied"].any())  # a tied lm_head stored on its own
    by_kind = per_nodes(_MEMO, graph, ("param kinds", sizes, apart), lambda: _param_kinds(graph, sizes, apart),
                        lambda kinds, take: kinds.take(take, axis=1))  # elementwise over nodes
    return [[tuple(stage) for stage in per_tp] for per_tp in (stage_split(graph, pp).matrix @ by_kind).tolist()]


def _param_kinds(graph: ComputationalGraph, tp_sizes: tuple[int, ...], tied_apart: bool) -> np.ndarray:
    """(tp x node x kind) parameters one device holds per execution for each tp size: non-expert,
    non-expert GEMM, other, all experts; shared by every pp but for whether a tied lm_head is stored
    apart from the embedding (elementwise in tp: each tp's slice equals it computed alone)."""
    cols = columns(graph)
    a, experts, gemms = cols.attrs, cols.mask("moe_gemm"), cols.attrs["gemm_weights"] > 0
    split = np.where(a["tp_split_weights"] > 0, cols.splits(tp_sizes), 1.0)
    stored = (a["tied"] == 0) | tied_apart
    by_kind = np.empty((*split.shape, 4))
    params = by_kind[..., 0] = np.where(stored & ~experts, a["weights"] / split, 0.0)
    by_kind[..., 1], by_kind[..., 2] = params * gemms, params * ~gemms
    by_kind[..., 3] = np.where(experts, a["weights"], 0.0)
    return by_kind


def _weight_bytes(graph: ComputationalGraph, ctx: Context) -> list[float]:
    layout, dtype = ctx.layout, ctx.workload.dtype
    key = ("weights", layout.tp, layout.ep, layout.pp, dtype, ctx.workload.mode == "train")
    return _MEMO.get(graph, key, lambda: _count_weight_bytes(graph, ctx))


def _count_weight_bytes(graph: ComputationalGraph, ctx: Context) -> list[float]:
    p, expert_split = ctx.precision, _expert_split(ctx.layout)
    return [(gemm + experts / expert_split) * p.gemm_weight_bytes + other * p.other_weight_bytes
            for _, gemm, other, experts in _stage_params(graph, ctx.layout)]


def _kv_cache_bytes(graph: ComputationalGraph, ctx: Context) -> list[float]:
    """Every sequence of the replica keeps kv_len cached tokens per layer of the stage (all
    micro-batches stay resident), a shared prefix once per group (shared_prefix.cached_tokens). MLA caches one
    latent that every tp rank keeps whole."""
    tp, pp = ctx.tp, ctx.layout.pp  # per graph, tp and pp: one lookup per call
    per_token = _MEMO.get(graph, ("kv_cache of tp", tp, pp), lambda: _kv_elements_of_tp(graph, tp, pp))
    tokens = cached_tokens(ctx.workload.batch / ctx.layout.dp, ctx)
    return [elements * tokens * ctx.precision.act_bytes for elements in per_token]


def _kv_elements_of_tp(graph: ComputationalGraph, tp: int, pp: int) -> list[float]:
    """tp's row of the cached elements per token and stage, computed for every tp size per the graph's columns."""
    sizes = columns(graph).sizes_with(tp)
    key = ("kv_cache", sizes, pp)
    return per_nodes(_MEMO, graph, key, lambda: _kv_elements_per_token(graph, sizes, pp))[sizes.index(tp)]


def _kv_elements_per_token(graph: ComputationalGraph, sizes: tuple[int, ...], pp: int) -> list[list[float]]:
    """Cached elements per token on each stage, for every tp in `sizes` (Columns.sizes_with): elementwise per tp,
    and one matrix-vector product per tp (partition.per_stage), so each equals its tp computed alone."""
    a = columns(graph).attrs
    per_node = a["cache_dim"] / np.minimum(tp_column(sizes), a["cache_heads"])
    return per_stage(stage_split(graph, pp).matrix, list(per_node))


def _inference_activation_bytes(graph: ComputationalGraph, ctx: Context) -> list[float]:
    """The largest single op's inputs + outputs (activations are freed layer by layer), plus fp32 logits."""
    io, pp = costs_for(graph, ctx).inputs + _inference_outputs(graph, ctx), ctx.layout.pp
    largest = (stage_split(graph, pp).runs * io).max(axis=1).tolist() if pp > 1 else [float(io.max())]  # pp 1 runs all
    logits = _logits_elements(graph, ctx)
    return [op * ctx.precision.act_bytes + head * LOGITS_BYTES for op, head in zip(largest, logits)]


def _inference_outputs(graph: ComputationalGraph, ctx: Context) -> np.ndarray:
    """Output elements of every op; a log-prob pass's head outputs one chunk of its positions at a time (the
    backend maps its projection over chunks of logits_chunk positions), not all of them."""
    return _outputs(costs_for(graph, ctx).outputs, columns(graph).index.get("lm_head"), _logits_share(ctx.workload))


def _outputs(outputs: np.ndarray, head: int | None, share: float) -> np.ndarray:
    if head is None or share == 1.0:
        return outputs
    outputs = outputs.copy()
    outputs[head] *= share
    return outputs


def _training_activation_bytes(graph: ComputationalGraph, ctx: Context) -> list[float]:
    """Inputs every op saves for backward, per micro-batch, times the micro-batches a stage holds
    under 1F1B (stage i of pp: min(pp - i, m)). With recompute a layer keeps its input and the outputs
    of its `recompute_keeps` ops (kept_outputs), and one layer's saved set is live at a time."""
    workload, pp = ctx.workload, ctx.layout.pp
    counts = stage_split(graph, pp).matrix
    costs = costs_for(graph, ctx)
    saved, outputs = costs.inputs, costs.outputs  # by each execution of each op
    if workload.recompute:
        in_layer = columns(graph).attrs["in_layer"] > 0
        kept = (counts @ (saved * ~in_layer + outputs * kept_outputs(graph, workload.recompute_keeps))).tolist()
        bounds = stage_layer_bounds(graph.meta["num_layers"], pp)
        per_micro_batch = [(bounds[s + 1] - bounds[s]) * ctx.dims["tokens"] * graph.meta["hidden_size"] + kept[s]
                           for s in range(pp)]
        live = [_largest_layer_saved(graph, saved, bounds[s], bounds[s + 1]) for s in range(pp)]
    else:
        per_micro_batch, live = (counts @ saved).tolist(), [0.0] * pp
    logits = _logits_elements(graph, ctx)
    return [(min(pp - s, workload.microbatches) * per_micro_batch[s] + live[s]) * ctx.precision.act_bytes
            + logits[s] * LOGITS_BYTES for s in range(pp)]


def kept_outputs(graph: ComputationalGraph, keeps: tuple[str, ...]) -> np.ndarray:
    """1 for the decoder-layer nodes whose outputs a recomputed layer keeps: those of the `keeps` op
    types, except each layer's last one (it only feeds the residual sum, the next layer's kept input:
    an autodiff saves nothing of it, as JAX's policies save only what the backward pass reads)."""
    kept = np.zeros(len(graph.nodes))
    for members in _layer_kinds(graph).values():
        chosen = [index for index in members if graph.nodes[index].op_type in keeps]
        kept[chosen[:-1]] = 1.0
    return kept


def _largest_layer_saved(graph: ComputationalGraph, saved: np.ndarray, first: int, end: int) -> float:
    largest = 0.0
    for layers, members in _layer_kinds(graph).items():
        if any(first <= layer < end for layer in layers):
            largest = max(largest, float(saved[members].sum()))
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


def _logits_elements(graph: ComputationalGraph, ctx: Context) -> list[float]:
    """fp32 logits elements per stage: on the stage that runs lm_head; a chunked loss (logits_chunk)
    holds one chunk of positions per sequence at a time."""
    head, logits = columns(graph).index.get("lm_head"), _logits_per_device(graph, ctx)
    return [logits if head is not None and counts[head] else 0.0 for counts in stage_counts(graph, ctx.layout.pp)]


def _logits_per_device(graph: ComputationalGraph, ctx: Context) -> float:
    return ctx.dims["logit_tokens"] * graph.meta["vocab_size"] / ctx.tp * _logits_share(ctx.workload)


def _logits_share(workload: Workload) -> float:
    """The share of its projected positions whose logits a chunked loss or log-prob pass holds at once."""
    chunk = workload.logits_chunk
    if chunk is None or not (workload.mode == "train" or workload.loss_len):
        return 1.0
    positions = loss_positions(workload)
    return min(chunk, positions) / positions
