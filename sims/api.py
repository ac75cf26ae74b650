"""One call: how fast is it, and does it fit?

    from sims import simulate
    result = simulate(hf_config, hardware, {"tp": 8, "ep": 8}, {"mode": "decode", "batch": 64, "context_len": 4096})
    result.summary()          # dict of headline numbers (status, latency_s, mfu, memory, fits, ...)
    result.breakdown_rows()   # per-op rows of the slowest pipeline stage: time, FLOPs, bytes, bound

Bad input (unknown keys, wrong types, an unsupported model) raises ConfigError; a layout that
cannot run the model (tp not dividing heads, too many devices, ...) is a result with
status="invalid" and a reason, so sweeps can report it as a row.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property

from sims.builders import build_graph, graph_and_counts
from sims.calculator import OP_CLASS, Context
from sims.hardware import HardwareSpec, hardware_spec
from sims.interpolators import gemm_interpolator, op_interpolator
from sims.ir import ComputationalGraph
from sims.finish import finish, finish_together
from sims.memory import activations_together
from sims.shared_prefix import attention_cost
from sims.step import sum_stages_together
from sims.vector_cost import cost_together
from sims.stacks import DEFAULT_STACK
from framework.core.errors import ConfigError
from sims.workload import Layout, Workload, layout_problem, parse_layout, parse_workload


@dataclass
class SimResult:
    status: str  # ok | invalid
    reason: str
    model_type: str
    hardware: str
    layout: Layout
    workload: Workload
    params_total: int
    params_active: int
    latency_s: float | None = None
    tokens_per_s_per_device: float | None = None
    mfu: float | None = None
    memory_breakdown_gb: dict[str, float] = field(default_factory=dict)
    memory_capacity_gb: float | None = None
    row_source: Callable[[], list[dict]] | None = None  # builds `rows` when first asked
    stack: str = DEFAULT_STACK
    efficiency_source: str = ""
    warnings: list[str] = field(default_factory=list)  # what a caller should surface to the user

    @cached_property
    def rows(self) -> list[dict]:
        return self.row_source() if self.row_source else []

    @property
    def memory_per_device_gb(self) -> float | None:
        return sum(self.memory_breakdown_gb.values()) if self.memory_breakdown_gb else None

    @property
    def fits(self) -> bool | None:
        used = self.memory_per_device_gb
        return None if used is None else used <= self.memory_capacity_gb

    @property
    def memory_over_gb(self) -> float | None:
        used = self.memory_per_device_gb
        return None if used is None else max(0.0, used - self.memory_capacity_gb)

    def summary(self) -> dict:
        time_by_bound: dict[str, float] = {}
        for row in self.rows:
            time_by_bound[row["bound"]] = time_by_bound.get(row["bound"], 0.0) + row["time_s"]
        return {
            "status": self.status,
            "reason": self.reason,
            "model_type": self.model_type,
            "hardware": self.hardware,
            "mode": self.workload.mode,
            "stack": self.stack,
            "efficiency_table": self.efficiency_source,
            "devices": self.layout.devices,
            "params_total": self.params_total,
            "params_active": self.params_active,
            "latency_s": self.latency_s,
            "tokens_per_s_per_device": self.tokens_per_s_per_device,
            "mfu": self.mfu,
            "memory_per_device_gb": self.memory_per_device_gb,
            "memory_breakdown_gb": dict(self.memory_breakdown_gb),
            "memory_capacity_gb": self.memory_capacity_gb,
            "fits": self.fits,
            "memory_over_gb": self.memory_over_gb,
            "warning": "; ".join(self.warnings),
            "time_by_bound_s": time_by_bound,
        }

    def breakdown_rows(self) -> list[dict]:
        """Per-op rows (name, op_type, count, flops, bytes, time_s, bound) for one device of the
        slowest pipeline stage over one step; their time_s add up to latency_s."""
        return [dict(row) for row in self.rows]


def simulate(
    hf_config: Mapping, hardware: Mapping, layout: Mapping, workload: Mapping, stack: str = DEFAULT_STACK
) -> SimResult:
    """Estimate one step of `workload` for the model `hf_config` (an HF config.json dict) on the
    devices `hardware` (a conf/hardware/*.yaml dict) split by `layout` = {tp, dp, ep, pp}, running
    the kernels of software `stack` (sims/stacks.yaml; `sims.stacks.stack_for_backend` names a
    backend's) timed with that stack's efficiency table.

    workload: mode (prefill | decode | train), batch (sequences over all dp replicas), seq_len
    (prompt or training sequence), context_len (decode: tokens in the KV cache), microbatches,
    recompute, recompute_keeps (op types a recomputed layer keeps), logits_chunk (positions per sequence
    a chunked loss projects at a time), loss_len (train: the last positions of each sequence the loss
    takes logits of; None = all), dtype (bf16 | fp8 | fp32), zero (shard optimizer states over dp), shared_prefix
    (decode: rows per prompt holding its first seq_len cached tokens once; sims/shared_prefix.py)."""
    call = _Call(hf_config, hardware_spec(hardware, stack), stack)
    result, graph, ctx = _prepare(call, layout, workload)
    return result if ctx is None else finish(call, result, graph, ctx)


def simulate_many(
    hf_config: Mapping,
    hardware: Mapping,
    layouts: Sequence[Mapping],
    workloads: Mapping | Sequence[Mapping],
    stack: str = DEFAULT_STACK,
) -> list[SimResult]:
    """`simulate` for each layout of a sweep (with one workload, or the workload at the same position of
    `workloads`), costing them together: the hardware spec is parsed once, every binding of the ops (tp, ep,
    dims per micro-batch, dtype, mode) is costed in one array pass (whatever its plan), their stage sums in one
    per pipeline split, and their activation memory in one per pipeline split. Each result equals the one
    `simulate` returns for its layout alone; bad input raises the ConfigError that call would."""
    if isinstance(layouts, (Mapping, str)) or isinstance(workloads, str):
        raise ConfigError("simulate_many: layouts is a list of layouts ({'tp': .., 'dp': ..}) and workloads one "
                          "workload mapping or a list of them; for one layout call simulate")
    layouts = list(layouts)
    workloads = [workloads] * len(layouts) if isinstance(workloads, Mapping) else list(workloads)
    if len(workloads) != len(layouts):
        raise ConfigError(f"simulate_many: {len(layouts)} layouts but {len(workloads)} workloads; give one "
                          "workload or one per layout")
    call = _Call(hf_config, hardware_spec(hardware, stack), stack)
    prepared = [_prepare(call, layout, workload) for layout, workload in zip(layouts, workloads)]
    by_graph: dict[int, tuple] = {}
    for _, graph, ctx in prepared:
        if ctx is not None:
            by_graph.setdefault(id(graph), (graph, []))[1].append(ctx)
    for graph, contexts in by_graph.values():
        cost_together(graph, contexts)
        sum_stages_together(graph, contexts)
        activations_together(graph, contexts)
    return finish_together(call, prepared)


class _Call:
    """What every configuration of one simulate / simulate_many call shares, looked up once per call: the parsed
    hardware, its interpolators, the uncalibrated-table warning, the (graph, parameter counts) of each mode and the
    bound dims and precision of each (graph, dp, parsed workload)."""

    def __init__(self, hf_config: Mapping, hw: HardwareSpec, stack: str):
        self.hf_config, self.hw, self.stack, self.graphs, self.bound = hf_config, hw, stack, {}, {}
        self.interpolators = (gemm_interpolator(hw), op_interpolator(hw))
        self.warning, self.available = "", f"{hw.memory_gb:g} GB available"  # available: a no-fit reason's tail
        if hw.efficiency.source.startswith("built-in defaults ("):
            self.warning = f"no {stack} efficiency table for {hw.name}: uncalibrated built-in factors"

    def context(self, graph: ComputationalGraph, layout: Layout, workload: Workload) -> Context:
        """Context.for_step, its bound dims and precision shared by the layouts of one dp and parsed workload (a sweep
        over tp, ep and pp binds them alike; the parsed workload is the same object for equal records, and each
        entry keeps it alive, so an id is not reused while it is kept)."""
        key = (id(graph), layout.dp, id(workload))
        bound = self.bound.get(key)
        if bound is None or bound[0] is not workload:
            ctx = Context.for_step(graph, self.hw, layout, workload, self.interpolators)
            self.bound[key] = (workload, ctx.dims, ctx.precision)
            return ctx
        return Context(bound[1], layout.tp, layout.ep, bound[2], self.hw, layout, workload, *self.interpolators)

    def graph_and_counts(self, mode: str) -> tuple[ComputationalGraph, dict]:
        return self.graphs.get(mode) or self.graphs.setdefault(mode, graph_and_counts(self.hf_config, mode, self.stack))


def _prepare(call: _Call, layout: Mapping, workload: Mapping) -> tuple[SimResult, ComputationalGraph, Context | None]:
    """The parsed call: its result (final when the layout cannot run the model: no context), graph and context."""
    parsed_layout = parse_layout(layout)
    parsed_workload = parse_workload(workload)
    graph, counts = call.graph_and_counts(parsed_workload.mode)
    hw = call.hw
    result = SimResult(
        status="ok",
        reason="",
        model_type=graph.meta["model_type"],
        hardware=hw.name,
        layout=parsed_layout,
        workload=parsed_workload,
        params_total=counts["total"],
        params_active=counts["active"],
        stack=call.stack,
        efficiency_source=hw.efficiency.source,
    )
    problem = layout_problem(graph.meta, hw, parsed_layout, parsed_workload)
    if problem:
        result.status, result.reason = "invalid", problem
        return result, graph, None
    return result, graph, call.context(graph, parsed_layout, parsed_workload)


def predict_op(
    hf_config: Mapping,
    hardware: Mapping,
    workload: Mapping,
    op: str,
    layout: Mapping | None = None,
    stack: str = DEFAULT_STACK,
) -> dict | None:
    """One forward execution of the IR node named `op` on one device: {op, op_class, flops, bytes,
    time_s, bound}, with the same accounting `simulate` sums; None for a collective that does not
    run in this layout. Calibration records measured kernels with these FLOPs and bytes, and the
    accuracy benchmark compares single kernels against it."""
    parsed_layout = parse_layout(layout or {})
    parsed_workload = parse_workload(workload)
    hw = hardware_spec(hardware, stack)
    graph = build_graph(hf_config, parsed_workload.mode, stack)
    names = [node.name for node in graph.nodes]
    if op not in names:
        where = f"the {graph.meta['model_type']} {parsed_workload.mode} graph"
        raise ConfigError(f"op {op!r} is not in {where}; valid: {', '.join(names)}")
    node = graph.node(op)
    cost = attention_cost(node, Context.for_step(graph, hw, parsed_layout, parsed_workload))
    if cost is None:
        return None
    op_class = OP_CLASS.get(node.op_type, "comm")
    return {"op": op, "op_class": op_class, "flops": cost.flops, "bytes": cost.bytes, "time_s": cost.time_s,
            "bound": cost.bound}
