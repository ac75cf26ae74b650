"""The vectorised costing (sims/vector_cost.py, sims/op_columns.py) against the per-op reference
(calculator.op_cost), and a sweep's shared caches against each configuration costed alone."""

import itertools

import numpy as np
import pytest
from sims_helpers import hardware, model_config

from sims import build_graph, simulate
from sims.cache import clear_caches
from sims.calculator import Context, op_cost
from sims.hardware import hardware_spec
from sims.memory import (_MEMO, _count_stage_params, _kv_cache_bytes, _kv_elements_per_token, _param_kinds,
                         _stage_params)
from sims.op_columns import _build_columns, _work_coefficients, columns, work_coefficients
from sims.partition import stage_split, tp_split
from sims.step import _STEP_CACHES, _stage_weights, model_flops, stage_weights_of
from sims.vector_cost import (_collectives, _collectives_of, _efficiency, _efficiency_of, _every_tp_arrays,
                               _every_tp_of, _rates, plan_for)
from sims.workload import layout_problem, parse_layout, parse_workload

MODELS = ("qwen3_8b", "qwen3_30b_a3b", "deepseek_v3")
WORKLOADS = (
    {"mode": "prefill", "seq_len": 1000},
    {"mode": "decode", "context_len": 3000},
    {"mode": "train", "seq_len": 2048, "microbatches": 3},
)


def close(a: float, b: float) -> bool:
    return a == b or abs(a - b) <= 1e-12 * max(abs(a), abs(b))


def layouts(graph, hw, workload):
    for tp, dp, ep, pp in itertools.product((1, 2, 4, 8), (1, 3), (1, 2, 8), (1, 2)):
        layout = parse_layout({"tp": tp, "dp": dp, "ep": ep, "pp": pp})
        if layout_problem(graph.meta, hw, layout, workload) is None:
            yield layout


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("table", [None, "sims/calibration/tables/h100.json"])
def test_every_op_of_a_plan_costs_what_op_cost_says(model, table):
    hw = hardware_spec(hardware("h100", efficiency_table=table, nodes=4))
    checked = 0
    for shape, dtype in itertools.product(WORKLOADS, ("bf16", "fp8")):
        workload = parse_workload({**shape, "batch": 24, "dtype": dtype})
        graph = build_graph(model_config(model), workload.mode)
        for layout in layouts(graph, hw, workload):
            ctx = Context.for_step(graph, hw, layout, workload)
            costs = plan_for(graph, ctx).cost(ctx)
            # FLOPs and activation elements come from one stacked product: each part equals its own product
            # (to 1e-12: a BLAS may sum a row of a taller matrix in another order)
            flops, _, inputs, outputs = work_coefficients(graph, layout.tp, layout.ep, workload.mode)
            features = columns(graph).values([ctx.dims])[0]
            for got, alone in ((costs.flops, flops), (costs.inputs, inputs), (costs.outputs, outputs)):
                assert np.allclose(got, alone @ features, rtol=1e-12, atol=0.0), layout
            for i, node in enumerate(graph.nodes):
                reference = op_cost(node, ctx)
                assert bool(costs.runs[i]) == (reference is not None), (node.name, layout)
                if reference is None:
                    assert costs.time_s[i] == 0.0
                    continue
                got = (float(costs.flops[i]), float(costs.bytes[i]), float(costs.time_s[i]))
                assert all(map(close, got, (reference.flops, reference.bytes, reference.time_s))), (node.name, layout)
                assert costs.bounds[i] == reference.bound, (node.name, layout)
                checked += 1
    assert checked > 1000


