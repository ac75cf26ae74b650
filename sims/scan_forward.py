"""A forward pass that scans its decoder layers over stacked weights (`workload.scanned`, prefill mode): the maxtext
backend's passes without a KV cache (its log-prob passes, `nn.scan` over a "layers" axis). The rollout's prefill
runs its layers unrolled over the cache and is not scanned.

Every layer of the scan slices its weights out of the stack into buffers of their own (XLA's dynamic-slice kernels,
not fused into the GEMMs: the compiled programs of docs/simulator.md "The xla stack's table"): a copy of the layer's
weights, read and written, on every pass, whatever the batch, plus the loop's own kernels per layer. Costed per stack
(sims/stacks.yaml `scanned_forward`) as copy_passes x the layer's weight bytes at the card's peak memory bandwidth
+ layer_us per layer; on weights sharded over dp (`shard_weights`) each device slices its shard.
"""

from __future__ import annotations

from sims.calculator import Context
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
        nbytes = elements * ctx.precision.gemm_weight_bytes * spec.copy_passes
        seconds = nbytes / ctx.hw.memory_bytes_per_s + layers * spec.layer_us * 1e-6
        rows.append((("scan_weight_slices", "elementwise", layers, 0.0, nbytes, seconds, "memory"),))
    return rows
