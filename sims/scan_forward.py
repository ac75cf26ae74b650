"""A forward pass that scans its decoder layers over stacked weights (`workload.scanned`, prefill mode): the maxtext
backend's passes without a KV cache (its log-prob passes, `nn.scan` over a "layers" axis). The rollout's prefill
runs its layers unrolled over the cache and is not scanned.

Every layer of the scan slices its weights out of the stack into buffers of their own (XLA's dynamic-slice kernels,
not fused into the GEMMs: the compiled programs of docs/simulator.md "The xla stack's table"): a copy of the layer's
weights, read and written, on every pass, whatever the batch, plus the loop's own kernels per layer. Costed per stack
(sims/stacks.yaml `scanned_forward`) as copy_passes x the layer's weight bytes at the card's peak memory bandwidth
+ layer_us per layer; on weights sharded over dp (`shard_weights`) each device slices its shard.

A pass over weights stored wider than it computes (`workload.param_dtype`: the float32 master weights of the maxtext
backend's log-prob passes) converts them as it uses them (docs/simulator.md "Session 25", from the passes' profiles):
each slice reads the stored bytes and writes the pass's (one fused kernel), so a byte copied is their mean; and its
log-prob head converts the whole vocabulary projection in every chunk of logits_chunk positions (not hoisted out of
the chunk loop), a tied head transposing the stored embedding once first. Those are copies too, costed alike.
"""

from __future__ import annotations

import math

from sims.calculator import Context, loss_positions
from sims.interpolators import WEIGHT_BYTES
from sims.ir import ComputationalGraph
from sims.partition import stage_layer_bounds
from sims.sharded_forward import device_elements
from sims.stacks import DEFAULT_STACK, required_section
from sims.workload import Layout


def stage_layer_elements(graph: ComputationalGraph, layout: Layout, first: int, end: int) -> float:
    """The weight elements one device holds of decoder layers first..end-1 (norms and biases included): tp-split
    weights split tp ways, experts over ep (or tp with ep = 1), as sims/memory.py holds them."""
    return sum(device_elements(node, layout) * sum(first <= layer < end for layer in node.layers)
               for node in graph.nodes if node.weights)


def scanned_forward_rows(graph: ComputationalGraph, ctx: Context) -> list[tuple]:
    """Per stage, the scan's weight slices of one forward pass (a row each) when the workload is scanned; ()
    otherwise."""
    layout, w = ctx.layout, ctx.workload
    if not w.scanned:
        return [()] * layout.pp
    spec = required_section(graph.meta.get("stack", DEFAULT_STACK), "scanned_forward", "workload.scanned",
                            "it runs its layers unrolled")
    shards = layout.dp if w.shard_weights else 1
    bounds, rows = stage_layer_bounds(graph.meta["num_layers"], layout.pp), []
    for stage in range(layout.pp):
        first, end = bounds[stage], bounds[stage + 1]
        layers, elements = end - first, stage_layer_elements(graph, layout, first, end) / shards
        nbytes = elements * copied_bytes(ctx) * spec.copy_passes
        seconds = nbytes / ctx.hw.memory_bytes_per_s + layers * spec.layer_us * 1e-6
        rows.append((("scan_weight_slices", "elementwise", layers, 0.0, nbytes, seconds, "memory"),))
    return rows


def copied_bytes(ctx: Context) -> float:
    """Bytes a weight copy moves per element and pass over it: the mean of the stored weight's read and the pass's
    write (one each when stored in the pass's dtype)."""
    stored = WEIGHT_BYTES[ctx.workload.param_dtype or ctx.workload.dtype]
    return (stored + ctx.precision.gemm_weight_bytes) / 2


def head_cast_rows(graph: ComputationalGraph, ctx: Context) -> list[tuple]:
    """Per stage, a log-prob pass's conversions of the vocabulary head (workload.loss_len) from weights stored wider
    than the pass computes (workload.param_dtype) on the stage with lm_head: one per chunk of logits_chunk positions,
    and a tied head's transpose of the stored embedding once; () elsewhere and for weights stored as computed."""
    w = ctx.workload
    stored = WEIGHT_BYTES[w.param_dtype or w.dtype]
    if not w.loss_len or stored == ctx.precision.gemm_weight_bytes:
        return [()] * ctx.layout.pp
    spec = required_section(graph.meta.get("stack", DEFAULT_STACK), "scanned_forward", "workload.param_dtype",
                            "it casts no stored weights")
    head = graph.node("lm_head")
    elements = device_elements(head, ctx.layout) / (ctx.layout.dp if w.shard_weights else 1)
    positions = loss_positions(w)
    chunks = math.ceil(positions / min(w.logits_chunk or positions, positions))
    cast = chunks * elements * copied_bytes(ctx) * spec.copy_passes  # a copy of the head per chunk
    rows = (("head_weight_cast", "elementwise", chunks, 0.0, cast, cast / ctx.hw.memory_bytes_per_s, "memory"),)
    if head.attrs.get("tied"):  # [V, H] stored, used as [H, V]: transposed once in the stored dtype
        moved = elements * stored * spec.copy_passes
        rows += (("head_weight_transpose", "elementwise", 1, 0.0, moved, moved / ctx.hw.memory_bytes_per_s, "memory"),)
    return [()] * (ctx.layout.pp - 1) + [rows]
