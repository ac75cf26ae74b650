"""Shared-prefix ("cascade") decode attention: a prompt's K/V once for its n samples (as FlashInfer's
cascade attention and Hydragen).

With the Pallas decode kernel and n > 1 samples per prompt, the sampler can keep each layer's K/V in two
parts instead of repeating the prompt's for every sample: the prefix [prompts, KV heads, P, D] (the
prefill's cache, never repeated) and the suffix [prompts * n, KV heads, new slots, D] (each row's decoded
tokens). A decode step's attention is the log-sum-exp merge of (a) one kernel call over the prefixes, in
which the n samples' queries of a prompt are the "query heads" of one tile per KV head, so a prompt's K/V is
read once per step instead of n times, and (b) one call over each row's suffix slots [0, index]. The merge
is exact: softmax over the union of the two slot sets (both always hold a live slot: a prompt has a token,
and the suffix holds the step's own).

Under a mesh the rows of one prompt must sit on the shard of that prompt: the rows [i*n, i*n+n) of prompt i
split over the batch axes as the prompts do only when those axes divide the prompts as they divide the
rows; when they do not (prompt_shards), the sampler repeats the prompt's K/V per row as before. Where a shared
prefix is worth its second kernel call is measured: shares_prefix (backend.adapter.shared_prefix).
"""

from __future__ import annotations

import functools
import math

import flax
import jax
import jax.numpy as jnp
from jax.sharding import Mesh, PartitionSpec

from framework.backends.maxtext.models.config import ModelConfig
from framework.backends.maxtext.models.decode_attention import CACHE_AXES, CACHE_BLOCK, cache_slots
from framework.backends.maxtext.sharding import DEFAULT_RULES, LogicalRules, constrain, logical_to_spec

Array = jax.Array
_MAX_PREFIX_TILE = 64  # queries per prefix tile: one tile holds 8 samples x 7 query heads of a KV head (Qwen2.5)
# Where shared_prefix=auto shares: measured on one H200 (2026-11-28, docs/benchmarks.md session 16; decode_probe
# --prefix-cache both, Qwen2.5-0.5B shapes, 256 new tokens), ms a decode step shared vs repeated, 16 prompts x 8:
# prompt 256: 1.566 vs 1.495 (shared 4.7% slower), 512 (session 17, another H200): 1.691 vs 1.695 (1.00x), 1024: 1.995 vs 2.206 (1.11x faster), 2048: 2.572 vs 3.405
# (1.32x); 2 prompts x 8: slower at every length (256: 1.033 vs 0.930, 1024: 1.200 vs 1.098, 2048: 1.364 vs
# 1.317), too few prompts to fill the prefix call's tiles.
MAX_SPLITS = 4  # gqa's sequence parts per (row, KV head) in the cascade: 4 measured 1.5-2.5% faster than 8
PROMPT_PER_NEW_TOKENS = 4  # the padded prompt at least this many times max_new_tokens
MIN_PROMPTS_PER_SHARD = 16  # and at least this many prompts on each shard of the batch axes


def kernel_splits(slots: int) -> int:
    """Sequence parts of a gqa call over `slots` (whole CACHE_BLOCKs): at most MAX_SPLITS, dividing the blocks."""
    blocks = slots // CACHE_BLOCK
    return max(s for s in (1, 2, 4, MAX_SPLITS) if blocks % s == 0)


@flax.struct.dataclass
class SharedPrefix:
    """One layer's prompt K/V, [prompts, KV heads, prefix slots, D], and each prompt's live slots [start, stop)."""

    keys: Array
    values: Array
    start: Array  # [prompts] int32
    stop: Array  # [prompts] int32


@flax.struct.dataclass
class PrefixCache:
    """The sampler's decode cache with a shared prefix: `keys`/`values`/`index` are the suffix's (what a
    decode step writes, as KVCache's), `prefix_keys`/`prefix_values` the prompts' per layer."""

    prefix_keys: tuple[Array, ...]  # each [prompts, kv_heads, prefix slots, head_dim]
    prefix_values: tuple[Array, ...]
    prefix_start: Array  # [prompts] int32: the first real slot (prompts are left-padded)
    prefix_stop: Array  # [prompts] int32: one past the prompt's last slot
    keys: tuple[Array, ...]  # each [prompts * n, kv_heads, suffix slots, head_dim]
    values: tuple[Array, ...]
    index: Array  # int32 scalar: the next suffix slot to write

    @classmethod
    def after_prefill(cls, keys: tuple[Array, ...], values: tuple[Array, ...], prompt_mask: Array,
                      samples: int, max_new_tokens: int, mesh: Mesh | None,
                      rules: LogicalRules | None) -> "PrefixCache":
        """From a prefill's per-layer K/V of left-padded prompts ([prompts, P] mask), an empty suffix for
        `samples` rows per prompt and `max_new_tokens` slots each."""
        prompts, length = prompt_mask.shape
        start = jnp.argmax(prompt_mask, axis=1).astype(jnp.int32)
        shape = (prompts * samples, *keys[0].shape[1:2], cache_slots(0, max_new_tokens, "pallas"), keys[0].shape[3])

        def buffer() -> Array:
            return constrain(jnp.zeros(shape, keys[0].dtype), CACHE_AXES, mesh, rules)

        return cls(prefix_keys=keys, prefix_values=values, prefix_start=start,
                   prefix_stop=jnp.full((prompts,), length, jnp.int32), keys=tuple(buffer() for _ in keys),
                   values=tuple(buffer() for _ in keys), index=jnp.zeros((), jnp.int32))

    def layer(self, i: int) -> tuple[Array, Array, Array, SharedPrefix]:
        """What layer i's attention takes: its suffix buffers, the write index, and its shared prefix."""
        prefix = SharedPrefix(self.prefix_keys[i], self.prefix_values[i], self.prefix_start, self.prefix_stop)
        return self.keys[i], self.values[i], self.index, prefix


