"""simulate_many (a sweep's layouts costed together) against simulate called per layout."""

import itertools
import re

import numpy as np
import pytest
from sims_helpers import hardware, model_config, simulated_alone

from framework.core.errors import ConfigError
from sims import simulate, simulate_many
from sims.cache import clear_caches
from sims.calculator import Context
from sims.hardware import hardware_spec
from sims.builders import build_graph
from sims.op_columns import columns
from sims.vector_cost import cost_bindings, plan_for
from sims.workload import parse_layout, parse_workload

WORKLOADS = (
    {"mode": "prefill", "seq_len": 1000},
    {"mode": "decode", "context_len": 3000},
    {"mode": "train", "seq_len": 2048, "microbatches": 4},
)
VARIANTS = {"prefill": ({}, {"dtype": "fp8"}, {"dtype": "fp32"}),
            "decode": ({}, {"dtype": "fp8"}, {"dtype": "fp32"}),
            "train": ({}, {"dtype": "fp8"}, {"dtype": "fp32"}, {"zero": True}, {"recompute": True})}
# tp 3 does not divide the heads, 16 x 2 x 2 devices exceed two nodes, ep 3 does not divide the experts
# (and ep > 1 for a dense model): invalid rows among the valid ones
LAYOUTS = [*itertools.product((1, 2, 8), (1, 2), (1, 4), (1, 2)), (3, 1, 1, 1), (16, 2, 1, 2), (1, 2, 3, 1)]


def sweep(mode: str) -> tuple[list[dict], list[dict]]:
    layouts, workloads = [], []
    shape = next(w for w in WORKLOADS if w["mode"] == mode)
    for (tp, dp, ep, pp), batch, variant in itertools.product(LAYOUTS, (8, 48), VARIANTS[mode]):
        layouts.append({"tp": tp, "dp": dp, "ep": ep, "pp": pp})
        workloads.append({**shape, "batch": batch, **variant})
    return layouts, workloads


@pytest.mark.parametrize("model", ("qwen3_8b", "qwen3_30b_a3b", "deepseek_v3"))
@pytest.mark.parametrize("table", [None, "sims/calibration/tables/h100.json"])
def test_a_sweep_costed_together_equals_each_layout_simulated_alone(model, table):
    """Every summary field and per-op row of simulate_many's results is bit-identical to simulate's for the
    layout alone (every cache cleared before it), invalid layouts included; one call mixes the three modes."""
    cfg, hw = model_config(model), hardware("h100", efficiency_table=table, nodes=2)
    layouts, workloads = [], []
    for mode in ("prefill", "decode", "train"):
        more_layouts, more_workloads = sweep(mode)
        layouts += more_layouts
        workloads += more_workloads
    alone = simulated_alone(cfg, hw, layouts, workloads)
    together = simulate_many(cfg, hw, layouts, workloads)
    assert len(together) == len(layouts)
    for (summary, rows), result, layout, workload in zip(alone, together, layouts, workloads):
        assert result.summary() == summary, (layout, workload)
        assert result.breakdown_rows() == rows, (layout, workload)
    statuses = [summary["status"] for summary, _ in alone]
    assert statuses.count("ok") > 100 and statuses.count("invalid") >= 3 * 2 * len(VARIANTS["train"])


def test_one_workload_for_every_layout_and_bad_input():
    cfg, hw = model_config("qwen3_30b_a3b"), hardware("h100")
    decode = {"mode": "decode", "batch": 16, "context_len": 2048}
    layouts = [{"tp": 2}, {"tp": 2, "ep": 4}, {"tp": 5}]
    together = simulate_many(cfg, hw, layouts, decode)
    assert [r.summary() for r in together] == [simulate(cfg, hw, layout, decode).summary() for layout in layouts]
    assert together[2].status == "invalid" and together[2].reason
    with pytest.raises(ConfigError, match="2 layouts but 3 workloads"):
        simulate_many(cfg, hw, layouts[:2], [decode] * 3)
    for one_layout, workloads in (({"tp": 2}, decode), (layouts, "decode")):  # a mapping or a string for a list
        with pytest.raises(ConfigError, match="simulate_many: layouts is a list of layouts"):
            simulate_many(cfg, hw, one_layout, workloads)
    with pytest.raises(ConfigError) as raised:
        simulate(cfg, hw, {"tp": 2}, {**decode, "batchsize": 3})
    with pytest.raises(ConfigError, match=re.escape(str(raised.value))):
        simulate_many(cfg, hw, layouts, [decode, {**decode, "batchsize": 3}, decode])


