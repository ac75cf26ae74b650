"""A forward pass over weights sharded on the data-parallel axis: the rollout on an FSDP mesh (the maxtext
backend's rollout in the update's layout, parallel.rollout.fsdp > 1; `workload.shard_weights` in prefill or
decode mode).

Every forward pass all-gathers the weight shards it multiplies with: each decoder layer's GEMM weights and
the LM head's (the embedding lookup reads its own shard and moves only activations), in the dtype the pass
computes in (the sampler casts the weights before its decode loop), over the dp group. A decode step is one
forward pass, so decoding max_new_tokens gathers the whole model max_new_tokens times (XLA keeps the gathers
inside the decode loop: the compiled program of docs/simulator.md "Session 14"); the prompts' prefill
gathers it once. The stack combines the gathers of consecutive weight arrays into calls of at most
`combine_bytes` gathered (an array above it goes alone; sims/stacks.yaml `sharded_forward`), and each call
pays the collective's latency; costed with the collective model (sims/comm.py), not overlapped with the
pass's kernels.
"""

from __future__ import annotations

from sims.calculator import Context
from sims.comm import collective_s
from sims.ir import ComputationalGraph, OpNode
from sims.partition import stage_layer_bounds, tp_split, weight_numel
from sims.stacks import DEFAULT_STACK, required_section
from sims.workload import Layout

GEMMS = ("gemm", "moe_gemm")


def gathered_arrays(graph: ComputationalGraph, layout: Layout, stage: int) -> list[float]:
    """The elements of each GEMM weight one device of `stage` multiplies with in one forward pass, in the order
    the pass reaches them: every decoder layer's, then the LM head's (a tied head too: it is the embedding's
    storage). Tp-split weights split tp ways, experts over ep (or tp with ep = 1), as sims/memory.py holds them."""
    bounds = stage_layer_bounds(graph.meta["num_layers"], layout.pp)
    first, end = bounds[stage], bounds[stage + 1]
    gemms = [node for node in graph.nodes if node.op_type in GEMMS and node.weights]
    arrays = []
    for layer in [*range(first, end), *([graph.meta["num_layers"]] if stage == layout.pp - 1 else [])]:
        arrays += [device_elements(node, layout) for node in gemms if layer in node.layers]
    return arrays


def device_elements(node: OpNode, layout: Layout) -> float:
    """The elements of `node`'s weights one device holds (sims/memory.py's split)."""
    elements = float(weight_numel(node.weights))
    if node.op_type == "moe_gemm":
        return elements / (layout.ep if layout.ep > 1 else layout.tp)
    return elements / tp_split(node, layout.tp) if node.parallel.tp_dim is not None else elements


def combined_calls(array_bytes: list[float], combine_bytes: float) -> int:
    """Collective calls once consecutive arrays are combined while a call gathers at most `combine_bytes`."""
    calls, open_bytes = 0, None
    for nbytes in array_bytes:
        if open_bytes is not None and open_bytes + nbytes <= combine_bytes:
            open_bytes += nbytes
        else:
            calls, open_bytes = calls + 1, nbytes
    return calls


def sharded_forward_rows(graph: ComputationalGraph, ctx: Context) -> list[tuple]:
    """Per stage, one forward pass's weight all-gathers (a row each) when an inference pass runs on sharded
    weights (workload.shard_weights, mode prefill or decode) over dp > 1; () otherwise."""
    layout, w = ctx.layout, ctx.workload
    if not w.shard_weights or w.mode == "train" or layout.dp == 1:
        return [()] * layout.pp
    spec = required_section(graph.meta.get("stack", DEFAULT_STACK), "sharded_forward",
                            f"workload.shard_weights in {w.mode} mode", "it never decodes on sharded weights")
    span, rows = layout.tp * layout.dp, []
    for stage in range(layout.pp):
        arrays = [elements * ctx.precision.act_bytes for elements in gathered_arrays(graph, layout, stage)]
        calls, nbytes = combined_calls(arrays, spec.combine_bytes), sum(arrays)
        seconds = calls * collective_s("all_gather", nbytes / calls, layout.dp, span, ctx.hw) if calls else 0.0
        rows.append((("sharded_weight_gather", "all_gather", calls, 0.0, nbytes, seconds, "comm"),))
    return rows
