"""Rotary position embeddings as transformers computes them (default and llama3 rope types)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from framework.backends.maxtext.models.config import ModelConfig

Array = jax.Array


def positions_from_mask(attention_mask: Array) -> Array:
    """RoPE positions of left- or right-padded rows: 0 at the first real token (padding gets 0)."""
    return jnp.maximum(jnp.cumsum(attention_mask.astype(jnp.int32), axis=-1) - 1, 0)


def rope_inverse_frequencies(config: ModelConfig) -> np.ndarray:
    """As transformers computes them (default and llama3 rope types), in float32."""
    dim = config.head_dim
    inv_freq = (1.0 / (config.rope_theta ** (np.arange(0, dim, 2, dtype=np.float64) / dim))).astype(np.float32)
    if config.rope_type != "llama3":
        return inv_freq
    factor, low_freq_factor, high_freq_factor, old_context_len = config.rope_llama3
    low_freq_wavelen = old_context_len / low_freq_factor
    high_freq_wavelen = old_context_len / high_freq_factor
    wavelen = 2 * np.pi / inv_freq
    scaled = np.where(wavelen > low_freq_wavelen, inv_freq / factor, inv_freq)
    smooth = (old_context_len / wavelen - low_freq_factor) / (high_freq_factor - low_freq_factor)
    smoothed = (1 - smooth) * scaled / factor + smooth * scaled
    is_medium = (wavelen >= high_freq_wavelen) & (wavelen <= low_freq_wavelen)
    return np.where(is_medium, smoothed, scaled).astype(np.float32)


def apply_rope(x: Array, positions: Array, inv_freq: np.ndarray) -> Array:
    """Rotate-half RoPE (the HF layout) on [batch, length, heads, head_dim], computed in float32."""
    freqs = positions[..., None].astype(jnp.float32) * inv_freq  # [B, T, D/2]
    angles = jnp.concatenate([freqs, freqs], axis=-1)[:, :, None, :]
    x32 = x.astype(jnp.float32)
    first, second = jnp.split(x32, 2, axis=-1)
    rotated = jnp.concatenate([-second, first], axis=-1)
    return (x32 * jnp.cos(angles) + rotated * jnp.sin(angles)).astype(x.dtype)
