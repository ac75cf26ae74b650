import pytest
from sims_helpers import MODELS, model_config

from framework.core.errors import ConfigError
from sims import build_graph
from sims.ir import ComputationalGraph, OpNode, ParallelSpec


@pytest.mark.parametrize("mode", ["prefill", "decode", "train"])
@pytest.mark.parametrize("name", MODELS)
def test_json_round_trip_is_exact(name, mode):
    graph = build_graph(model_config(name), mode)
    text = graph.to_json()
    again = ComputationalGraph.from_json(text)
    assert again == graph
    assert again.to_json() == text
    assert isinstance(again.nodes[0].inputs[0], tuple)  # shapes come back as tuples, not lists


def test_round_trip_keeps_symbolic_dims_parallel_spec_and_flags():
    graph = build_graph(model_config("deepseek_v3"), "decode")
    node = ComputationalGraph.from_json(graph.to_json()).node("attention")
    assert node.inputs[1] == ("batch", "kv_len", 1, 576)
    assert node.parallel == ParallelSpec(tp_mode="heads")
    assert node.is_attention and node.is_mla and not node.is_moe
    assert node.repeat == 61


def test_table_lists_every_node_with_shapes():
    graph = build_graph(model_config("qwen3_8b"))
    lines = graph.table().splitlines()
    assert lines[0] == "qwen3-dense (prefill)"
    assert lines[1].split()[:3] == ["name", "op", "x"]
    assert len(lines) == len(graph.nodes) + 3  # title, header, rule
    q_proj = next(line for line in lines if line.startswith("q_proj "))
    assert "(tokens,4096)" in q_proj and "(4096,4096)" in q_proj and "column[-1]" in q_proj and " 36 " in q_proj


def test_node_rejects_unknown_op_type_and_dim():
    with pytest.raises(ConfigError, match="op_type"):
        OpNode("x", "conv", inputs=(), outputs=(), layers=(0,))
    with pytest.raises(ConfigError, match="unknown symbolic dim 'width'"):
        OpNode("x", "norm", inputs=(("width", 4),), outputs=(), layers=(0,))
    with pytest.raises(ConfigError, match="layers is empty"):
        OpNode("x", "norm", inputs=(), outputs=())
    with pytest.raises(ConfigError, match="tp_mode"):
        ParallelSpec(tp_mode="diagonal")
