"""The vocabulary projection's hand-written backward (models/vocab_projection.py) against autodiff of the plain
formula: log-probs, entropy and both gradients, at the update's [B, C, H] chunk shapes."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from framework.backends.maxtext.models.vocab_projection import reference_log_probs, target_log_probs


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_log_probs_entropy_and_gradients_equal_autodiff_of_the_formula(temperature):
    keys = jax.random.split(jax.random.key(0), 4)
    hidden = jax.random.normal(keys[0], (3, 5, 16))
    kernel = jax.random.normal(keys[1], (16, 97)) * 0.5
    targets = jax.random.randint(keys[2], (3, 5), 0, 97)
    weights = jax.random.normal(keys[3], (3, 5))  # the loss's d loss / d log-prob, one per position

    def run(fn):
        def loss(h, k):
            log_probs, entropy = fn(h, k, targets, temperature)
            return jnp.sum(log_probs * weights) + jnp.sum(jax.lax.stop_gradient(entropy))
        return fn(hidden, kernel, targets, temperature), jax.grad(loss, (0, 1))(hidden, kernel)

    (log_probs, entropy), grads = run(target_log_probs)
    (ref_log_probs, ref_entropy), ref_grads = run(reference_log_probs)
    np.testing.assert_allclose(log_probs, ref_log_probs, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(entropy, ref_entropy, rtol=1e-5, atol=1e-5)
    for grad, ref in zip(grads, ref_grads):
        np.testing.assert_allclose(grad, ref, rtol=1e-4, atol=1e-5)
    assert float(jnp.abs(ref_grads[1]).max()) > 1e-2  # the gradients compared are not all zero


def test_the_log_probs_are_a_distribution_over_the_vocabulary():
    hidden = jax.random.normal(jax.random.key(1), (4, 8))
    kernel = jax.random.normal(jax.random.key(2), (8, 11))
    every_token = jnp.stack([target_log_probs(hidden, kernel, jnp.full((4,), v), 1.3)[0] for v in range(11)])
    np.testing.assert_allclose(jnp.exp(every_token).sum(axis=0), 1.0, rtol=1e-5)
    probs = jnp.exp(every_token)
    entropy = target_log_probs(hidden, kernel, jnp.zeros(4, jnp.int32), 1.3)[1]
    np.testing.assert_allclose(entropy, -(probs * every_token).sum(axis=0), rtol=1e-5)


def test_a_float32_kernel_gets_its_gradient_in_float32_across_chunks():
    """bf16 hidden states, float32 master weights: the matmuls run in bf16, but each chunk's kernel gradient comes
    back in float32, so the update's map over chunks adds them up in float32 (not in the compute dtype)."""
    hidden = jax.random.normal(jax.random.key(3), (4, 2, 3, 8)).astype(jnp.bfloat16)  # [chunks, B, C, H]
    kernel = jax.random.normal(jax.random.key(4), (8, 13))
    targets = jax.random.randint(jax.random.key(5), (4, 2, 3), 0, 13)

    def loss(k):
        log_probs, _ = jax.lax.map(lambda args: target_log_probs(args[0], k, args[1], 1.0), (hidden, targets))
        return log_probs.sum()

    grad = jax.grad(loss)(kernel)
    assert grad.dtype == jnp.float32
    carried = [v.aval for eqn in jax.make_jaxpr(jax.grad(loss))(kernel).eqns if eqn.primitive.name == "scan"
               for v in eqn.outvars if v.aval.shape == kernel.shape]
    assert carried and all(aval.dtype == jnp.float32 for aval in carried)
    reference = jax.grad(lambda k: sum(reference_log_probs(hidden[i], k.astype(jnp.bfloat16), targets[i], 1.0)[0].sum()
                                       for i in range(4)))(kernel)
    np.testing.assert_allclose(grad, reference, rtol=0.05, atol=0.05)


@pytest.mark.parametrize("model", ["tiny_qwen2", "tiny_llama"])  # tied and untied heads
def test_the_update_hands_the_head_over_in_the_parameters_dtype(model):
    from flax import linen as nn

    from framework.backends.maxtext.models import ModelConfig, Transformer, abstract_params
    from framework.backends.maxtext.models.vocab_projection import head_kernel
    from framework.core.paths import load_conf

    config = ModelConfig.from_hf_config(load_conf("model", model)["hf_config"], param_dtype="float32", dtype="bfloat16")
    params = nn.unbox(abstract_params(Transformer(config)))
    kernel = jax.eval_shape(lambda p: head_kernel(config, p), params)
    assert kernel.dtype == jnp.float32 and kernel.shape == (config.hidden_size, config.vocab_size)