def shares_prefix(config: ModelConfig, prompts: int, samples: int, prompt_length: int, max_new_tokens: int,
                  shards: int | None) -> bool:
    """Whether the sampler decodes with a PrefixCache (the one rule: the sampler and the preflight's KV count ask
    it). Possible: the Pallas kernel, n > 1, and `shards` not None (prompt_shards). config.shared_prefix on: where
    possible; off: never; auto: where possible and measured faster, a padded prompt of at least
    PROMPT_PER_NEW_TOKENS x max_new_tokens and at least MIN_PROMPTS_PER_SHARD prompts on each of the `shards`."""
    return prefix_decision(config, prompts, samples, prompt_length, max_new_tokens, shards)[0]


def prefix_decision(config: ModelConfig, prompts: int, samples: int, prompt_length: int, max_new_tokens: int,
                    shards: int | None) -> tuple[bool, str]:
    """shares_prefix's answer and why, in words (the run logs it)."""
    if config.shared_prefix == "off":
        return False, "backend.adapter.shared_prefix=off"
    if config.decode_kernel != "pallas":
        return False, f"decode kernel {config.decode_kernel}: only the pallas kernel shares a prefix"
    if samples == 1:
        return False, "one sample per prompt"
    if shards is None:
        return False, "the rollout mesh splits the prompts unlike their rows"
    if config.shared_prefix == "on":
        return True, "backend.adapter.shared_prefix=on"
    if prompt_length < PROMPT_PER_NEW_TOKENS * max_new_tokens:
        return False, f"prompt {prompt_length} < {PROMPT_PER_NEW_TOKENS} x {max_new_tokens} new tokens"
    if prompts // shards < MIN_PROMPTS_PER_SHARD:
        return False, f"{prompts // shards} prompts a batch shard < {MIN_PROMPTS_PER_SHARD}"
    return True, (f"prompt {prompt_length} >= {PROMPT_PER_NEW_TOKENS} x {max_new_tokens} new tokens, "
                  f"{prompts // shards} prompts a batch shard >= {MIN_PROMPTS_PER_SHARD}")


def prompt_shards(prompts: int, samples: int, mesh: Mesh | None, rules: LogicalRules | None) -> int | None:
    """The shards the cache's batch axes split `prompts` over, or None when they do not split them as they split
    their prompts * samples rows (a prompt's rows would sit off its shard: no shared prefix)."""
    if mesh is None or mesh.size == 1:
        return 1
    axes = _batch_axes(prompts, mesh, rules)
    if axes != _batch_axes(prompts * samples, mesh, rules):
        return None
    return math.prod(mesh.shape[axis] for axis in ((axes,) if isinstance(axes, str) else axes or ()))


def kv_cache_tokens(config: ModelConfig, prompts: int, samples: int, prompt_length: int, max_new_tokens: int,
                    shards: int | None) -> int:
    """The K/V entries (per layer and KV head) the sampler's cache holds: the prompt once per group where it
    shares the prefix (shares_prefix), else once per row (the preflight counts it)."""
    kernel = config.decode_kernel
    if shares_prefix(config, prompts, samples, prompt_length, max_new_tokens, shards):
        return (prompts * cache_slots(prompt_length, 0, kernel)
                + prompts * samples * cache_slots(0, max_new_tokens, kernel))
    return prompts * samples * cache_slots(prompt_length, max_new_tokens, kernel)


def cache_per_shard(config: ModelConfig, prompts: int, samples: int, prompt_length: int, max_new_tokens: int,
                    mesh: Mesh | None, rules: LogicalRules | None) -> float:
    """The sampler's K/V entries (per layer and KV head) on one batch shard of `mesh` (an abstract one will do):
    kv_cache_tokens at the mesh's prompt shards, over the shards its prompts * samples rows split into."""
    tokens = kv_cache_tokens(config, prompts, samples, prompt_length, max_new_tokens,
                             prompt_shards(prompts, samples, mesh, rules))
    return tokens / prompt_shards(prompts * samples, 1, mesh, rules)