@pytest.mark.parametrize("model", MODELS)
def test_every_tp_size_built_at_once_equals_each_tp_alone(model):
    """Work coefficients, tp splits, parameter kinds and counts per stage, KV-cache elements per token and stage, and a
    plan's arrays are built for every tp size of a graph in one (tp x node) pass (the work coefficients of an MoE
    graph for ep = 1 and ep > 1 together); each tp's slice is bit-identical to that tp (and ep variant) computed
    alone (and to tp_split), and a tp outside the sizes (no layout_problem check before predict_op) is computed alone."""
    for mode in ("prefill", "decode", "train"):
        graph = build_graph(model_config(model), mode)
        cols = columns(graph)
        assert len(cols.tp_sizes) >= 5 and 3 not in cols.tp_sizes
        for tp, ep in itertools.product((*cols.tp_sizes, 3), (1, 2)):
            *alone, keys, kv_dim = _work_coefficients(cols, (tp,), (ep > 1,))[0]  # one variant, one tp
            if mode != "decode":  # outside decode the saved inputs add attention's keys and values
                alone[2] = alone[2].copy()
                alone[2][..., keys] += kv_dim
            for shared, single in zip(work_coefficients(graph, tp, ep, mode), alone, strict=True):
                assert np.array_equal(shared, single[0]), (mode, tp, ep)
            every_tp, one = cols.splits(cols.sizes_with(tp)), cols.splits((tp,))
            assert every_tp[cols.sizes_with(tp).index(tp)].tolist() == one[0].tolist() == [
                float(tp_split(node, tp)) for node in graph.nodes]
        for apart in (False, True):
            every_tp = _param_kinds(graph, cols.tp_sizes, apart)
            for row, tp in enumerate(cols.tp_sizes):
                assert np.array_equal(every_tp[row], _param_kinds(graph, (tp,), apart)[0]), (tp, apart)
        for pp in (1, 2, 3):  # the per-stage parameters of every tp at once (pp > 1 stores a tied head apart)
            every_tp = _count_stage_params(graph, cols.tp_sizes, pp)
            for row, tp in enumerate(cols.tp_sizes):
                assert every_tp[row] == _count_stage_params(graph, (tp,), pp)[0], (mode, tp, pp)
            kv_every_tp = _kv_elements_per_token(graph, cols.tp_sizes, pp)  # cached elements per token and stage
            for row, tp in enumerate(cols.tp_sizes):
                assert kv_every_tp[row] == _kv_elements_per_token(graph, (tp,), pp)[0], (mode, tp, pp)
        hw = hardware_spec(hardware("h100", nodes=4))
        for ep, dtype in itertools.product((1, 2), ("bf16", "fp8")):
            workload = parse_workload({**next(w for w in WORKLOADS if w["mode"] == mode), "batch": 8, "dtype": dtype})
            ctx = Context.for_step(graph, hw, parse_layout({"ep": ep}), workload)
            every_tp = _every_tp_arrays(graph, ctx, cols.tp_sizes)
            for row, tp in enumerate(cols.tp_sizes):
                for shared, alone in zip(every_tp, _every_tp_arrays(graph, ctx, (tp,)), strict=True):
                    if shared.ndim > 1:  # per tp; the rates are the same for every tp
                        shared, alone = shared[row], alone[0]
                    assert np.array_equal(shared, alone), (mode, tp, ep, dtype)


@pytest.mark.parametrize("model", MODELS)
def test_columns_shared_with_another_mode_equal_those_built_alone(model):
    """A graph whose nodes are nodes of a graph built before (decode: prefill's; train: prefill's less the KV cache
    write) takes that graph's columns or rows of them and of its work matrices and plan arrays: each array equals the
    graph's own columns built from scratch and, for every tp size and ep variant, its work matrices computed alone
    (decode's saved inputs without attention's keys), its plan arrays and efficiencies computed from its own (the weight
    bytes and rates, which decode shares with prefill, computed afresh)."""
    clear_caches()
    prefill = build_graph(model_config(model), "prefill")
    hw, cols = hardware_spec(hardware("h100", nodes=4)), columns(prefill)
    contexts = {}
    for mode, ep, dtype in itertools.product(("prefill", "decode", "train"), (1, 2), ("bf16", "fp8")):
        workload = parse_workload({**next(w for w in WORKLOADS if w["mode"] == mode), "batch": 8, "dtype": dtype})
        contexts[mode, ep, dtype] = Context.for_step(prefill, hw, parse_layout({"ep": ep}), workload)
        _every_tp_of(prefill, contexts[mode, ep, dtype], cols.tp_sizes)  # prefill's, for the others to take rows of
    derived = 0
    for mode in ("decode", "train"):
        graph = build_graph(model_config(model), mode)
        shared, alone = columns(graph), _build_columns(graph)
        derived += shared.parent is not None or shared is columns(build_graph(model_config(model), "prefill"))
        assert shared.features == alone.features and shared.index == alone.index and shared.tp_sizes == alone.tp_sizes
        for name in ("first_in", "other_in", "out", "op_types", "comm", "term_numbers", "term_bases"):
            assert np.array_equal(getattr(shared, name), getattr(alone, name)), (mode, name)
        assert shared.attrs.keys() == alone.attrs.keys()
        assert all(np.array_equal(shared.attrs[name], alone.attrs[name]) for name in alone.attrs), mode
        for ep in (1, 2):
            for got, want in zip(shared.work(alone.tp_sizes, ep > 1, mode == "decode"),
                                 alone.work(alone.tp_sizes, ep > 1, mode == "decode"), strict=True):
                assert got.shape == want.shape and np.array_equal(got, want), (mode, ep)
        one = contexts[mode, 1, "bf16"]
        for got, want in zip(_efficiency_of(graph, one), _efficiency(graph, one), strict=True):
            assert np.array_equal(got, want), mode
        for ep, dtype in itertools.product((1, 2), ("bf16", "fp8")):
            ctx = Context.for_step(graph, hw, parse_layout({"ep": ep}), contexts[mode, ep, dtype].workload)
            want = (_every_tp_arrays(graph, ctx, cols.tp_sizes)[0], *_rates(graph, ctx, cols.tp_sizes))
            for got, want in zip(_every_tp_of(graph, ctx, cols.tp_sizes), want, strict=True):
                assert got.shape == want.shape and np.array_equal(got, want), (mode, ep, dtype)
    assert derived == 2 if model != "deepseek_v3" else derived == 1  # DeepSeek-V3's decode graph has its own nodes


