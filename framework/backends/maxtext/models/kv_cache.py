"""The sampler's key/value cache: per-layer buffers in the decode kernel's layout, which slots hold real
tokens, and how new entries and a step's attention mask are written into it."""

from __future__ import annotations

import flax
import jax
import jax.numpy as jnp
from jax.sharding import Mesh

from framework.backends.maxtext.models.config import ModelConfig
from framework.backends.maxtext.models.decode_attention import CACHE_AXES
from framework.backends.maxtext.models.prefix_cache import SharedPrefix
from framework.backends.maxtext.sharding import LogicalRules, constrain

Array = jax.Array
LayerCache = tuple[Array, Array, Array, SharedPrefix | None]  # a layer's K/V buffers, write index, shared prefix


@flax.struct.dataclass
class KVCache:
    """Per-layer key/value buffers of fixed length, plus which slots hold real (non-padding) tokens.

    One buffer per layer (not one stacked array): a decode step writes one slot of each and reads
    each whole, with no per-token copy of a layer's slice out of a stack.
    """

    keys: tuple[Array, ...]  # each [batch, kv_heads, max_length, head_dim] (decode_attention.CACHE_AXES)
    values: tuple[Array, ...]
    valid: Array  # [batch, max_length] bool
    index: Array  # int32 scalar: the next slot to write

    @classmethod
    def create(cls, config: ModelConfig, batch_size: int, max_length: int,
               mesh: Mesh | None = None, rules: LogicalRules | None = None) -> "KVCache":
        shape = (batch_size, config.num_kv_heads, max_length, config.head_dim)

        def buffer() -> Array:
            return constrain(jnp.zeros(shape, config.dtype), CACHE_AXES, mesh, rules)

        return cls(keys=tuple(buffer() for _ in range(config.num_layers)),
                   values=tuple(buffer() for _ in range(config.num_layers)),
                   valid=jnp.zeros((batch_size, max_length), bool), index=jnp.zeros((), jnp.int32))

    def layer(self, i: int) -> tuple[Array, Array, Array, None]:
        """What layer i's attention takes: its buffers, the write index, and no shared prefix."""
        return self.keys[i], self.values[i], self.index, None

    def repeat(self, repeats: int) -> "KVCache":
        """Each sequence `repeats` times in a row (n samples per prompt share one prefill)."""
        def rep(x: Array) -> Array:
            return jnp.repeat(x, repeats, axis=0)
        return self.replace(keys=tuple(map(rep, self.keys)), values=tuple(map(rep, self.values)),
                            valid=rep(self.valid))


def attend_mask(attention_mask: Array, cache: KVCache) -> tuple[Array, KVCache]:
    """[B, T, S] bool: query t may attend slot s (real token, not after the query's own slot)."""
    cache = mark_valid(attention_mask, cache)
    query_slots = cache.index + jnp.arange(attention_mask.shape[1])
    causal = jnp.arange(cache.valid.shape[1])[None, :] <= query_slots[:, None]
    return cache.valid[:, None, :] & causal[None], cache


def mark_valid(attention_mask: Array, cache: KVCache) -> KVCache:
    """The cache with the T new slots from cache.index marked as real tokens where `attention_mask` says so."""
    return cache.replace(valid=jax.lax.dynamic_update_slice(cache.valid, attention_mask, (0, cache.index)))


def write_slots(buffer: Array, new: Array, index: Array, mesh: Mesh | None, rules: LogicalRules | None) -> Array:
    """The [B, T, KVH, D] new entries written at slots index..index+T-1 of a [B, KVH, S, D] buffer."""
    new = new.swapaxes(1, 2).astype(buffer.dtype)
    buffer = jax.lax.dynamic_update_slice(buffer, new, (0, 0, index, 0))
    return constrain(buffer, CACHE_AXES, mesh, rules)