def cascade_attention(q: Array, prefix: SharedPrefix, keys: Array, values: Array, stop: Array,
                      mesh: Mesh | None, rules: LogicalRules | None) -> Array:
    """q [rows, 1, H, D] (rows = prompts * n, grouped per prompt); keys, values [rows, KVH, S, D], the suffix
    whose slots [0, stop) are live (stop a scalar) -> [rows, 1, H, D] in q's dtype. Off GPU interpreted."""
    if q.shape[1] != 1:
        raise ValueError(f"cascade_attention: {q.shape[1]} tokens a row; a PrefixCache decodes one (prefill a KVCache)")
    kernel = functools.partial(_cascade_kernel, interpret=jax.default_backend() != "gpu")
    stop = jnp.full((q.shape[0],), stop, jnp.int32)
    if mesh is None or mesh.size == 1:
        return kernel(q, prefix, keys, values, stop)
    batch_axes, heads_axes, *_ = logical_to_spec(CACHE_AXES, rules or DEFAULT_RULES, keys.shape, mesh)
    cache_spec = PartitionSpec(batch_axes, heads_axes, None, None)  # whole slots per shard, as decode_attention
    rows_spec = PartitionSpec(batch_axes)
    q_spec = PartitionSpec(batch_axes, None, heads_axes, None)
    prefix_spec = SharedPrefix(cache_spec, cache_spec, rows_spec, rows_spec)
    return jax.shard_map(kernel, mesh=mesh, in_specs=(q_spec, prefix_spec, cache_spec, cache_spec, rows_spec),
                         out_specs=q_spec, check_vma=False)(q, prefix, keys, values, stop)


def _cascade_kernel(q: Array, prefix: SharedPrefix, keys: Array, values: Array, stop: Array, *,
                    interpret: bool) -> Array:
    from jax.experimental.pallas.ops.gpu.decode_attention import gqa

    rows, _, heads, head_dim = q.shape
    prompts, kv_heads = prefix.keys.shape[:2]
    samples, group = rows // prompts, heads // kv_heads
    # The n samples' queries of each KV head side by side: [prompts, KVH * n * g, D].
    shared = q[:, 0].reshape(prompts, samples, kv_heads, group, head_dim).swapaxes(1, 2)
    shared = shared.reshape(prompts, kv_heads * samples * group, head_dim)
    tile = min(_MAX_PREFIX_TILE, max(16, _next_power_of_2(samples * group)))
    call = functools.partial(gqa, block_k=CACHE_BLOCK, interpret=interpret, return_residuals=True,
                             normalize_output=False)
    # gqa takes [B, S, KVH, D] and swaps to [B, KVH, S, D]: the two swaps cancel in XLA, no copy.
    prefix_out, prefix_sums = call(shared, prefix.keys.swapaxes(1, 2), prefix.values.swapaxes(1, 2), prefix.start,
                                   prefix.stop, block_h=tile, k_splits=kernel_splits(prefix.keys.shape[2]))
    prefix_out, prefix_sums = _per_row((prefix_out, prefix_sums), samples, kv_heads, group)
    suffix_out, suffix_sums = call(q[:, 0], keys.swapaxes(1, 2), values.swapaxes(1, 2), jnp.zeros_like(stop), stop,
                                   k_splits=kernel_splits(keys.shape[2]))
    return merge_attention(prefix_out, prefix_sums, suffix_out, suffix_sums).astype(q.dtype)[:, None]


def merge_attention(out_a: Array, sums_a: tuple[Array, Array], out_b: Array, sums_b: tuple[Array, Array]) -> Array:
    """Softmax attention over the union of two disjoint slot sets, from each one's unnormalised output
    sum_s exp(score_s - m) v_s [..., D] and its (l = sum_s exp(score_s - m), m = max score) [...]: gqa's
    return_residuals with normalize_output=False. Float32."""
    (l_a, m_a), (l_b, m_b) = sums_a, sums_b
    m = jnp.maximum(m_a, m_b)
    scale_a, scale_b = jnp.exp(m_a - m), jnp.exp(m_b - m)
    total = out_a.astype(jnp.float32) * scale_a[..., None] + out_b.astype(jnp.float32) * scale_b[..., None]
    return total / (l_a * scale_a + l_b * scale_b)[..., None]


def _per_row(tree, samples: int, kv_heads: int, group: int):
    """[prompts, KVH * n * g, ...] -> [prompts * n, KVH * g, ...]: the prefix call's outputs back in row order."""
    def unshare(x: Array) -> Array:
        prompts, tail = x.shape[0], x.shape[2:]
        x = x.reshape(prompts, kv_heads, samples, group, *tail).swapaxes(1, 2)
        return x.reshape(prompts * samples, kv_heads * group, *tail)
    return jax.tree.map(unshare, tree)


def _next_power_of_2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


def _batch_axes(rows: int, mesh: Mesh, rules: LogicalRules | None):
    """The mesh axes a cache of `rows` rows splits its rows over (uneven axes dropped, as constrain does)."""
    return logical_to_spec(CACHE_AXES, rules or DEFAULT_RULES, (rows, 1, CACHE_BLOCK, 1), mesh)[0]
