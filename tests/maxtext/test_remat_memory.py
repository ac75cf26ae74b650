"""The preflight's memory model of the remat policies (issue 15) against JAX's and XLA's own numbers on CPU.

What a policy keeps is JAX's business (models/transformer.py:REMAT_POLICIES); the simulator learns it
from config.REMAT_WORKLOADS. Two checks on a tiny float32 Qwen2 (float32: XLA's CPU backend widens bf16
work, which would blur the comparison):
- per layer and token, the estimate keeps what `jax.checkpoint` saves of one decoder layer
  (jax's saved_residuals) under `minimal` and `full`;
- the scanned layer stack's gradient compiled by XLA on CPU: `compiled.memory_analysis()` temp bytes
  order the policies as the estimate does, each within a band of the estimate.
CPU XLA is not GPU XLA: its attention keeps the probabilities (cuDNN's flash attention does not), it
fuses and schedules differently, and its temp bytes also hold per-layer weight gradients and casts.
The band is wide on purpose (measured here: estimate / XLA 0.47 none, 0.83 minimal, 0.49 full); it
catches a model that drifts far, not a few percent. One GPU point is in docs/benchmarks.md (XLA's
58.3 GiB for micro-batch 128 / minimal against the preflight's 61.7 GB, docs/grpo.md).
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src.ad_checkpoint import saved_residuals  # what print_saved_residuals prints, as data

from framework.backends.maxtext.config import REMAT_NAMES, REMAT_WORKLOADS
from framework.backends.maxtext.models import ModelConfig
from framework.backends.maxtext.models.transformer import REMAT_POLICIES, DecoderLayer, scanned_layers
from framework.core.paths import load_conf

BATCH, LENGTH, LAYERS = 8, 64, 4
HF = {**load_conf("model", "tiny_qwen2")["hf_config"], "hidden_size": 256, "intermediate_size": 1024,
      "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": LAYERS}


def _estimated_bytes(policy: str, layers: int = LAYERS) -> float:
    """The simulator's training activations for one micro-batch of BATCH x LENGTH tokens (the loss's
    logits one position at a time: negligible, as the layer stack below has no LM head)."""
    from sims.api import simulate

    workload = {"mode": "train", "batch": BATCH, "seq_len": LENGTH, "dtype": "fp32", "logits_chunk": 1,
                **REMAT_WORKLOADS[policy]}
    result = simulate({**HF, "num_hidden_layers": layers}, load_conf("hardware", "cpu")["hardware"], {"dp": 1},
                      workload, stack="xla")
    return result.memory_breakdown_gb["activations"] * 1e9


def _inputs(config: ModelConfig) -> tuple:
    x = jnp.zeros((BATCH, LENGTH, config.hidden_size), config.dtype)
    return x, jnp.broadcast_to(jnp.arange(LENGTH), (BATCH, LENGTH)), jnp.full((BATCH,), LENGTH, jnp.int32)


def _jax_saved_bytes_per_token(policy: str) -> float:
    """Bytes of activations (per-token arrays, not weights) jax.checkpoint saves of one decoder layer."""
    config = ModelConfig.from_hf_config(HF)
    x, positions, lengths = _inputs(config)
    layer = DecoderLayer(config)
    params = jax.eval_shape(lambda: layer.init(jax.random.key(0), x, positions, lengths, None, None))

    def loss(params, x):
        return layer.apply(params, x, positions, lengths, None, None)[0].sum()

    if REMAT_POLICIES[policy] is not None:
        loss = jax.checkpoint(loss, policy=REMAT_POLICIES[policy], prevent_cse=False)
    per_token = [aval for aval, _ in saved_residuals(loss, params, x)
                 if aval.ndim >= 2 and aval.shape[:2] == (BATCH, LENGTH) and aval.dtype != jnp.int32]
    return sum(np.prod(aval.shape) * aval.dtype.itemsize for aval in per_token) / (BATCH * LENGTH)


def test_the_policy_names_are_one_list():
    assert tuple(REMAT_POLICIES) == REMAT_NAMES


@pytest.mark.parametrize("policy", ["minimal", "full"])
def test_a_recomputed_layer_keeps_what_jax_saves(policy):
    """minimal: the layer's input and the q, k, v, o, gate and up matmul outputs (not down's, which only
    feeds the residual sum); full: the input only. Per layer: the estimate's growth with one more layer."""
    per_layer = _estimated_bytes(policy, LAYERS + 1) - _estimated_bytes(policy, LAYERS)
    assert per_layer / (BATCH * LENGTH) == pytest.approx(_jax_saved_bytes_per_token(policy), rel=1e-6)


def test_without_remat_the_estimate_is_below_what_jax_saves_on_cpu():
    """none: the estimate counts every op's inputs of a layer with fused (flash) attention; JAX's XLA attention
    on CPU also saves the probabilities, and the norms keep float32 copies. Measured here: 0.60."""
    per_layer = _estimated_bytes("none", LAYERS + 1) - _estimated_bytes("none", LAYERS)
    assert 0.4 < per_layer / (BATCH * LENGTH) / _jax_saved_bytes_per_token("none") < 1.0


def _xla_temp_bytes(policy: str) -> int:
    """Temp bytes of the compiled gradient of the scanned layer stack (what the remat policy governs)."""
    config = ModelConfig.from_hf_config(HF).replace(remat=policy)
    layers = scanned_layers(config)(config)
    x, positions, lengths = _inputs(config)
    params = jax.eval_shape(lambda: layers.init(jax.random.key(0), x, positions, lengths, None, None))

    def loss(params, x):
        return jnp.sum(layers.apply(params, x, positions, lengths, None, None)[0] ** 2)

    compiled = jax.jit(jax.grad(loss, argnums=(0, 1))).lower(params, x).compile()
    return compiled.memory_analysis().temp_size_in_bytes


def test_the_estimate_orders_the_policies_as_xla_compiles_them():
    xla = {policy: _xla_temp_bytes(policy) for policy in REMAT_NAMES}
    estimate = {policy: _estimated_bytes(policy) for policy in REMAT_NAMES}
    assert xla["none"] > xla["minimal"] > xla["full"]
    assert estimate["none"] > estimate["minimal"] > estimate["full"]
    ratios = {policy: estimate[policy] / xla[policy] for policy in REMAT_NAMES}
    assert all(0.3 < ratio < 1.3 for ratio in ratios.values()), ratios
