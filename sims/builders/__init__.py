"""HF config -> ComputationalGraph. Builders register themselves per `model_type`.

graph = build_graph(hf_config, mode="decode")
counts = param_counts(hf_config)   # {"total": ..., "active": ..., "embedding": ..., "mtp": ...}
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from functools import lru_cache
from math import prod

from framework.core.errors import ConfigError
from sims.builders import deepseek_v3, dense, qwen3_moe  # noqa: F401  (registers the builders)
from sims.builders.registry import MODES, builder_for, infer_model_type, register_config_builder, supported_model_types
from sims.ir import ComputationalGraph
from sims.plain import json_key
from sims.stacks import DEFAULT_STACK, apply_stack

__all__ = ["build_graph", "param_counts", "register_config_builder", "supported_model_types", "infer_model_type"]


def build_graph(hf_config: Mapping, mode: str = "prefill", stack: str = DEFAULT_STACK) -> ComputationalGraph:
    """The forward graph of a model for `mode` (prefill | decode | train) as the kernels of software
    `stack` (sims/stacks.yaml). Cached per config, mode and stack; treat it as read-only."""
    if mode not in MODES:
        raise ConfigError(f"mode is {mode!r}; valid: {', '.join(MODES)}")
    return _cached_stack_graph(_config_key(hf_config), mode, stack)


def graph_and_counts(hf_config: Mapping, mode: str, stack: str = DEFAULT_STACK) -> tuple[ComputationalGraph, dict[str, int]]:
    """build_graph and param_counts with one serialisation of the config (the per-call cost)."""
    if mode not in MODES:
        raise ConfigError(f"mode is {mode!r}; valid: {', '.join(MODES)}")
    key = _config_key(hf_config)
    return _cached_stack_graph(key, mode, stack), dict(_cached_counts(key))


def param_counts(hf_config: Mapping) -> dict[str, int]:
    """Parameter counts of the main model (MTP modules excluded, reported as `mtp`).

    total: every weight once (a tied lm_head is not counted twice).
    active: weights one token uses: all non-expert weights (embedding and head included, as model
    cards count them) plus top_k of the routed experts.
    embedding: the input embedding table.
    """
    return dict(_cached_counts(_config_key(hf_config)))


@lru_cache(maxsize=256)
def _cached_counts(config_key: str) -> tuple[tuple[str, int], ...]:
    graph = _cached_graph(config_key, "prefill")
    total = active = 0
    for node in graph.nodes:
        if node.attrs.get("tied"):
            continue
        count = node.repeat * sum(prod(w) for w in node.weights)
        total += count
        routed = node.op_type == "moe_gemm"
        active += count * node.attrs["top_k"] // graph.meta["num_experts"] if routed else count
    embedding = prod(graph.node("embed_tokens").weights[0])
    return (("total", total), ("active", active), ("embedding", embedding), ("mtp", graph.meta["params_mtp"]))


def _config_key(hf_config: Mapping) -> str:
    return json_key(hf_config, "hf_config")


@lru_cache(maxsize=256)
def _cached_stack_graph(config_key: str, mode: str, stack: str) -> ComputationalGraph:
    return apply_stack(_cached_graph(config_key, mode), stack)


@lru_cache(maxsize=256)
def _cached_graph(config_key: str, mode: str) -> ComputationalGraph:
    hf_config = json.loads(config_key)
    return builder_for(hf_config)(hf_config, mode)