@pytest.mark.parametrize("model", MODELS)
def test_collectives_shared_by_graphs_of_the_same_nodes_equal_each_computed_alone(model):
    """A plan's collectives are kept per the graph's columns (a model's prefill and decode graphs share them), tp, ep
    and whether training: each equals the graph's computed alone, a training step's (the prefill graph's nodes timed
    as training, the inference-only gather left out) apart from inference's."""
    clear_caches()
    hw = hardware_spec(hardware("h100", nodes=4))
    graphs = {mode: build_graph(model_config(model), mode) for mode in ("prefill", "decode", "train")}
    cases = [("prefill", mode) for mode in ("prefill", "decode", "train")] + [("decode", "decode"), ("train", "train")]
    compared = 0
    for (graph_mode, mode), tp, ep in itertools.product(cases, (1, 2, 4), (1, 2)):
        graph = graphs[graph_mode]
        workload = parse_workload({**next(w for w in WORKLOADS if w["mode"] == mode), "batch": 8})
        ctx = Context.for_step(graph, hw, parse_layout({"tp": tp, "ep": ep}), workload)
        for got, want in zip(_collectives_of(graph, ctx), _collectives(graph, ctx), strict=True):
            assert np.array_equal(got, want), (graph_mode, mode, tp, ep)
        compared += 1
    assert compared == 30


@pytest.mark.parametrize("model", MODELS)
def test_stage_weights_shared_by_graphs_of_the_same_nodes_equal_each_computed_alone(model):
    """A pipeline split's pass multipliers and stage weights are kept per the graph's columns (a model's prefill and
    decode graphs share them: one pass for either), whether training, recompute and pp: each equals the graph's
    computed alone, a training step's (the prefill graph's nodes, with backward and recompute) apart from
    inference's."""
    clear_caches()
    cache = _STEP_CACHES.of(hardware_spec(hardware("h100", nodes=4)))
    graphs = {mode: build_graph(model_config(model), mode) for mode in ("prefill", "decode", "train")}
    cases = [("prefill", mode) for mode in ("prefill", "decode", "train")] + [("decode", "decode"), ("train", "train")]
    compared = 0
    for (graph_mode, mode), pp, recompute in itertools.product(cases, (1, 2, 3), (False, True)):
        if recompute and mode != "train":
            continue
        graph = graphs[graph_mode]
        record = {**next(w for w in WORKLOADS if w["mode"] == mode), "batch": 8, "recompute": recompute}
        workload = parse_workload(record)
        got, want = stage_weights_of(graph, workload, pp, cache), _stage_weights(graph, workload, pp)
        assert len(got) == len(want) == 4
        assert all(np.array_equal(np.asarray(a), np.asarray(b)) for a, b in zip(got, want)), (graph_mode, mode, pp)
        compared += 1
    assert compared == 21


