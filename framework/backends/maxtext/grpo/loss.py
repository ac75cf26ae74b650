"""The GRPO policy loss in JAX: clipped importance ratio, k3 KL to a frozen reference, normalisation.

All per-token arrays are [batch, completion_len] over completion tokens only, with `mask` 1 on
real tokens and 0 on padding. The loss is a pure function of its inputs and jittable; pass the
string/int/bool options as static arguments (`jax.jit(grpo_loss, static_argnames=STATIC_ARGNAMES)`).

Per token, with ratio r = exp(logp - old_logp) and advantage A:
    loss_t = -min(r * A, clip(r, 1 - clip_low, 1 + clip_high) * A) + beta * kl_t
    kl_t   = exp(ref_logp - logp) - (ref_logp - logp) - 1            (the k3 estimator, >= 0)
             optionally times r (`kl_importance_correction`, DeepSeek-V3.2; TRL's default
             `use_bias_correction_kl=True`): the samples come from the old policy, and the ratio
             makes the KL gradient the unbiased reverse-KL gradient even on-policy.
then reduced over tokens by `normalization` (docs/grpo.md "Loss normalisation" has the TRL equivalents):
    token    sum(loss * mask) / tokens of the whole batch    DAPO; TRL loss_type "dapo"
    sequence mean over sequences of each one's token mean    original GRPO; TRL "grpo"
    fixed    sum(loss * mask) / (batch * max_completion_len) Dr.GRPO; TRL "dr_grpo"
With several micro-batches `token` divides by the token count of the whole batch (num_tokens_in_batch),
which is TRL "dapo"; TRL "bnpo" divides each micro-batch by its own token count and averages the
micro-batches, which equals `token` only with one micro-batch.
"""

from __future__ import annotations

import functools
from typing import Any

import jax
import jax.numpy as jnp

from framework.core.errors import ConfigError

NORMALIZATIONS = ("token", "sequence", "fixed")
STATIC_ARGNAMES = ("normalization", "max_completion_length", "kl_importance_correction")
# Which of our normalisations reproduces each of TRL's GRPOTrainer loss types.
# ("bnpo" matches "token" only with one micro-batch: it normalises each micro-batch by its own tokens.)
TRL_LOSS_TYPE_TO_NORMALIZATION = {"grpo": "sequence", "dapo": "token", "dr_grpo": "fixed"}


def k3_kl(logp: jax.Array, ref_logp: jax.Array) -> jax.Array:
    """Per-token k3 estimate of KL(policy || reference) from samples of the policy (Schulman's k3)."""
    log_ratio = ref_logp - logp
    return jnp.exp(log_ratio) - log_ratio - 1.0


def clipped_surrogate(ratio: jax.Array, advantages: jax.Array, clip_low: float, clip_high: float) -> jax.Array:
    """The PPO/GRPO per-token policy loss -min(r A, clip(r, 1 - clip_low, 1 + clip_high) A)."""
    clipped_ratio = jnp.clip(ratio, 1.0 - clip_low, 1.0 + clip_high)
    return -jnp.minimum(ratio * advantages, clipped_ratio * advantages)


def masked_mean(values: jax.Array, mask: jax.Array) -> jax.Array:
    return (values * mask).sum() / jnp.maximum(mask.sum(), 1.0)


def reduce_tokens(
    per_token: jax.Array,
    mask: jax.Array,
    normalization: str,
    max_completion_length: int | None = None,
    num_tokens_in_batch: jax.Array | float | None = None,
) -> jax.Array:
    """Reduce [batch, len] per-token values to a scalar with one of NORMALIZATIONS (see the module doc)."""
    masked_sum = (per_token * mask).sum()
    if normalization == "token":
        total_tokens = mask.sum() if num_tokens_in_batch is None else num_tokens_in_batch
        return masked_sum / jnp.maximum(total_tokens, 1.0)
    if normalization == "sequence":
        per_sequence = (per_token * mask).sum(axis=-1) / jnp.maximum(mask.sum(axis=-1), 1.0)
        return per_sequence.mean()
    if normalization == "fixed":
        length = per_token.shape[-1] if max_completion_length is None else max_completion_length
        return masked_sum / (per_token.shape[0] * length)
    raise ConfigError(f"loss normalization '{normalization}' is unknown; valid: {list(NORMALIZATIONS)}")