def test_bindings_costed_together_equal_each_costed_alone_and_the_matrix_vector_product():
    """One plan's bindings costed in one (binding x feature) product: each row is bit-identical to the binding
    costed alone, and its FLOPs, bytes and activation elements are bit-identical to the plan's matrix times the
    binding's features (the matrix-vector product a plan computed before it costed many bindings at once)."""
    hw = hardware_spec(hardware("h100", nodes=2))
    graph = build_graph(model_config("deepseek_v3"), "train")
    layout = parse_layout({"tp": 2, "ep": 4})
    contexts = [Context.for_step(graph, hw, parse_layout({"tp": 2, "ep": 4, "dp": dp}),
                                 parse_workload({"mode": "train", "seq_len": 512, "batch": batch, "microbatches": m}))
                for dp, batch, m in itertools.product((1, 2), (8, 96), (1, 4))]
    plan = plan_for(graph, contexts[0])
    together = plan.cost_many(contexts)
    for ctx, costs in zip(contexts, together):
        alone = plan.cost(ctx)
        for field in ("flops", "bytes", "time_s", "compute_s", "memory_s", "inputs", "outputs"):
            assert np.array_equal(getattr(costs, field), getattr(alone, field)), field
        flops, moved, inputs, outputs = (plan.work @ columns(graph).values([ctx.dims])[0]).reshape(4, -1)
        plain = plan.expert_bytes == 0  # grouped expert GEMMs add the touched experts' weights to their bytes
        assert np.array_equal(costs.bytes[plain], (moved + plan.const_bytes)[plain]) and not plain.all()
        for got, product in ((costs.flops, flops), (costs.inputs, inputs), (costs.outputs, outputs)):
            assert np.array_equal(got, product)
    assert layout.tp == 2 and len({tuple(c.dims.values()) for c in contexts}) == 8


def test_bindings_of_different_plans_costed_in_one_pass_equal_each_costed_alone():
    """cost_bindings with bindings of several plans (tp, ep and dtype differing, interleaved): each binding's row
    takes its own plan's matrix and per-node arrays, bit-identical to it costed alone under its plan."""
    hw = hardware_spec(hardware("h100", nodes=2))
    graph = build_graph(model_config("qwen3_30b_a3b"), "decode")
    contexts = [Context.for_step(graph, hw, parse_layout({"tp": tp, "ep": ep, "dp": 2}),
                                 parse_workload({"mode": "decode", "context_len": 512, "batch": batch, "dtype": dtype}))
                for batch, dtype, tp, ep in itertools.product((8, 96), ("bf16", "fp8"), (1, 2, 4), (1, 4))]
    plans = [plan_for(graph, ctx) for ctx in contexts]
    for ctx, plan, costs in zip(contexts, plans, cost_bindings(plans, contexts)):
        alone = plan.cost(ctx)
        assert costs.plan is plan
        for field in ("flops", "bytes", "time_s", "compute_s", "memory_s", "inputs", "outputs"):
            assert np.array_equal(getattr(costs, field), getattr(alone, field)), field
    assert len({id(plan) for plan in plans}) == 12


@pytest.mark.parametrize("stack", ("xla", "megatron_local"))
def test_training_rows_of_stacks_with_scanned_updates_and_host_waits_equal_each_layout_alone(stack):
    """The xla stack's scanned-update copies (from each binding's saved activations) and megatron_local's host
    dispatch waits (from each binding's stage times), with weights sharded over dp (fsdp rows) and without."""
    cfg, hw = model_config("qwen3_30b_a3b"), hardware("h100", nodes=2)
    layouts, workloads = sweep("train")
    workloads = [{**workload, "shard_weights": True, "zero": True} if i % 3 == 0 else workload
                 for i, workload in enumerate(workloads)]
    alone = simulated_alone(cfg, hw, layouts, workloads, stack=stack)
    together = simulate_many(cfg, hw, layouts, workloads, stack=stack)
    names = set()
    for (summary, rows), result in zip(alone, together):
        assert result.summary() == summary and result.breakdown_rows() == rows
        names.update(row["name"] for row in rows)
    assert {"scan_copies", "fsdp_weight_gather"} <= names if stack == "xla" else "host_dispatch_wait" in names


