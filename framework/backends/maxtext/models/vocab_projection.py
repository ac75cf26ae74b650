"""Log-probs of target tokens and the entropy, through the vocabulary projection, with a hand-written backward.

The update needs, per completion position, log softmax(logits / T)[target] and the entropy; the [N, V] logits
(V = 151,936 for Qwen2.5: 10 GB in float32 for 16k positions) are the largest arrays of a step, and every pass
over them costs milliseconds. Autodiff of the plain formula recomputes the logits and goes over them again for
the max, the sum, the softmax and its gradient. Here the forward pass takes two passes (the max; then the sum
of exponentials and the entropy's sum together) and keeps only log Z per position; the backward recomputes the
logits once and writes d logits = g (onehot - softmax) / T in one pass, then the two matmuls. The maths is the
plain formula's (`reference_log_probs`, tested against it with its gradients).
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import jax
import jax.numpy as jnp

from framework.backends.maxtext.models.config import ModelConfig

Array = jax.Array


def head_kernel(config: ModelConfig, params: Any) -> Array:
    """The vocabulary projection as [H, V] in the parameters' dtype (the tied embedding transposed); the matmuls
    cast it to the hidden states' dtype, and its gradient comes back in its own, so chunks add up in float32."""
    if config.tie_word_embeddings:
        return params["embed_tokens"]["embedding"].T
    return params["lm_head"]["kernel"]


def _unconstrained(logits: Array) -> Array:
    return logits


@functools.partial(jax.custom_vjp, nondiff_argnums=(3, 4))
def target_log_probs(hidden: Array, kernel: Array, targets: Array, temperature: float,
                     layout: Callable[[Array], Array] = _unconstrained) -> tuple[Array, Array]:
    """hidden [..., H] in the compute dtype, kernel [H, V] (any float dtype), targets [...] int -> (log-probs
    [...], entropy [...]), float32; the kernel's gradient in the kernel's dtype. `layout` constrains the [..., V]
    logits' sharding (the model's rule for them).
    The entropy carries no gradient (the loss reports it; wrap it in stop_gradient all the same)."""
    (log_probs, entropy), _ = _forward(hidden, kernel, targets, temperature, layout)
    return log_probs, entropy


def _logits(hidden: Array, kernel: Array, temperature: float, layout: Callable[[Array], Array]) -> Array:
    # The matmul in the compute dtype, as the model's own logits; scaled in float32.
    return layout(jnp.dot(hidden, kernel.astype(hidden.dtype)).astype(jnp.float32) / temperature)


def _forward(hidden: Array, kernel: Array, targets: Array, temperature: float,
             layout: Callable[[Array], Array]) -> tuple:
    logits = _logits(hidden, kernel, temperature, layout)
    peak = jnp.max(logits, axis=-1)
    shifted = logits - peak[..., None]
    weights = jnp.exp(shifted)
    total = jnp.sum(weights, axis=-1)
    log_total = jnp.log(total)
    log_z = peak + log_total
    picked = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    entropy = log_total - jnp.sum(weights * shifted, axis=-1) / total
    return (picked - log_z, entropy), (hidden, kernel, targets, log_z)


def _backward(temperature: float, layout: Callable[[Array], Array], residuals: tuple, cotangents: tuple) -> tuple:
    hidden, kernel, targets, log_z = residuals
    d_log_probs, _ = cotangents  # the entropy is reported, not trained on
    probs = jnp.exp(_logits(hidden, kernel, temperature, layout) - log_z[..., None])
    onehot = jnp.arange(probs.shape[-1]) == targets[..., None]
    d_logits = layout((d_log_probs[..., None] * (onehot - probs) / temperature).astype(hidden.dtype))
    d_kernel = jnp.einsum("...h,...v->hv", hidden, d_logits, preferred_element_type=kernel.dtype)
    return jnp.dot(d_logits, kernel.T.astype(hidden.dtype)), d_kernel, None


target_log_probs.defvjp(_forward, _backward)


def reference_log_probs(hidden: Array, kernel: Array, targets: Array, temperature: float) -> tuple[Array, Array]:
    """The plain formula (autodiff through it): what target_log_probs must equal, values and gradients."""
    logits = _logits(hidden, kernel, temperature, _unconstrained)
    log_z = jax.nn.logsumexp(logits, axis=-1)
    picked = jnp.take_along_axis(logits, targets[..., None], axis=-1)[..., 0]
    entropy = log_z - jnp.sum(jax.nn.softmax(logits, axis=-1) * logits, axis=-1)
    return picked - log_z, entropy
