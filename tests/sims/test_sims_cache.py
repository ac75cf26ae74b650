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
