"""Attention of one new token per row over the KV cache as one fused kernel (flash-decoding).

The XLA path (Attention._masked) scores every slot of a layer's cache buffer, masks padding and
unwritten slots, and runs two batched matmuls and a softmax that reach 10-35% of the memory
bandwidth at decode shapes (docs/benchmarks.md, "Where the rollout's time goes"). Pallas' GPU
decode-attention kernel (jax.experimental.pallas.ops.gpu.decode_attention.gqa: the query heads of
one KV head in one tile, the sequence split in `k_splits` parts combined afterwards) attends to a
row's live slots [start, stop) only and skips the splits that hold none (inside a split holding live
slots it still reads the blocks before `start`). That is exact because a row's real tokens are
contiguous in the cache: left padding, then the prompt, then every decoded token (the sampler's
layout; a cached forward with holes in its mask must use the XLA path).

Under a mesh the kernel runs per shard (shard_map): rows split over the batch axes, KV heads over
the tensor axis together with their query heads.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, PartitionSpec

from framework.backends.maxtext.sharding import DEFAULT_RULES, LogicalRules, logical_to_spec

Array = jax.Array
# The KV cache layout [batch, KV heads, slots, head_dim]: what the kernel reads without a transpose.
CACHE_AXES = ("cache_batch", "cache_kv_heads", "cache_sequence", "cache_head_dim")
CACHE_BLOCK = 64  # keys per kernel block; a cache buffer the kernel reads is a multiple of it
MAX_SPLITS = 4  # sequence parts per (row, KV head): 4 measured 1.5-2.5% faster than 8 (docs/benchmarks.md)


def cache_slots(prompt_length: int, max_new_tokens: int, decode_kernel: str) -> int:
    """The slots of a sampler's KV cache: the prompt and every new token, rounded up to whole kernel
    blocks for the Pallas kernel (the sampler allocates it, the preflight counts it)."""
    slots = prompt_length + max_new_tokens
    return -(-slots // CACHE_BLOCK) * CACHE_BLOCK if decode_kernel == "pallas" else slots


def kernel_splits(slots: int) -> int:
    """Sequence parts of a kernel call over `slots` (whole CACHE_BLOCKs): at most MAX_SPLITS, dividing the blocks."""
    blocks = slots // CACHE_BLOCK
    return max(s for s in (1, 2, 4, MAX_SPLITS) if blocks % s == 0)


def live_slots(attend: Array) -> tuple[Array, Array]:
    """[B] first and one-past-last live slot of each row, from the [B, 1, S] attend mask of a decode
    step (the slots between must all be live, see the module docstring)."""
    live = attend[:, 0]
    start = jnp.argmax(live, axis=-1)
    stop = live.shape[-1] - jnp.argmax(live[:, ::-1], axis=-1)
    return start.astype(jnp.int32), stop.astype(jnp.int32)


def decode_attention(q: Array, keys: Array, values: Array, start: Array, stop: Array,
                     mesh: Mesh | None, rules: LogicalRules | None) -> Array:
    """q [B, 1, H, D]; keys, values [B, KVH, S, D] (the cache layout, S a multiple of CACHE_BLOCK);
    start, stop [B] -> [B, 1, H, D] in q's dtype. Off GPU the kernel is interpreted (tests)."""
    kernel = functools.partial(_kernel, interpret=jax.default_backend() != "gpu")
    if mesh is None or mesh.size == 1:
        return kernel(q, keys, values, start, stop)
    batch_axes, heads_axes, *_ = logical_to_spec(CACHE_AXES, rules or DEFAULT_RULES, keys.shape, mesh)
    # Each shard holds whole rows' slots: start/stop index the full sequence (a rule sharding it is gathered).
    cache_spec = PartitionSpec(batch_axes, heads_axes, None, None)
    q_spec = PartitionSpec(batch_axes, None, heads_axes, None)
    rows_spec = PartitionSpec(batch_axes)
    return jax.shard_map(kernel, mesh=mesh, in_specs=(q_spec, cache_spec, cache_spec, rows_spec, rows_spec),
                         out_specs=q_spec, check_vma=False)(q, keys, values, start, stop)


def _kernel(q: Array, keys: Array, values: Array, start: Array, stop: Array, *, interpret: bool) -> Array:
    from jax.experimental.pallas.ops.gpu.decode_attention import gqa

    batch, _, heads, head_dim = q.shape
    # gqa takes [B, S, KVH, D] and swaps to [B, KVH, S, D]: the two swaps cancel in XLA, no copy.
    out = gqa(q[:, 0], keys.swapaxes(1, 2), values.swapaxes(1, 2), start, stop, block_k=CACHE_BLOCK,
              k_splits=kernel_splits(keys.shape[2]), interpret=interpret)
    return out.reshape(batch, 1, heads, head_dim)