def test_stage_sums_of_bindings_of_several_plans_summed_together_equal_each_layout_alone(monkeypatch):
    """simulate_many sums the stages (and builds the training rows) of one stage key's bindings together whatever
    their plans (tp, ep, dtype): the xla stack's scanned-update copies take each binding's own activation bytes, the
    accumulation and fsdp rows each binding's plan's, bit-identical to each layout simulated alone."""
    import sims.step as step

    groups = []
    summed = step._cost_stages
    monkeypatch.setattr(step, "_cost_stages", lambda graph, contexts, costs: groups.append(
        {id(c.plan) for c in costs}) or summed(graph, contexts, costs))
    cfg, hw = model_config("qwen3_30b_a3b"), hardware("h100", nodes=2)
    layouts = [{"tp": tp, "ep": ep, "dp": 4} for tp, ep in itertools.product((1, 2), (1, 4))] * 4
    workloads = [{"mode": "train", "seq_len": 1024, "batch": 16, "microbatches": 2, "dtype": dtype,
                  "shard_weights": fsdp, "zero": fsdp}
                 for dtype, fsdp in itertools.product(("bf16", "fp32"), (False, True)) for _ in range(4)]
    alone = simulated_alone(cfg, hw, layouts, workloads, stack="xla")
    groups.clear()
    together = simulate_many(cfg, hw, layouts, workloads, stack="xla")
    for (summary, rows), result in zip(alone, together):
        assert result.summary() == summary and result.breakdown_rows() == rows
    assert len(groups) == 2 and all(len(plans) == 8 for plans in groups)  # plain and fsdp; tp x ep x dtype


def test_activation_memory_of_a_sweep_computed_together_equals_each_layout_alone(monkeypatch):
    """simulate_many computes the activation bytes of a pipeline split's bindings together (memory.activations_together:
    one array pass per pp, whatever their plans, dtypes and micro-batches); each equals the layout simulated alone,
    with a chunked loss (logits_chunk), a loss over the last positions (loss_len) and prefill's largest op too."""
    import sims.memory as memory

    passes = []
    together_of_split = memory._activations_of_split
    monkeypatch.setattr(memory, "_activations_of_split", lambda graph, pp, contexts: passes.append(
        (pp, len(contexts))) or together_of_split(graph, pp, contexts))
    cfg, hw = model_config("qwen3_30b_a3b"), hardware("h100", nodes=2)
    layouts, workloads = [], []
    for (tp, ep, pp, dp), dtype, extra in itertools.product(
            ((1, 1, 1, 4), (2, 4, 2, 4), (8, 1, 2, 1)), ("bf16", "fp32"),
            ({}, {"logits_chunk": 100}, {"loss_len": 300, "microbatches": 4}, {"logits_chunk": 64, "loss_len": 200})):
        layouts.append({"tp": tp, "ep": ep, "dp": dp, "pp": pp})
        workloads.append({"mode": "train", "seq_len": 1024, "batch": 16, "microbatches": 2, "dtype": dtype, **extra})
    # micro-batches against pipeline stages: min(pp - stage, micro-batches) of them are in flight
    for pp, microbatches in ((2, 1), (4, 8), (4, 2)):
        layouts.append({"tp": 1, "ep": 1, "dp": 16 // (2 * pp), "pp": pp})
        workloads.append({"mode": "train", "seq_len": 1024, "batch": 16, "microbatches": microbatches, "dtype": "bf16"})
    layouts += [{"tp": tp, "ep": ep, "dp": 2, "pp": pp} for tp, ep, pp in ((1, 1, 1), (2, 2, 2), (4, 1, 2))]
    workloads += [{"mode": "prefill", "seq_len": 700, "batch": 4}] * 3
    alone = []
    for layout, workload in zip(layouts, workloads):
        clear_caches()
        alone.append(simulate(cfg, hw, layout, workload).memory_breakdown_gb)
    clear_caches()
    passes.clear()
    together = simulate_many(cfg, hw, layouts, workloads)
    for memory_gb, result, layout, workload in zip(alone, together, layouts, workloads):
        assert result.status == "ok" and result.memory_breakdown_gb == memory_gb, (layout, workload)
    assert sorted(passes) == [(1, 1), (1, 8), (2, 2), (2, 17), (4, 2)]  # per mode and pp, every binding in one pass
