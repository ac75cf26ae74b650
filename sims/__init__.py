"""Crucible's performance simulator: "how fast is it, and does it fit?" for an HF model config, a
hardware spec and a parallel layout, for prefill, decode and training steps.

Pure Python (numpy only where useful); no torch or jax. See docs/simulator.md for the model.
"""

from sims.api import SimResult, predict_op, simulate, simulate_many
from sims.builders import build_graph, param_counts, register_config_builder, supported_model_types
from sims.ir import ComputationalGraph, OpNode, ParallelSpec

__all__ = [
    "simulate",
    "simulate_many",
    "predict_op",
    "SimResult",
    "build_graph",
    "param_counts",
    "register_config_builder",
    "supported_model_types",
    "ComputationalGraph",
    "OpNode",
    "ParallelSpec",
]
