"""Per-op cost on one device: roofline with efficiency factors and a kernel floor, measured curves
where the efficiency table has them, and collectives (the step is summed in sims/step.py).

Per op and device:  time = max(flops / (peak * eff_compute), bytes / (bandwidth * eff_memory)) + floor
(a GEMM with measured shapes in the efficiency table uses the interpolated measurement instead).
Collectives over n devices: latency + bus_factor(n) * bytes / bus bandwidth (sims/comm.py; fitted
to NCCL measurements when the efficiency table has them, else from the link bandwidth):
  all-reduce   bus factor 2 (n-1)/n
  all-gather   (n-1)/n                                       (bytes: the gathered tensor)
  all-to-all   (n-1)/n                                       (bytes: what one device sends)
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from sims.calibration.gemm_interpolate import GemmInterpolator
from sims.calibration.interpolate import OpInterpolator
from sims.interpolators import WEIGHT_BYTES, gemm_interpolator, op_interpolator
from sims.comm import collective_s
from sims.hardware import HardwareSpec
from sims.ir import ComputationalGraph, OpNode
from sims.partition import numel, tp_split, weight_numel
from sims.workload import Layout, Workload

OP_CLASS = {
    "gemm": "gemm",
    "moe_gemm": "moe",
    "attention": "attention",
    "norm": "norm",
    "elementwise": "elementwise",
    "embedding": "embedding",
    "router": "router",
}


@dataclass(frozen=True)
class Precision:
    """Bytes and peak rates for a workload dtype. fp8 applies to GEMM and expert weights and
    their FLOPs; attention, norms, activations and the KV cache stay bf16."""

    dtype: str
    act_bytes: int
    gemm_weight_bytes: int
    other_weight_bytes: int
    gemm_peak: float
    other_peak: float

    @classmethod
    def of(cls, dtype: str, hw: HardwareSpec, training: bool) -> "Precision":
        act = 4 if dtype == "fp32" else 2
        other_dtype = "bf16" if dtype == "fp8" else dtype
        # Training keeps bf16 weights and casts to fp8 per GEMM (Transformer Engine).
        gemm_weight = act if training else WEIGHT_BYTES[dtype]
        return cls(
            dtype, act, gemm_weight, act, hw.peak_flops(dtype), hw.peak_flops(other_dtype) or hw.peak_flops(dtype)
        )


@dataclass(frozen=True)
class OpCost:
    flops: float
    bytes: float
    time_s: float
    bound: str  # compute | memory | floor | comm


@dataclass
class StepEstimate:
    latency_s: float
    model_flops: float  # whole-model FLOPs of one step (no recompute), for MFU
    rows: Callable[[], list[dict]]  # built on demand: a sweep mostly wants the headline numbers
    stage: int  # the slowest pipeline stage, whose ops `rows` lists


@dataclass
class Context:
    """What every op-cost function needs for one evaluation."""

    dims: dict[str, float]
    tp: int
    ep: int
    precision: Precision
    hw: HardwareSpec | None = None
    layout: Layout | None = None
    workload: Workload | None = None
    interpolator: GemmInterpolator | None = None
    op_interpolator: OpInterpolator | None = None
    costs: object = None  # its binding's vector_cost.Costs, once costed (vector_cost.costs_for)

    @classmethod
    def for_step(cls, graph: ComputationalGraph, hw: HardwareSpec, layout: Layout, workload: Workload,
                 interpolators: tuple | None = None) -> "Context":
        """`interpolators`: hw's (gemm_interpolator, op_interpolator), when the caller looked them up already."""
        precision = _precision(workload.dtype, hw, workload.mode == "train")
        gemm, other = interpolators or (gemm_interpolator(hw), op_interpolator(hw))
        return cls(
            bind_dims(graph, layout, workload),
            layout.tp,
            layout.ep,
            precision,
            hw,
            layout,
            workload,
            gemm,
            other,
        )


_PRECISIONS: OrderedDict[tuple[int, str, bool], tuple[HardwareSpec, Precision]] = OrderedDict()
PRECISIONS_KEPT = 256  # (spec, dtype, mode) entries; the oldest goes first


