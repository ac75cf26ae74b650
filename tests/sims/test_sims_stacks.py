"""Software stacks: which kernels a graph has and which efficiency table times them."""

import json

import pytest
from sims_helpers import REPO, hardware, model_config

from framework.core.errors import ConfigError
from sims import build_graph, simulate
from dataclasses import replace

from sims.calculator import Context, comm_cost
from sims.comm import collective_s
from sims.hardware import hardware_spec
from sims.partition import tp_split
from sims.workload import parse_layout, parse_workload
from sims.stacks import stack_for_backend, stacks

DECODE = {"mode": "decode", "batch": 8, "context_len": 4096}


def names(graph):
    return [n.name for n in graph.nodes]


def test_transformers_is_the_builders_graph_and_torch_fused_rewrites_it():
    cfg = model_config("qwen3_8b")
    hf = build_graph(cfg, "decode", "transformers")
    fused = build_graph(cfg, "decode", "torch_fused")
    assert {"q_proj", "kv_proj", "rotary", "kv_cache_write"} <= set(names(hf))
    assert not {"q_proj", "kv_proj", "rotary", "kv_cache_write"} & set(names(fused))
    assert names(fused).index("qkv_proj") == names(fused).index("input_layernorm") + 1
    qkv = fused.node("qkv_proj")
    assert qkv.weights == ((4096, 32 * 128 + 2 * 8 * 128),)
    # one separate add per norm that took the residual; those norms no longer count it
    adds = [n for n in fused.nodes if n.name.endswith("_residual_add")]
    assert [a.name for a in adds] == [
        "input_layernorm_residual_add", "mlp_post_attention_layernorm_residual_add", "final_norm_residual_add"]
    assert not any(n.attrs.get("fused_residual") for n in fused.nodes)
    assert all(n.attrs.get("fused_residual") for n in hf.nodes if n.name.endswith("layernorm") or n.name == "final_norm")


def test_xla_runs_qkv_and_gate_up_as_one_gemm_each():
    """XLA's dot merger runs the model's separate q/k/v (and gate/up) projections as one GEMM each
    (kernel profiles: one QKV kernel, gate+up bf16[128, 9728]); the norms keep the residual add."""
    cfg = model_config("qwen2_5_0_5b_instruct")  # 14 heads, 2 kv heads, head_dim 64, MLP 4864
    graph = build_graph(cfg, "decode", "xla")
    assert not {"q_proj", "kv_proj"} & set(names(graph))
    assert names(graph).index("qkv_proj") == names(graph).index("input_layernorm") + 1
    assert graph.node("qkv_proj").weights == ((896, 896 + 2 * 128), (896 + 2 * 128,))
    assert graph.node("mlp_gate_up_proj").weights == ((896, 2 * 4864),)
    assert {"rotary", "kv_cache_write"} <= set(names(graph))
    assert not any(n.name.endswith("_residual_add") for n in graph.nodes)


def test_fused_qkv_splits_q_by_tp_and_kv_at_most_by_kv_heads():
    cfg = model_config("qwen3_8b")  # 32 heads, 8 kv heads, head_dim 128
    qkv = build_graph(cfg, "decode", "torch_fused").node("qkv_proj")
    assert tp_split(qkv, 8) == pytest.approx(6144 / (4096 / 8 + 2048 / 8))
    assert tp_split(qkv, 16) == pytest.approx(6144 / (4096 / 16 + 2048 / 8))  # kv heads replicated