def _node_values(graph, mode: str) -> list:
    """What is kept per a graph's columns (op_columns.per_nodes) outside vector_cost, for every tp size and pp 1-3."""
    hw, cols = hardware_spec(hardware("h100", nodes=4)), columns(graph)
    workload = parse_workload({**next(w for w in WORKLOADS if w["mode"] == mode), "batch": 8})
    splits = [stage_split(graph, pp) for pp in (1, 2, 3)]
    values = [(split.counts, split.matrix.tolist(), split.runs.tolist()) for split in splits]
    for tp, pp in itertools.product(cols.tp_sizes, (1, 2, 3)):
        layout = parse_layout({"tp": tp, "pp": pp})
        values.append(_stage_params(graph, layout))
        if mode != "train":
            values.append(_kv_cache_bytes(graph, Context.for_step(graph, hw, layout, workload)))
    kinds = [_MEMO.peek(cols, ("param kinds", cols.tp_sizes, apart)) for apart in (False, True)]  # as kept
    return [*values, model_flops(graph, workload), [None if kind is None else kind.tolist() for kind in kinds]]


@pytest.mark.parametrize("model", MODELS)
def test_node_values_shared_with_another_mode_equal_those_computed_alone(model):
    """Stage splits, parameters per stage and their kinds, KV-cache elements and model FLOPs per feature are kept per a
    graph's columns: a model's decode graph shares its prefill graph's (the same nodes) and its training graph takes
    rows of the splits and parameter kinds; each equals what the graph alone computes, every cache cleared."""
    clear_caches()
    graphs = {mode: build_graph(model_config(model), mode) for mode in ("prefill", "decode", "train")}
    shared = {mode: _node_values(graph, mode) for mode, graph in graphs.items()}  # prefill's first
    for mode in ("decode", "train"):
        clear_caches()
        assert shared[mode] == _node_values(build_graph(model_config(model), mode), mode), mode


SWEEP_LAYOUTS = tuple(itertools.product((1, 2, 4, 8), (1, 2), (1, 4), (1, 2)))  # tp, dp, ep, pp
# Each variant differs from the plain bf16 configuration it follows in one field only, so a cache key
# that leaves the field out hands the variant the plain one's costs. fp32 also changes the Adam state
# per parameter (fp8 keeps bf16's); zero and recompute change only training.
VARIANTS = {"prefill": ({"dtype": "fp8"}, {"dtype": "fp32"}),
            "decode": ({"dtype": "fp8"}, {"dtype": "fp32"}),
            "train": ({"dtype": "fp8"}, {"dtype": "fp32"}, {"zero": True}, {"recompute": True})}


def sweep_points():
    for model, shape in itertools.product(MODELS, WORKLOADS):
        for n, (tp, dp, ep, pp) in enumerate(SWEEP_LAYOUTS):
            layout = {"tp": tp, "dp": dp, "ep": ep, "pp": pp}
            for batch in (96, 12) if n % 2 else (96,):
                yield model, layout, {**shape, "batch": batch}
            if n % 5 == 0:  # the variants on 7 layouts (both values of dp, ep and pp among them)
                for variant in VARIANTS[shape["mode"]]:
                    yield model, layout, {**shape, "batch": 96, **variant}


def test_a_sweep_predicts_what_each_configuration_predicts_alone():
    """Costs shared between the configurations of a sweep (per binding, tp, ep, stage split, dtype,
    zero, recompute) give the same summary and per-op rows as simulating each configuration with
    every cache cleared."""
    hw = hardware("h100", efficiency_table=None, nodes=2)
    points = list(sweep_points())
    swept = [simulate(model_config(model), hw, layout, workload) for model, layout, workload in points]
    valid = 0
    for (model, layout, workload), shared in zip(points, swept):
        clear_caches()
        alone = simulate(model_config(model), hw, layout, workload)
        assert shared.summary() == alone.summary(), (model, layout, workload)
        assert shared.breakdown_rows() == alone.breakdown_rows(), (model, layout, workload)
        valid += shared.status == "ok"
    assert valid > 300


@pytest.mark.parametrize("model", MODELS)
def test_one_stage_runs_every_layer_and_stages_share_them(model):
    """pp = 1 (built without splitting the layers) counts each node's every execution on its one stage; the stages
    of pp > 1 split the same executions between them."""
    graph = build_graph(model_config(model), "train")
    assert stage_split(graph, 1).counts == [[len(node.layers) for node in graph.nodes]]
    assert stage_split(graph, 1).runs.tolist() == [[1.0] * len(graph.nodes)]
    for pp in (2, 3):
        assert [sum(column) for column in zip(*stage_split(graph, pp).counts)] == stage_split(graph, 1).counts[0]
