"""A training micro-batch's work beyond the graph's kernels where the update runs as JAX runs it (the `xla`
stack, our maxtext backend), added per micro-batch by sims/step.py:

- the scan over stacked layer weights (`nn.scan`) runs its own kernels every layer and micro-batch (a
  jitted call per micro-batch: weight slices, stacked-gradient updates, copies: 143 kernels per layer and
  micro-batch in the H100 profile of docs/benchmarks.md against the graph's ~30), a time per layer that
  neither tp nor fsdp shrinks; it also writes what each layer saves for the backward into stacked buffers and
  copies it out again, bytes at the card's peak memory bandwidth per saved byte: without remat every op's input,
  under remat `minimal` the GEMM outputs it keeps (device-to-device copies of each layer's slice in the backward,
  55 ms of a 1.5B update at micro-batch 64 on an H200, docs/simulator.md "Session 23"), none under full remat;
  all measured per stack (sims/stacks.yaml `scanned_update`);
- weights sharded over the data-parallel axis (fsdp: `workload.shard_weights`) are all-gathered for the
  forward and again for the backward, and their fp32 gradients reduce-scattered, every micro-batch (not once
  per step as a ZeRO-1 optimizer's sync), costed with the collective model (sims/comm.py); a stack with a
  `scanned_update` leaves its `fsdp_exposed` share of them on the step's path (XLA's async collectives hide the
  rest behind the layers' compute), any other stack all of it.
"""

from __future__ import annotations

import numpy as np

from sims.calculator import Context, all_gather_s, reduce_scatter_s
from sims.ir import ComputationalGraph
from sims.memory import kept_outputs, local_params
from sims.op_columns import columns
from sims.partition import expert_data_parallel, per_stage, stage_layer_bounds
from sims.stacks import DEFAULT_STACK, stack
from sims.train_work import GRAD_BYTES


def saved_layer_bytes(graph: ComputationalGraph, contexts: list[Context], inputs: list[np.ndarray],
                      outputs: list[np.ndarray], counts: np.ndarray) -> list[list[float]]:
    """Per binding (its context, of one pp and recompute, and its input and output elements per op) and stage, the
    bytes one micro-batch's decoder layers save for the backward through the scan's stacked buffers, as
    sims/memory.py counts them (`counts`: executions per stage and node): without recompute every layer op's inputs;
    under recompute the outputs of the `recompute_keeps` ops (remat `minimal`: the GEMMs'), none under full."""
    workload = contexts[0].workload
    if workload.recompute:
        kept = kept_outputs(graph, workload.recompute_keeps)
        if not kept.any():
            return [[0.0] * contexts[0].layout.pp for _ in inputs]
        elements = per_stage(counts, [x * kept for x in outputs])
        return [[e * ctx.precision.act_bytes for e in row] for ctx, row in zip(contexts, elements)]
    in_layer = columns(graph).attrs["in_layer"] > 0
    elements = per_stage(counts, [x * in_layer for x in inputs])
    return [[e * ctx.precision.act_bytes for e in row] for ctx, row in zip(contexts, elements)]


def scan_rows(graph: ComputationalGraph, ctx: Context, saved_bytes: list[float]) -> list[tuple]:
    """Per stage, the scanned update's copies of one micro-batch (a row each), or () for a stack without
    `scanned_update`."""
    scanned = stack(graph.meta.get("stack", DEFAULT_STACK)).scanned_update
    if scanned is None or ctx.workload.mode != "train":
        return [()] * len(saved_bytes)
    rows = []
    bounds = stage_layer_bounds(graph.meta["num_layers"], ctx.layout.pp)
    passes = scanned.kept_byte_passes if ctx.workload.recompute else scanned.saved_byte_passes
    for stage, saved in enumerate(saved_bytes):
        nbytes = saved * passes
        seconds = nbytes / ctx.hw.memory_bytes_per_s + (bounds[stage + 1] - bounds[stage]) * scanned.layer_us * 1e-6
        rows.append((("scan_copies", "elementwise", 1, 0.0, nbytes, seconds, "memory"),))
    return rows


def fsdp_rows(graph: ComputationalGraph, ctx: Context) -> list[tuple]:
    """Per stage, one micro-batch's weight all-gathers (forward, backward) and gradient reduce-scatter when
    the weights are sharded over dp (workload.shard_weights); () otherwise."""
    layout, w, hw = ctx.layout, ctx.workload, ctx.hw
    if not w.shard_weights or w.mode != "train":
        return [()] * layout.pp
    scanned = stack(graph.meta.get("stack", DEFAULT_STACK)).scanned_update
    exposed = scanned.fsdp_exposed if scanned is not None else 1.0
    span, expert_dp, rows = layout.tp * layout.dp, expert_data_parallel(layout), []
    for stage in range(layout.pp):
        gather_s = scatter_s = gathered = 0.0
        for params, group in zip(local_params(graph, layout, stage), (layout.dp, expert_dp)):
            if not params:  # a dense model's expert part: no collective
                continue
            gather_s += 2 * exposed * all_gather_s(params * ctx.precision.act_bytes, group, hw, span)
            scatter_s += exposed * reduce_scatter_s(params * GRAD_BYTES, group, hw, span)
            gathered += params
        gathered_bytes = 2 * gathered * ctx.precision.act_bytes  # forward and backward
        rows.append((("fsdp_weight_gather", "all_gather", 2, 0.0, gathered_bytes, gather_s, "comm"),
                     ("fsdp_grad_scatter", "reduce_scatter", 1, 0.0, gathered * GRAD_BYTES, scatter_s, "comm")))
    return rows