@pytest.mark.parametrize("tp", [1, 2, 8])
def test_merging_keeps_flops_and_weights_per_device(tp):
    """q_proj + kv_proj and qkv_proj do the same math: FLOPs and weight memory per device agree."""
    cfg, h100 = model_config("qwen3_8b"), hardware("h100", efficiency_table=None)
    rows = {stack: {r["name"]: r for r in simulate(cfg, h100, {"tp": tp}, DECODE, stack=stack).breakdown_rows()}
            for stack in ("transformers", "torch_fused")}
    hf, fused = rows["transformers"], rows["torch_fused"]
    assert fused["qkv_proj"]["flops"] == pytest.approx(hf["q_proj"]["flops"] + hf["kv_proj"]["flops"])
    assert fused["qkv_proj"]["bytes"] < hf["q_proj"]["bytes"] + hf["kv_proj"]["bytes"]  # input read once
    memory = {stack: simulate(cfg, h100, {"tp": tp}, DECODE, stack=stack).memory_breakdown_gb["weights"]
              for stack in ("transformers", "torch_fused")}
    assert memory["torch_fused"] == pytest.approx(memory["transformers"])
    add = fused["input_layernorm_residual_add"]
    assert add["bytes"] == pytest.approx(36 * 3 * 8 * 4096 * 2)  # read two streams, write one, 36 layers


def test_a_table_serves_only_its_own_stack(tmp_path):
    cfg = model_config("qwen3_8b")
    h100 = hardware("h100")
    h100 = {**h100, "efficiency_table": h100["efficiency_table"]["transformers"]}  # a path: one table for all stacks
    hf = simulate(cfg, h100, {}, DECODE, stack="transformers")
    fused = simulate(cfg, h100, {}, DECODE, stack="torch_fused")
    assert json.loads((REPO / h100["efficiency_table"]).read_text())["stack"] == "transformers"
    assert "accuracy" in hf.summary()["efficiency_table"]
    assert fused.summary()["efficiency_table"].startswith("built-in defaults (the table")
    assert fused.summary()["stack"] == "torch_fused"
    # a mapping names one table per stack
    table = {"format": "crucible-efficiency-table/1", "stack": "torch_fused",
             "op_classes": {"norm": {"compute": 0.3, "memory": 0.1, "floor_us": 50.0}}}
    (tmp_path / "fused.json").write_text(json.dumps(table))
    both = {**h100, "efficiency_table": {"transformers": h100["efficiency_table"], "torch_fused": str(tmp_path / "fused.json")}}
    assert simulate(cfg, both, {}, DECODE, stack="transformers").latency_s == hf.latency_s
    slow_norms = simulate(cfg, both, {}, DECODE, stack="torch_fused")
    assert slow_norms.latency_s > fused.latency_s
    assert simulate(cfg, both, {}, DECODE, stack="xla").summary()["efficiency_table"] == "built-in defaults"


def test_unknown_stacks_and_backends_are_config_errors():
    with pytest.raises(ConfigError, match="stack is 'vllm'; valid: transformers, torch_fused, megatron_local, xla"):
        simulate(model_config("qwen3_8b"), hardware("h100"), {}, DECODE, stack="vllm")
    with pytest.raises(ConfigError, match="backend 'jaxpr'"):
        stack_for_backend("jaxpr")


def test_each_backend_maps_to_one_stack():
    assert stack_for_backend("maxtext") == "xla"
    assert stack_for_backend("megatron") == "megatron_local"
    assert stack_for_backend("torch") == "transformers"
    backends = [b for s in stacks().values() for b in s.backends]
    assert len(backends) == len(set(backends))


