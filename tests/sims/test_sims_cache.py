"""GraphCache: one computation per (graph, key), per graph object, oldest entry evicted."""

from sims.builders import build_graph
from sims.cache import GraphCache
from sims.ir import ComputationalGraph
from sims_helpers import model_config


def test_computes_once_per_graph_and_key_and_evicts_the_oldest():
    first = build_graph(model_config("qwen3_8b"))
    second = ComputationalGraph.from_json(first.to_json())  # equal, but another object
    cache, calls = GraphCache(maxsize=2), []

    def compute(tag):
        return lambda: calls.append(tag) or tag

    assert cache.get(first, 1, compute("a")) == "a"
    assert cache.get(first, 1, compute("again")) == "a"  # cached
    assert cache.get(second, 1, compute("b")) == "b"  # an equal graph is still another graph
    assert cache.get(first, 2, compute("c")) == "c"  # evicts (first, 1)
    assert cache.get(first, 1, compute("d")) == "d"
    assert calls == ["a", "b", "c", "d"]


def test_a_dict_changed_in_place_is_simulated_anew():
    """Config keys of unchanged dicts are reused across calls; a dict edited in place is not stale."""
    from sims_helpers import hardware, model_config

    from sims import simulate

    cfg, hw = model_config("qwen3_8b"), hardware("h100", efficiency_table=None)
    decode = {"mode": "decode", "batch": 8, "context_len": 1024}
    first = simulate(cfg, hw, {}, decode).latency_s
    hw["hbm_tb_s"] = hw["hbm_tb_s"] / 2
    assert simulate(cfg, hw, {}, decode).latency_s > first
    cfg["num_hidden_layers"] = 72
    assert simulate(cfg, hw, {}, decode).summary()["params_total"] > 8_190_735_360


def test_costed_ops_are_shared_but_never_across_layouts_that_bind_them_differently():
    from sims_helpers import hardware, model_config

    from sims import simulate

    cfg, hw = model_config("qwen3_30b_a3b"), hardware("h100")
    decode = {"mode": "decode", "batch": 16, "context_len": 2048}
    order_a = [simulate(cfg, hw, layout, decode).latency_s for layout in ({"tp": 2}, {"dp": 2}, {"tp": 2, "pp": 2})]
    fresh = [simulate(dict(cfg), dict(hw), layout, decode).latency_s for layout in ({"tp": 2, "pp": 2}, {"dp": 2})]
    assert order_a[2] == fresh[0] and order_a[1] == fresh[1]
    assert len(set(order_a)) == 3


def test_shared_memory_parts_follow_the_dtype():
    from sims_helpers import hardware, model_config

    from sims import simulate

    cfg, hw = model_config("qwen3_8b"), hardware("h100")
    for mode in ({"mode": "decode", "context_len": 1024}, {"mode": "train", "seq_len": 1024}):
        bf16 = simulate(cfg, hw, {}, {**mode, "batch": 4}).memory_breakdown_gb["activations"]
        fp32 = simulate(cfg, hw, {}, {**mode, "batch": 4, "dtype": "fp32"}).memory_breakdown_gb["activations"]
        assert fp32 > bf16


def test_costs_shared_across_ep_equal_costs_computed_for_each_layout_alone():
    """Nodes whose cost ep does not change are costed once per binding and shared between ep values;
    each layout's answer and per-op rows equal those of a cache that never saw another layout."""
    from sims_helpers import hardware, model_config

    from sims import simulate

    cfg, hw = model_config("qwen3_30b_a3b"), hardware("h100")
    for workload in ({"mode": "decode", "batch": 32, "context_len": 2048}, {"mode": "train", "batch": 8, "seq_len": 1024}):
        layouts = [{"tp": 2, "dp": 4, "ep": ep} for ep in (8, 1, 4, 2)]
        shared = [simulate(cfg, hw, layout, workload) for layout in layouts]
        for i, (layout, result) in enumerate(zip(layouts, shared)):
            alone = simulate(cfg, {**hw, "device_name": f"fresh cache {workload['mode']} {i}"}, layout, workload)
            assert result.latency_s == alone.latency_s
            assert result.breakdown_rows() == alone.breakdown_rows()
        assert len({r.latency_s for r in shared}) == 4


def test_per_hardware_caches_are_one_per_spec_object_and_bounded():
    from sims.cache import PerHardware

    caches = PerHardware(specs=2)
    first, second, third = object(), object(), object()
    assert caches.of(first) is caches.of(first) and caches.of(first) is not caches.of(second)
    kept = caches.of(first)
    caches.of(third)  # a third spec: the oldest one's cache goes
    assert caches.of(first) is not kept


def test_precisions_are_kept_per_spec_object_and_bounded():
    from sims_helpers import hardware

    from sims import calculator
    from sims.hardware import hardware_spec

    spec = hardware_spec(hardware("h100"))
    assert calculator._precision("bf16", spec, True) is calculator._precision("bf16", spec, True)
    for size in range(calculator.PRECISIONS_KEPT + 10):  # many parsed specs: a long sweep over memory sizes
        calculator._precision("bf16", hardware_spec(hardware("h100", memory_gb=80 + size)), False)
    assert len(calculator._PRECISIONS) == calculator.PRECISIONS_KEPT


def test_training_rows_shared_across_a_sweep_equal_each_configuration_costed_alone():
    """The loss row is shared by configurations with equal logits per device (tp, tokens per
    micro-batch, dtype), the gradient-accumulation rows by equal parameters per device (tp, ep, pp,
    dtype): sharing them must give every configuration the summary and rows it gets alone."""
    from sims_helpers import hardware, model_config

    from sims import simulate
    from sims.cache import clear_caches

    cfg, hw = model_config("qwen3_30b_a3b"), hardware("h100", efficiency_table=None, nodes=2)
    train = {"mode": "train", "seq_len": 1024, "microbatches": 2}
    points = [  # pairs that share one row and differ in the other (dp and batch keep the logits per device)
        ({"tp": 2, "dp": 1, "ep": 2, "pp": 2}, {**train, "batch": 8}),
        ({"tp": 2, "dp": 2, "ep": 2, "pp": 2}, {**train, "batch": 16}),
        ({"tp": 2, "dp": 2, "ep": 4, "pp": 2}, {**train, "batch": 16}),
        ({"tp": 2, "dp": 2, "ep": 4, "pp": 1}, {**train, "batch": 16}),
        ({"tp": 2, "dp": 2, "ep": 4, "pp": 1}, {**train, "batch": 16, "dtype": "fp32"}),
        ({"tp": 4, "dp": 1, "ep": 4, "pp": 1}, {**train, "batch": 8}),
    ]
    swept = [simulate(cfg, hw, layout, workload) for layout, workload in points]
    for (layout, workload), shared in zip(points, swept):
        clear_caches()
        alone = simulate(cfg, hw, layout, workload)
        assert shared.status == "ok", shared.reason
        assert shared.summary() == alone.summary(), (layout, workload)
        assert shared.breakdown_rows() == alone.breakdown_rows(), (layout, workload)
    rows = [{row["name"]: row["time_s"] for row in result.breakdown_rows()} for result in swept]
    assert rows[0]["cross_entropy"] == rows[1]["cross_entropy"]
    assert rows[1]["grad_accumulate"] != rows[2]["grad_accumulate"]  # ep changes the experts a device holds
    assert rows[2]["grad_accumulate"] != rows[3]["grad_accumulate"]  # pp changes the layers a device holds
    assert rows[3]["cross_entropy"] != rows[4]["cross_entropy"]  # fp32 logits: twice the bytes
