"""The `backward` micro-benchmark kind: what a training step runs beyond the forward kernels.

For every training workload of the plan (`Plan.train_workloads`, batch x seq_len) the model's train
graph is bound to it and each node is timed twice, forward alone and forward + backward
(sims/calibration/kernels_backward.py), both at the FLOPs and bytes the simulator counts for its
forward; the loss over the vocabulary (`cross_entropy`, sims.train_work.loss_work) likewise. Once
per model: the gradient accumulation into fp32 main grads (`grad_accumulate`, per micro-batch) and
the optimizer step with clipping (`optimizer_step`, eager calls: it is launched from the host once
per step), over the model's parameter count.

`derive_backward` turns each forward + backward timing into a backward measurement: its time minus
the forward's at the same size (never under 5% of the pair), kept with the forward time so that the
fitted table holds backward/forward ratios (sims/calibration/backward.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from sims.builders import build_graph
from sims.calculator import bind_dims
from sims.train_work import GRAD_ACCUMULATE_BYTES, loss_work, optimizer_bytes_per_param
from sims.calibration import kernels_backward
from sims.workload import Layout, parse_workload

MIN_BACKWARD_SHARE = 0.05


def train_items(kernels, hf_config: Mapping, hardware: Mapping, plan) -> list:
    from sims.calibration.microbench import Item, benched_nodes  # microbench imports this module

    items, seen = [], set()
    for raw in plan.train_workloads:
        workload = {**raw, "dtype": plan.dtype}
        parsed = parse_workload(workload)
        graph = build_graph(hf_config, "train", plan.stack)
        dims = bind_dims(graph, Layout(), parsed)
        point = {"mode": "train", "batch": parsed.batch, "seq_len": parsed.query_len, "kv_len": parsed.kv_len,
                 "tokens": int(dims["tokens"])}
        for node, work, bench in benched_nodes(graph, dims, workload, kernels, seen, hf_config, hardware, plan.stack):
            forward = {"benchmark": node.name, "op": node.name, "op_class": work["op_class"], "dtype": plan.dtype,
                       **point, "flops": work["flops"], "bytes": work["bytes"]}
            if node.op_type == "gemm" and len(node.weights[0]) == 2:
                forward.update(m=int(dims["tokens"]), n=node.weights[0][1], k=node.weights[0][0])
            residual = node.name.endswith("_residual_add") or node.attrs.get("fused_residual")
            items += pair(Item, bench, forward, work["bytes"], 1 if residual else None,
                          graphs=node.op_type != "embedding")  # its CUDA backward syncs with the host
        vocab = graph.meta["vocab_size"]
        flops, nbytes = loss_work(dims["tokens"], vocab, 1, 4 if plan.dtype == "fp32" else 2)
        loss = kernels_backward.loss(plan.stack, int(dims["tokens"]), vocab, kernels.device, kernels.dtype)
        record = {"benchmark": "cross_entropy", "op": "cross_entropy", "op_class": "elementwise", "own_op_only": True,
                  "dtype": plan.dtype, **point, "flops": flops, "bytes": nbytes}
        items += pair(Item, loss, record, nbytes)
    return items + update_items(Item, kernels, hf_config, plan)


def pair(item_type, bench, forward: dict, nbytes: float, residual_arg: int | None = None, graphs: bool = True) -> list:
    """Items timing `bench` forward, and forward + backward (a record without op_class: not fitted).
    residual_arg: the bench's argument that is the residual stream (kernels_backward.with_backward)."""
    both = {k: v for k, v in forward.items() if k not in ("op_class", "m", "n", "k", "own_op_only")}
    both |= {"benchmark": f"{forward['op']}_forward_backward", "backward_of": forward["op_class"]}
    pair_bench = kernels_backward.with_backward(bench, residual_arg)
    return [item_type(bench, forward, nbytes), item_type(pair_bench, both, 3 * nbytes, graphs=graphs)]


def update_items(item_type, kernels, hf_config: Mapping, plan) -> list:
    """The per-micro-batch gradient accumulation and the optimizer step over the model's parameters."""
    shapes = parameter_shapes(build_graph(hf_config, "train", plan.stack))
    params = sum(_numel(shape) for shape in shapes)
    accumulate = {"benchmark": "grad_accumulate", "op": "grad_accumulate", "op_class": "elementwise",
                  "own_op_only": True, "dtype": plan.dtype, "params": params, "flops": float(params),
                  "bytes": float(params * GRAD_ACCUMULATE_BYTES)}
    step = {"benchmark": "optimizer_step", "op": "optimizer_step", "op_class": "optimizer",
            "dtype": plan.dtype, "params": params, "flops": 10.0 * params,
            "bytes": float(params * optimizer_bytes_per_param(plan.dtype))}
    return [
        item_type(kernels_backward.grad_accumulate(params, kernels.device, kernels.dtype), accumulate, accumulate["bytes"]),
        item_type(kernels_backward.optimizer(plan.stack, shapes, kernels.device, kernels.dtype), step, step["bytes"],
                  graphs=False),
    ]


def parameter_shapes(graph) -> list[tuple[int, ...]]:
    """Every weight of the model once per layer it runs in (a tied head shares the embedding's)."""
    shapes = []
    for node in graph.nodes:
        if node.attrs.get("tied"):
            continue
        shapes += [tuple(int(d) for d in shape) for shape in node.weights for _ in node.layers]
    return shapes


def _numel(shape: Sequence[int]) -> int:
    total = 1
    for dim in shape:
        total *= dim
    return total


def derive_backward(measurements: Sequence[dict]) -> list[dict]:
    # a pair takes its own model's forward: two models can run one op on the same work (the log-softmax of two
    # models of one vocabulary at one batch), and the other's forward made the backward another's difference
    forward = {(m.get("model"), m["op"], m["flops"], m["bytes"]): m["time_us"] for m in measurements
               if m.get("op_class") and m.get("mode") == "train"}
    derived = []
    for both in (m for m in measurements if m.get("backward_of")):
        forward_us = forward.get((both.get("model"), both["op"], both["flops"], both["bytes"]))
        if forward_us is None:
            continue
        derived.append({
            "benchmark": f"{both['op']}_backward", "pass": "backward", "op": both["op"], "op_class": both["backward_of"],
            **{k: both[k] for k in ("dtype", "mode", "batch", "seq_len", "kv_len", "tokens", "flops", "bytes")},
            "forward_us": forward_us, "time_us": max(both["time_us"] - forward_us, MIN_BACKWARD_SHARE * both["time_us"]),
            "timing": f"derived: forward+backward minus forward ({both.get('timing')})",
        })
    return derived