def test_megatron_local_is_torch_fused_with_its_unfused_rotary_timed_as_transformers_rotary(tmp_path):
    """megatron-core's local spec runs RoPE unfused (fusion needs Transformer Engine): the torch_fused
    graph plus the rotary node, whose efficiency comes from the transformers table."""
    cfg = model_config("llama3_2_1b")
    fused, megatron = build_graph(cfg, "decode", "torch_fused"), build_graph(cfg, "decode", "megatron_local")
    assert [n for n in names(megatron) if n != "rotary"] == names(fused) and "rotary" in names(megatron)
    h100 = hardware("h100")
    rows = {stack: {r["name"]: r["time_s"] for r in simulate(cfg, h100, {}, DECODE, stack=stack).breakdown_rows()}
            for stack in ("transformers", "megatron_local")}
    assert rows["megatron_local"]["rotary"] == pytest.approx(rows["transformers"]["rotary"])
    slow_rotary = {"format": "crucible-efficiency-table/1", "stack": "transformers",
                   "ops": {"rotary": {"compute": 0.01, "memory": 0.01, "floor_us": 500.0}}}
    (tmp_path / "hf.json").write_text(json.dumps(slow_rotary))
    both = {**h100, "efficiency_table": {**h100["efficiency_table"], "transformers": str(tmp_path / "hf.json")}}
    slow = {r["name"]: r["time_s"] for r in simulate(cfg, both, {}, DECODE, stack="megatron_local").breakdown_rows()}
    assert slow["rotary"] > 10 * rows["megatron_local"]["rotary"]
    assert slow["qkv_proj"] == pytest.approx(rows["megatron_local"]["qkv_proj"])  # the rest: torch_fused's table


def test_mla_models_have_no_qkv_pair_to_merge():
    graph = build_graph(model_config("deepseek_v3"), "decode", "torch_fused")
    assert "qkv_proj" not in names(graph) and "fused_qkv_a_proj" in names(graph)
    assert "rotary" not in names(graph)


def test_a_stack_naming_an_unknown_table_or_donor_stack_is_a_config_error(tmp_path, monkeypatch):
    import yaml

    import sims.stacks as stacks_module

    records = yaml.safe_load(stacks_module.STACKS_FILE.read_text())
    records["megatron_local"]["borrowed_ops"] = {"rotary": "hf"}
    bad = tmp_path / "stacks.yaml"
    bad.write_text(yaml.safe_dump(records))
    monkeypatch.setattr(stacks_module, "STACKS_FILE", bad)
    stacks.cache_clear()
    try:
        with pytest.raises(ConfigError, match="megatron_local.borrowed_ops.rotary is 'hf'; valid: "):
            stacks()
    finally:
        monkeypatch.undo()
        stacks.cache_clear()



def test_xla_forward_collectives_pay_the_stacks_gap_and_training_ones_do_not():
    """XLA's decode runs as command buffers that end at each collective: every tp collective of a forward pass costs
    the stack's forward_collective_gap beyond the link model (sims/stacks.yaml); a training step's do not, nor those
    of a stack without one."""
    cfg, hw = model_config("qwen2_5_0_5b_instruct"), hardware("h200", devices_per_node=2)
    gap = stacks()["xla"].forward_collective_gap.us * 1e-6
    assert gap > 0 and stacks()["torch_fused"].forward_collective_gap is None
    for stack, workload, added in (("xla", DECODE, gap), ("xla", {"mode": "prefill", "batch": 2, "seq_len": 512}, gap),
                                   ("torch_fused", DECODE, 0.0)):
        spec = hardware_spec(hw, stack)
        comm = [r for r in simulate(cfg, hw, {"tp": 2}, workload, stack=stack).breakdown_rows() if r["bound"] == "comm"]
        assert comm, (stack, workload)
        for row in comm:
            link = collective_s(row["op_type"], row["bytes"] / row["count"], 2, 2, spec)
            assert row["time_s"] / row["count"] == pytest.approx(link + added), (stack, workload["mode"], row["name"])
    graph, spec = build_graph(cfg, "train", "xla"), hardware_spec(hw, "xla")
    train = parse_workload({"mode": "train", "batch": 4, "seq_len": 512})
    ctx = Context.for_step(graph, spec, parse_layout({"tp": 2}), train)
    forward = replace(ctx, workload=replace(ctx.workload, mode="prefill"))
    for node in (n for n in graph.nodes if n.is_comm and not n.attrs.get("inference_only")):
        assert comm_cost(node, forward).time_s - comm_cost(node, ctx).time_s == pytest.approx(gap), node.name
