"""Software stacks: which kernels a model's layers run as, per stack (values in sims/stacks.yaml).

The builders describe a model's math once (sims/builders); `apply_stack` rewrites that graph into
the kernels one stack launches: GEMMs it runs as one (merge), ops it folds into a neighbouring
kernel (fused_away), and whether the residual add is its own kernel or counted with the RMSNorm.
An efficiency table is measured on one (hardware, stack) pair (sims/calibration/table.py); a stack
may take another stack's table (`table`) and single ops from a third (`borrowed_ops`, sims/hardware.py).

    stack_for_backend("megatron")   # -> "megatron_local": the stack preflight should simulate
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import yaml

from framework.core.errors import ConfigError
from sims.ir import ComputationalGraph, OpNode, ParallelSpec

STACKS_FILE = Path(__file__).with_name("stacks.yaml")
DEFAULT_STACK = "transformers"
RESIDUAL_MODES = ("with_norm", "own_kernel")


@dataclass(frozen=True)
class HostDispatch:
    """What the host spends launching one micro-batch's forward and backward in an eager stack, as
    measured (sims/stacks.yaml `host_dispatch`): per decoder layer without its collectives, and per
    collective call. A training micro-batch takes at least this long, however fast its kernels."""

    layer_us: float
    collective_us: float
    measured: str  # where the numbers come from (run, card, command)


@dataclass(frozen=True)
class ScannedUpdate:
    """What a training micro-batch of a stack that scans its decoder layers over stacked weights (JAX's
    `nn.scan`) spends beyond its kernels, as measured (sims/stacks.yaml `scanned_update`): bytes at the card's
    peak memory bandwidth per byte a layer saves for the backward (the scan writes it into a stacked buffer
    and copies it out again: saved_byte_passes without remat, kept_byte_passes over the outputs a remat policy
    keeps), and time per decoder layer (the scan's per-iteration kernels: weight slices,
    stacked-gradient updates, copies, whatever the layer's width or sharding); and the share of an fsdp update's
    per-micro-batch weight gathers and gradient scatters left exposed (XLA runs them asynchronously, partly behind
    the layers' compute; 1.0: none hidden)."""

    saved_byte_passes: float
    layer_us: float
    fsdp_exposed: float
    measured: str
    kept_byte_passes: float


@dataclass(frozen=True)
class ScannedForward:
    """What a forward pass of a stack that scans its decoder layers over stacked weights spends beyond its kernels
    (sims/scan_forward.py), as measured (sims/stacks.yaml `scanned_forward`): each layer's weights copied out of the
    stack, copy_passes x their bytes at the card's peak memory bandwidth, and layer_us per layer in the loop's own
    kernels."""

    copy_passes: float
    layer_us: float
    measured: str


@dataclass(frozen=True)
class ShardedForward:
    """How a stack gathers weights sharded on the data-parallel axis for a forward pass (an FSDP rollout,
    sims/sharded_forward.py), as its compiled program shows (sims/stacks.yaml `sharded_forward`): the gathers
    of consecutive weight arrays combined into calls of at most combine_bytes gathered."""

    combine_bytes: int
    measured: str


@dataclass(frozen=True)
class CollectiveGap:
    """The GPU time a stack's forward pass (prefill, decode) loses around each tp / ep collective call beyond the
    collective's own time, as measured (sims/stacks.yaml `forward_collective_gap`): XLA runs a decode step as command
    buffers that end at each collective, so the GPU idles while the next one launches (docs/simulator.md "Session 26")."""

    us: float
    measured: str


@dataclass(frozen=True)
class Stack:
    name: str
    description: str
    backends: tuple[str, ...]
    merge: tuple[tuple[str, tuple[str, ...]], ...]
    fused_away: tuple[str, ...]
    residual_add: str
    table: str  # the stack whose efficiency table serves this one
    borrowed_ops: tuple[tuple[str, str], ...]  # (op, stack whose table times it)
    host_dispatch: HostDispatch | None  # None: the host never sets the pace (not measured, or CUDA graphs)
    scanned_update: ScannedUpdate | None  # None: layers run unrolled (no stacked buffers to copy through)
    scanned_forward: ScannedForward | None  # None: its forward passes run their layers unrolled
    sharded_forward: ShardedForward | None  # None: the stack never decodes on fsdp-sharded weights
    forward_collective_gap: CollectiveGap | None  # None: a forward's collectives cost their own time only


@lru_cache(maxsize=1)
def stacks() -> dict[str, Stack]:
    """Every stack of sims/stacks.yaml by name."""
    records = yaml.safe_load(STACKS_FILE.read_text())
    parsed = {}
    for name, record in records.items():
        if record["residual_add"] not in RESIDUAL_MODES:
            raise ConfigError(f"{STACKS_FILE}: {name}.residual_add is {record['residual_add']!r}; valid: with_norm, own_kernel")
        merge = tuple((new, tuple(parts)) for new, parts in record["merge"].items())
        parsed[name] = Stack(name, record["description"], tuple(record["backends"]), merge,
                             tuple(record["fused_away"]), record["residual_add"], record["table"],
                             tuple(record["borrowed_ops"].items()),
                             *(_section(name, key, kind, record[key]) for key, kind in (
                                 ("host_dispatch", HostDispatch), ("scanned_update", ScannedUpdate),
                                 ("scanned_forward", ScannedForward), ("sharded_forward", ShardedForward),
                                 ("forward_collective_gap", CollectiveGap))))
    for spec in parsed.values():
        if spec.scanned_update is not None and not 0.0 <= spec.scanned_update.fsdp_exposed <= 1.0:
            raise ConfigError(f"{STACKS_FILE}: {spec.name}.scanned_update.fsdp_exposed is "
                              f"{spec.scanned_update.fsdp_exposed}; valid: a share from 0 to 1")
        for key, named in (("table", spec.table), *((f"borrowed_ops.{op}", donor) for op, donor in spec.borrowed_ops)):
            if named not in parsed:
                raise ConfigError(f"{STACKS_FILE}: {spec.name}.{key} is {named!r}; valid: {', '.join(parsed)}")
    return parsed


_CASTS = {"float": float, "int": int, "str": str}  # the section dataclasses' field types (annotations as text)


def _section(name: str, key: str, kind: type, record: dict | None) -> Any:
    """A stack's optional `key` section (host_dispatch, scanned_update, scanned_forward, sharded_forward,
    forward_collective_gap) as `kind`, or None."""
    if record is None:
        return None
    fields = kind.__dataclass_fields__
    if set(record) != set(fields):
        raise ConfigError(f"{STACKS_FILE}: {name}.{key} has {sorted(record)}; valid: {sorted(fields)}")
    return kind(**{field: _CASTS[spec.type](record[field]) for field, spec in fields.items()})


def required_section(stack_name: str, key: str, asked: str, without: str) -> Any:
    """Stack `stack_name`'s `key` section (scanned_forward, sharded_forward, ...) that a workload asked for (`asked`:
    its key as the error names it); ConfigError naming the stacks that have one when it is null (`without`: what a
    stack without one does)."""
    spec = getattr(stack(stack_name), key)
    if spec is None:
        known = ", ".join(s.name for s in stacks().values() if getattr(s, key) is not None)
        raise ConfigError(f"{asked}: stack {stack_name!r} has no {key} in {STACKS_FILE.name} ({without}); stacks "
                          f"that have one: {known}")
    return spec


def stack(name: str) -> Stack:
    known = stacks()
    if name not in known:
        raise ConfigError(f"stack is {name!r}; valid: {', '.join(known)}")
    return known[name]


def stack_for_backend(backend: str) -> str:
    """The stack a Crucible backend runs (maxtext -> xla, megatron -> megatron_local, torch ->
    transformers), for preflight predictions of that backend's runs."""
    for candidate in stacks().values():
        if backend in candidate.backends:
            return candidate.name
    served = ", ".join(b for s in stacks().values() for b in s.backends)
    raise ConfigError(f"backend {backend!r} has no simulator stack; stacks cover: {served}")


def apply_stack(graph: ComputationalGraph, name: str) -> ComputationalGraph:
    """The graph as `name`'s kernels. The builders' graph is the `with_norm`, nothing-merged form."""
    spec = stack(name)
    nodes = [n for n in graph.nodes if n.name not in spec.fused_away]
    for new_name, parts in spec.merge:
        nodes = _merge_column_gemms(nodes, new_name, parts)
    if spec.residual_add == "own_kernel":
        nodes = _split_residual_adds(nodes)
    if spec.forward_collective_gap is not None:  # carried by the node: calculator.comm_cost, vector_cost read it
        gap = {"forward_gap_us": spec.forward_collective_gap.us}
        nodes = [replace(n, attrs={**n.attrs, **gap}) if n.is_comm else n for n in nodes]
    return replace(graph, nodes=nodes, meta={**graph.meta, "stack": name})


def _merge_column_gemms(nodes: list[OpNode], new_name: str, parts: tuple[str, ...]) -> list[OpNode]:
    """Column-parallel GEMMs reading one input as one GEMM over their concatenated outputs (a
    fused QKV projection). A part that splits at most `max_split` ways (kv heads) keeps that
    limit through `limited_width` / `limited_split` (sims.partition.tp_split)."""
    members = [n for n in nodes if n.name in parts]
    if len(members) != len(parts):
        return nodes  # the model has no such pair (e.g. MLA attention)
    first = members[0]
    widths = [m.weights[0][-1] for m in members]
    k = first.weights[0][-2]
    limited = [(m.weights[0][-1], m.attrs["max_split"]) for m in members if "max_split" in m.attrs]
    if len(limited) > 1 or {m.parallel.tp_mode for m in members} != {"column"}:
        raise ConfigError(f"stack merge {new_name}: {', '.join(parts)} must be column GEMMs with at most one split limit")
    width = sum(widths)
    biases = [(width,)] if any(len(m.weights) > 1 for m in members) else []
    attrs = {"limited_width": limited[0][0], "limited_split": limited[0][1]} if limited else {}
    merged = replace(first, name=new_name, outputs=(("tokens", width),), weights=((k, width), *biases), attrs=attrs)
    index = nodes.index(first)
    rest = [n for n in nodes if n.name not in parts]
    return rest[:index] + [merged] + rest[index:]


def _split_residual_adds(nodes: list[OpNode]) -> list[OpNode]:
    """A separate add kernel (read two streams, write one) before each norm that took the residual."""
    result = []
    for node in nodes:
        if node.attrs.get("fused_residual"):
            width = node.inputs[0]
            result.append(OpNode(f"{node.name}_residual_add", "elementwise", (width, width), (width,),
                                 dtype=node.dtype, parallel=ParallelSpec(), layers=node.layers,
                                 attrs={"flops_per_element": 1}))
            node = replace(node, attrs={k: v for k, v in node.attrs.items() if k != "fused_residual"})
        result.append(node)
    return result