def grpo_loss(
    logp: jax.Array,
    old_logp: jax.Array | None,
    advantages: jax.Array,
    mask: jax.Array,
    ref_logp: jax.Array | None = None,
    *,
    clip_low: float = 0.2,
    clip_high: float = 0.2,
    beta: float = 0.0,
    kl_importance_correction: bool = False,
    normalization: str = "token",
    max_completion_length: int | None = None,
    num_tokens_in_batch: jax.Array | float | None = None,
) -> tuple[jax.Array, dict[str, Any]]:
    """GRPO loss and metrics.

    logp:          [B, T] log-probs of the sampled tokens under the policy being trained.
    old_logp:      [B, T] log-probs under the policy that sampled them; None means on-policy
                   (a single update per batch), i.e. stop_gradient(logp).
    advantages:    [B] (one per sequence) or [B, T].
    mask:          [B, T] 1 for completion tokens, 0 for padding.
    ref_logp:      [B, T] log-probs under the frozen reference, or None when beta is the Python
                   number 0 (the caller then skips the reference forward pass).
    clip_low/high: the ratio is clipped to [1 - clip_low, 1 + clip_high] (DAPO's clip-higher).
    beta:          weight of the k3 KL term added to each token's loss.
    kl_importance_correction: multiply the per-token KL by the ratio r (see the module doc).
    normalization: "token" | "sequence" | "fixed" (see the module doc).
    max_completion_length: the fixed length for "fixed" (default: T).
    num_tokens_in_batch:   for "token": divide by this count instead of mask.sum(), e.g. the token
                   count of the whole batch when the loss is accumulated over micro-batches.

    Returns (loss, metrics) with metrics: policy_loss (the loss without the KL term), kl (token
    mean of the KL term as added, before beta; only when ref_logp is given), clip_fraction_low /
    clip_fraction_high / clip_fraction (share of tokens whose ratio is clipped where it matters: r < 1 - clip_low with
    A < 0, r > 1 + clip_high with A > 0), ratio_mean, ratio_abs_deviation (mean |r - 1|), ratio_min, ratio_max
    (over real tokens).
    """
    if normalization not in NORMALIZATIONS:
        raise ConfigError(f"loss normalization '{normalization}' is unknown; valid: {list(NORMALIZATIONS)}")
    if ref_logp is None and (not isinstance(beta, (int, float)) or beta != 0):
        raise ConfigError(
            f"beta={beta}: a KL penalty needs ref_logp; pass the reference log-probs, or beta as the Python number 0"
        )
    mask = mask.astype(logp.dtype)
    advantages = advantages[:, None] if advantages.ndim == 1 else advantages
    old_logp = jax.lax.stop_gradient(logp) if old_logp is None else old_logp
    reduce = functools.partial(
        reduce_tokens,
        mask=mask,
        normalization=normalization,
        max_completion_length=max_completion_length,
        num_tokens_in_batch=num_tokens_in_batch,
    )

    ratio = jnp.exp(logp - old_logp)
    policy_per_token = clipped_surrogate(ratio, advantages, clip_low, clip_high)
    per_token = policy_per_token
    metrics: dict[str, Any] = {}
    if ref_logp is not None:
        kl_per_token = k3_kl(logp, ref_logp)
        if kl_importance_correction:
            kl_per_token = kl_per_token * ratio
        per_token = per_token + beta * kl_per_token
        metrics["kl"] = masked_mean(kl_per_token, mask)

    clipped_low = ((ratio < 1.0 - clip_low) & (advantages < 0)).astype(logp.dtype)
    clipped_high = ((ratio > 1.0 + clip_high) & (advantages > 0)).astype(logp.dtype)
    real_token = mask > 0
    metrics |= {
        "policy_loss": reduce(policy_per_token),
        "clip_fraction_low": masked_mean(clipped_low, mask),
        "clip_fraction_high": masked_mean(clipped_high, mask),
        "clip_fraction": masked_mean(jnp.maximum(clipped_low, clipped_high), mask),
        "ratio_mean": masked_mean(ratio, mask),
        "ratio_abs_deviation": masked_mean(jnp.abs(ratio - 1.0), mask),  # off-policy drift (0 on-policy)
        "ratio_min": jnp.where(real_token, ratio, jnp.inf).min(),
        "ratio_max": jnp.where(real_token, ratio, -jnp.inf).max(),
    }
    return reduce(per_token), metrics