def _precision(dtype: str, hw: HardwareSpec, training: bool) -> Precision:
    """Precision.of, kept per parsed hardware spec (each entry keeps its spec alive, so an id is never reused
    while it is cached)."""
    cached = _PRECISIONS.get((id(hw), dtype, training))
    if cached is None or cached[0] is not hw:
        cached = _PRECISIONS[(id(hw), dtype, training)] = (hw, Precision.of(dtype, hw, training))
        if len(_PRECISIONS) > PRECISIONS_KEPT:
            _PRECISIONS.popitem(last=False)
    return cached[1]


def loss_positions(workload: Workload) -> int:
    """Positions of each sequence whose logits the loss (train) or a log-prob pass (prefill with loss_len) computes:
    all, or the last loss_len."""
    return min(workload.loss_len or workload.query_len, workload.query_len)


def bind_dims(graph: ComputationalGraph, layout: Layout, workload: Workload) -> dict[str, float]:
    """Symbolic dims for one micro-batch of one dp replica (tp ranks of a replica share tokens)."""
    batch = workload.batch / (layout.dp * workload.microbatches)
    tokens = batch * workload.query_len
    return {
        "batch": batch,
        "seq_len": workload.query_len,
        "kv_len": workload.kv_len,
        "tokens": tokens,
        "logit_tokens": batch * loss_positions(workload) if workload.mode == "train" or workload.loss_len else batch,
        "routed_tokens": tokens * (graph.meta.get("top_k") or 0),
        "shared_prefix": workload.shared_prefix,  # rows per shared prompt (sims/shared_prefix.py), 1 = none
        "prefix_len": workload.seq_len if workload.shared_prefix > 1 else 0,
    }


# --- per-op cost --------------------------------------------------------------------------------


def op_cost(node: OpNode, ctx: Context) -> OpCost | None:
    """Cost of one forward execution of `node` on one device for one micro-batch; None when the
    op does not run in this layout (a collective over a group of one, or a skipped condition)."""
    if node.is_comm:
        return comm_cost(node, ctx)
    flops, nbytes = OP_WORK[node.op_type](node, ctx)
    cls = ctx.hw.efficiency.for_op(node.name, OP_CLASS[node.op_type])
    peak = ctx.precision.gemm_peak if node.op_type in ("gemm", "moe_gemm") else ctx.precision.other_peak
    compute_s = flops / (peak * cls.compute)
    memory_s = nbytes / (ctx.hw.memory_bytes_per_s * cls.memory)
    floor_s = cls.floor_us * 1e-6
    bound = "compute" if compute_s >= memory_s else "memory"
    measured = measured_gemm_s(node, ctx)
    if measured is None:
        measured = measured_op_s(node, ctx, flops, nbytes, floor_s)
    if measured is not None:
        return OpCost(flops, nbytes, max(measured, floor_s), bound if measured > floor_s else "floor")
    if floor_s >= max(compute_s, memory_s):
        bound = "floor"
    return OpCost(flops, nbytes, max(compute_s, memory_s) + floor_s, bound)


def gemm_work(node: OpNode, ctx: Context) -> tuple[float, float]:
    p, dims = ctx.precision, ctx.dims
    split = tp_split(node, ctx.tp)
    mode = node.parallel.tp_mode
    k = node.weights[0][-2]
    out = numel(node.outputs[0], dims)
    inp = numel(node.inputs[0], dims) / (split if mode in ("row", "heads") else 1)
    out_dev = out / (split if mode in ("column", "heads") else 1)
    weights = weight_numel(node.weights) / split
    weight_bytes = p.gemm_weight_bytes if node.op_type == "gemm" else p.other_weight_bytes
    flops = 2.0 * out * k / split
    return flops, (inp + out_dev) * p.act_bytes + weights * weight_bytes


