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