def moe_gemm_work(node: OpNode, ctx: Context) -> tuple[float, float]:
    """Grouped GEMM over token-expert pairs, load assumed balanced. Weight traffic counts only the
    experts some token hits: E * (1 - (1 - k/E)^T) of E experts for T tokens choosing k each."""
    p, dims = ctx.precision, ctx.dims
    experts, k_dim, n_dim = node.weights[0]
    top_k = node.attrs["top_k"]
    tokens = dims["tokens"]  # per dp replica, replicated over its tp ranks
    flops = 2.0 * tokens * top_k * k_dim * n_dim / ctx.tp
    miss = 1.0 - top_k / experts
    if ctx.ep == 1:
        touched = experts * (1.0 - miss**tokens)
        weight_numel = touched * k_dim * n_dim / ctx.tp
    else:
        # tp ranks split their replica's tokens (sequence-parallel) before the all-to-all.
        group_tokens = tokens / ctx.tp * ctx.ep
        touched = experts / ctx.ep * (1.0 - miss**group_tokens)
        weight_numel = touched * k_dim * n_dim
    pairs = tokens * top_k / ctx.tp
    return flops, pairs * (k_dim + n_dim) * p.act_bytes + weight_numel * p.gemm_weight_bytes


def attention_work(node: OpNode, ctx: Context) -> tuple[float, float]:
    """Fused causal attention: the seq_len new tokens are the last of kv_len, so query-key pairs
    per sequence = seq_len*kv_len - seq_len*(seq_len-1)/2. Bytes: q and output once, K/V (or the
    MLA latent) once; kv heads are replicated when tp > kv_heads."""
    a, dims = node.attrs, ctx.dims
    batch, q_len, kv_len = dims["batch"], dims["seq_len"], dims["kv_len"]
    heads = a["heads"] / ctx.tp
    kv_heads = a["kv_heads"] / min(ctx.tp, a["kv_heads"])
    pairs = q_len * kv_len - q_len * (q_len - 1) / 2
    flops = 2.0 * batch * pairs * heads * (a["qk_dim"] + a["v_dim"])
    nbytes = batch * (q_len * heads * (a["qk_dim"] + a["v_dim"]) + kv_len * kv_heads * a["kv_dim"])
    return flops, nbytes * ctx.precision.act_bytes


def norm_work(node: OpNode, ctx: Context) -> tuple[float, float]:
    elements = numel(node.inputs[0], ctx.dims) / tp_split(node, ctx.tp)
    passes = 4 if node.attrs.get("fused_residual") else 2  # + read residual, write new residual
    weights = weight_numel(node.weights)
    return 5.0 * elements, elements * passes * ctx.precision.act_bytes + weights * ctx.precision.other_weight_bytes


def elementwise_work(node: OpNode, ctx: Context) -> tuple[float, float]:
    # MoE token shuffles run on the whole replica's tokens, split over tp only under expert parallelism.
    split = ctx.tp if node.attrs.get("sequence_parallel_with_ep") and ctx.ep > 1 else tp_split(node, ctx.tp)
    inp = sum(numel(shape, ctx.dims) for shape in node.inputs) / split  # a residual add reads two
    out = numel(node.outputs[0], ctx.dims) / split
    return node.attrs.get("flops_per_element", 1) * out, (inp + out) * ctx.precision.act_bytes


def embedding_work(node: OpNode, ctx: Context) -> tuple[float, float]:
    out = numel(node.outputs[0], ctx.dims)
    # Each vocab shard gathers the rows it owns and writes a full (partly zero) output.
    return 0.0, (out / ctx.tp + out) * ctx.precision.act_bytes


OP_WORK = {
    "gemm": gemm_work,
    "router": gemm_work,
    "moe_gemm": moe_gemm_work,
    "attention": attention_work,
    "norm": norm_work,
    "elementwise": elementwise_work,
    "embedding": embedding_work,
}


def measured_gemm_s(node: OpNode, ctx: Context) -> float | None:
    if ctx.interpolator is None or node.op_type != "gemm" or len(node.weights[0]) != 2:
        return None
    k, n = node.weights[0]
    split = tp_split(node, ctx.tp)
    if node.parallel.tp_mode == "column":
        n /= split
    elif node.parallel.tp_mode == "row":
        k /= split
    m = numel(node.inputs[0], ctx.dims) / node.weights[0][0]
    return ctx.interpolator.time_s(m, n, k, ctx.precision.dtype)


def measured_op_s(node: OpNode, ctx: Context, flops: float, nbytes: float, floor_s: float) -> float | None:
    """The op's measured curve at this size, when the table has one. Only grouped expert GEMMs
    follow an fp8 workload's dtype; the other ops stay bf16 under fp8."""
    if ctx.op_interpolator is None or node.op_type == "gemm":
        return None
    dtype = ctx.precision.dtype
    if dtype == "fp8" and node.op_type != "moe_gemm":
        dtype = "bf16"
    if node.op_type == "attention" and ctx.workload.mode == "decode":  # its batch x KV surface, if measured
        return ctx.op_interpolator.time_s(node.name, dtype, flops, nbytes, floor_s, ctx.dims["batch"], ctx.dims["kv_len"])
    # prefill: its batch x prompt surface, if measured; a training step's forward its own forward timings at
    # training shapes (sims/calibration/train_bench.py), else the compute-bound curve, never the decode steps'
    # where a sequence sits at the ridge (GQA 4 at 512 tokens: Llama-3.2-1B's update)
    if node.op_type == "attention" and ctx.workload.mode == "prefill":
        return ctx.op_interpolator.time_s(node.name, dtype, flops, nbytes, floor_s, ctx.dims["batch"],
                                          seq_len=ctx.dims["seq_len"])
    if node.op_type == "attention" and ctx.workload.mode == "train":
        return ctx.op_interpolator.time_s(node.name, dtype, flops, nbytes, floor_s, curve="train")
    return ctx.op_interpolator.time_s(node.name, dtype, flops, nbytes, floor_s)


# --- collectives ---------------------------------------------------------------------------------


def all_reduce_s(nbytes: float, group: int, hw: HardwareSpec, span: int | None = None) -> float:
    """`span`: how many consecutive ranks the group's members are spread over (a dp group strides
    over its tp ranks); it decides intra- vs inter-node. Defaults to the group size."""
    return collective_s("all_reduce", nbytes, group, span or group, hw)


def all_gather_s(gathered_bytes: float, group: int, hw: HardwareSpec, span: int | None = None) -> float:
    return collective_s("all_gather", gathered_bytes, group, span or group, hw)


def reduce_scatter_s(full_bytes: float, group: int, hw: HardwareSpec, span: int | None = None) -> float:
    return collective_s("reduce_scatter", full_bytes, group, span or group, hw)


def all_to_all_s(sent_bytes: float, group: int, hw: HardwareSpec) -> float:
    return collective_s("all_to_all", sent_bytes, group, group, hw)


def send_recv_s(nbytes: float, span: int, hw: HardwareSpec) -> float:
    """Point-to-point between pipeline stages; `span` ranks decide intra- or inter-node."""
    return collective_s("send_recv", nbytes, 2, span, hw)


def comm_cost(node: OpNode, ctx: Context) -> OpCost | None:
    group = ctx.tp if node.parallel.group == "tp" else ctx.ep
    when = node.parallel.when
    if group <= 1 or (when == "ep_is_1" and ctx.ep > 1) or (when == "ep_gt_1" and ctx.ep == 1):
        return None
    if node.attrs.get("inference_only") and ctx.workload.mode == "train":
        return None
    nbytes = numel(node.inputs[0], ctx.dims) * ctx.precision.act_bytes
    if node.op_type == "all_reduce":
        time_s = all_reduce_s(nbytes, group, ctx.hw)
    elif node.op_type == "all_gather":
        time_s = all_gather_s(nbytes, group, ctx.hw)
    else:  # all_to_all: each device sends the routed copies of its 1/tp share of the tokens
        nbytes /= ctx.tp
        time_s = all_to_all_s(nbytes, group, ctx.hw)
    if ctx.workload.mode != "train":  # the stack's idle GPU around a forward's collective (sims/stacks.py)
        time_s += node.attrs.get("forward_gap_us", 0.0) * 1e-6
    return OpCost(0.0, nbytes, time_s, "comm")
