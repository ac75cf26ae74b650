"""Attention of one new token per row over the KV cache, and the token's K/V written into it, as one kernel.

The XLA path (Attention._masked) scores every slot of a layer's cache buffer, masks padding and
unwritten slots, and runs two batched matmuls and a softmax that reach 10-35% of the memory
bandwidth at decode shapes (docs/benchmarks.md, "Where the rollout's time goes"). jax's Pallas
decode-attention kernel (`gqa`, which the shared-prefix cascade still calls) splits the sequence
and combines the parts in two more XLA kernels, and the cache writes are two more: at Qwen2.5-0.5B
decode shapes each of these small kernels costs 1.3-2 us, a tenth of the layer's attention time.
So a decode step's attention is one Pallas (Triton) program per (row, KV head): its query heads
over the live cache slots [start, index) block by block (online softmax, blocks before the row's
first live slot skipped), plus the new token's (k, v) from registers, normalised in the kernel;
the new (k, v) are stored at slot `index` of the same buffers (aliased in place). That is exact
because a row's real tokens are contiguous in the cache: left padding, then the prompt, then every
decoded token (the sampler's layout). The kernel treats every slot of [start, index) as live: a cached
forward with holes in its mask must use the XLA path (decode_kernel="xla"); Transformer sends a cache whose
slots are not whole CACHE_BLOCKs there itself. With few rows x KV heads (fewer programs than the GPU runs at
once: a small batch, a long context) each row's live slots are split into parts attended by programs of their
own and combined in one XLA kernel afterwards (`sequence_splits`; 2.2-3.3x less time at 8-16 rows over 2-3k slots
on an H200, docs/benchmarks.md "Session 19").

Under a mesh the kernel runs per shard (shard_map): rows split over the batch axes, KV heads over
the tensor axis together with their query heads.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, PartitionSpec

from framework.backends.maxtext.sharding import DEFAULT_RULES, LogicalRules, constrain, logical_to_spec

Array = jax.Array
# The KV cache layout [batch, KV heads, slots, head_dim]: what the kernel reads without a transpose.
CACHE_AXES = ("cache_batch", "cache_kv_heads", "cache_sequence", "cache_head_dim")
CACHE_BLOCK = 64  # keys per kernel block; a cache buffer the kernel reads is a multiple of it
# Triton settings of the decode kernel: 3 stages measured 1.6% faster than 2 at 128 rows (1.595 -> 1.569 ms a step,
# one H100, docs/benchmarks.md "Session 18", call B); 8 warps were not faster. Blocks of 128 keys: not established
# (that call's script set a name the module does not read; see the note under call B's table).
NUM_WARPS = 4
NUM_STAGES = 3
# Below this many programs (rows x KV heads) a row's slots are split into parts: about two resident programs per SM of
# an H100/H200 (132 SMs). Unsplit, 16 rows x 2 KV heads at 2,048 slots took 14.0 us per layer on an H200 against the
# split gqa's 8.9 (docs/benchmarks.md, "Session 19").
TARGET_PROGRAMS = 256
MAX_PARTS = 8


def cache_slots(prompt_length: int, max_new_tokens: int, decode_kernel: str) -> int:
    """The slots of a sampler's KV cache: the prompt and every new token, rounded up to whole kernel
    blocks for the Pallas kernel (the sampler allocates it, the preflight counts it)."""
    slots = prompt_length + max_new_tokens
    return -(-slots // CACHE_BLOCK) * CACHE_BLOCK if decode_kernel == "pallas" else slots


def sequence_splits(programs: int, slots: int) -> int:
    """Parts each row's slots are attended in: 1 (normalised in the kernel, no combine) once rows x KV heads fill the
    GPU, else up to MAX_PARTS, at most one per cache block."""
    return max(1, min(MAX_PARTS, TARGET_PROGRAMS // programs, slots // CACHE_BLOCK))


def first_live_slot(attend: Array) -> Array:
    """[B] first live slot of each row, from the [B, 1, S] attend mask of a decode step (the slots from it to
    the new token's must all be live, see the module docstring)."""
    return jnp.argmax(attend[:, 0], axis=-1).astype(jnp.int32)


def decode_attention(q: Array, k: Array, v: Array, keys: Array, values: Array, start: Array, index: Array,
                     mesh: Mesh | None, rules: LogicalRules | None,
                     parts: int | None = None) -> tuple[Array, Array, Array]:
    """q [B, 1, H, D], the new token's k, v [B, 1, KVH, D]; keys, values [B, KVH, S, D] (the cache layout, S a
    multiple of CACHE_BLOCK); start [B]; index (scalar: the new token's slot) -> (attention [B, 1, H, D] in q's
    dtype over slots [start, index] with the new token at `index`, keys, values with slot `index` written).
    `parts`: the slots' split (default: sequence_splits of each shard's rows x KV heads). Off GPU the kernel is
    interpreted (tests)."""
    if keys.shape[2] % CACHE_BLOCK:  # the kernel reads whole blocks: a partial last one would read past the buffer
        raise ValueError(f"decode_attention: the cache has {keys.shape[2]} slots; the kernel needs a multiple of "
                         f"{CACHE_BLOCK} (decode_attention.cache_slots rounds up)")
    kernel = functools.partial(_attend_and_append, parts=parts, interpret=jax.default_backend() != "gpu")
    if mesh is None or mesh.size == 1:
        return kernel(q, k, v, keys, values, start, index)
    batch_axes, heads_axes, *_ = logical_to_spec(CACHE_AXES, rules or DEFAULT_RULES, keys.shape, mesh)
    # Each shard holds whole rows' slots: start/index count the full sequence (a rule sharding it is gathered).
    cache_spec = PartitionSpec(batch_axes, heads_axes, None, None)
    token_spec = PartitionSpec(batch_axes, None, heads_axes, None)
    out, keys, values = jax.shard_map(
        kernel, mesh=mesh, out_specs=(token_spec, cache_spec, cache_spec), check_vma=False,
        in_specs=(token_spec, token_spec, token_spec, cache_spec, cache_spec, PartitionSpec(batch_axes),
                  PartitionSpec()))(q, k, v, keys, values, start, index)
    # Back in the cache's layout under the rules (a rule sharding its slots): the decode loop's carry keeps one sharding.
    return out, constrain(keys, CACHE_AXES, mesh, rules), constrain(values, CACHE_AXES, mesh, rules)


def _attend_and_append(q: Array, k: Array, v: Array, keys: Array, values: Array, start: Array, index: Array, *,
                       parts: int | None, interpret: bool) -> tuple[Array, Array, Array]:
    from jax.experimental import pallas as pl  # here, not at import: 80 ms of every run's start-up otherwise
    from jax.experimental.pallas import triton as plgpu

    batch, _, heads, head_dim = q.shape
    kv_heads, slots = keys.shape[1], keys.shape[2]
    groups = heads // kv_heads
    parts = parts or sequence_splits(batch * kv_heads, slots)
    grid = (batch, kv_heads, parts)
    block_h = max(16, pl.next_power_of_2(groups))  # Triton's dot takes at least 16 rows: the heads padded
    per_head = pl.BlockSpec((None, None, block_h, head_dim), lambda b, h, p: (b, h, 0, 0))
    new_entry = pl.BlockSpec((None, None, head_dim), lambda b, h, p: (b, h, 0))
    cache = pl.BlockSpec((None, None, slots, head_dim), lambda b, h, p: (b, h, 0, 0))
    per_program = pl.BlockSpec((None, None), lambda b, h, p: (b, h))
    cache_shapes = [jax.ShapeDtypeStruct(keys.shape, keys.dtype), jax.ShapeDtypeStruct(values.shape, values.dtype)]
    if parts == 1:  # normalised in the kernel
        out_specs = [per_head]
        out_shapes = [jax.ShapeDtypeStruct((batch, kv_heads, groups, head_dim), q.dtype)]
    else:  # each part's unnormalised sum, running max and total, in float32, combined below
        per_part = pl.BlockSpec((None, None, None, block_h, head_dim), lambda b, h, p: (b, h, p, 0, 0))
        per_part_stat = pl.BlockSpec((None, None, None, block_h), lambda b, h, p: (b, h, p, 0))
        out_specs = [per_part, per_part_stat, per_part_stat]
        out_shapes = [jax.ShapeDtypeStruct((batch, kv_heads, parts, block_h, head_dim), jnp.float32),
                      *[jax.ShapeDtypeStruct((batch, kv_heads, parts, block_h), jnp.float32)] * 2]
    kernel = functools.partial(_kernel, groups=groups, block_h=block_h, block_k=CACHE_BLOCK, parts=parts,
                               scale=head_dim ** -0.5)
    *out, keys, values = pl.pallas_call(
        kernel, grid=grid, name="decode_attention",
        in_specs=[per_head, new_entry, new_entry, cache, cache, per_program, per_program],
        out_specs=[*out_specs, cache, cache], out_shape=[*out_shapes, *cache_shapes],
        input_output_aliases={3: len(out_shapes), 4: len(out_shapes) + 1},  # the cache buffers, written in place
        compiler_params=plgpu.CompilerParams(num_warps=NUM_WARPS, num_stages=NUM_STAGES), interpret=interpret,
    )(q.reshape(batch, kv_heads, groups, head_dim), k[:, 0].astype(keys.dtype), v[:, 0].astype(values.dtype),
      keys, values, jnp.broadcast_to(start.astype(jnp.int32)[:, None], grid[:2]),
      jnp.broadcast_to(jnp.asarray(index, jnp.int32), grid[:2]))
    out = out[0] if parts == 1 else _combine(*out)[:, :, :groups].astype(q.dtype)
    return out.reshape(batch, 1, heads, head_dim), keys, values


def _combine(sums: Array, maxima: Array, totals: Array) -> Array:
    """[B, KVH, P, Hb, D] parts' sums with their [B, KVH, P, Hb] running maxima and totals -> [B, KVH, Hb, D]. A part
    without live slots has total 0 (and its max the kernel's finite floor); part 0 always holds the new token."""
    weights = jnp.exp(maxima - maxima.max(axis=2, keepdims=True))
    return (sums * weights[..., None]).sum(axis=2) / (totals * weights).sum(axis=2)[..., None]


def _kernel(q_ref, k_ref, v_ref, keys_ref, values_ref, start_ref, index_ref, *out_refs,
            groups: int, block_h: int, block_k: int, parts: int, scale: float) -> None:
    """One (row, KV head, part): q [block_h, D] (`groups` real heads), the new k, v [D], the cache [S, D]; the part's
    share of the row's live blocks. Part 0 also holds the new token and writes it into the cache."""
    from jax.experimental import pallas as pl
    from jax.experimental.pallas import triton as plgpu

    *results, keys_out, values_out = out_refs
    start, index, part = start_ref[()], index_ref[()], pl.program_id(2)
    head_mask = (jnp.arange(block_h) < groups)[:, None]
    q = plgpu.load(q_ref.at[pl.ds(0, block_h), :], mask=head_mask, other=0.0)
    k_new, v_new = k_ref[...], v_ref[...]
    # The new token opens part 0's online softmax, so its running max is finite from the start; the other parts open
    # empty with a finite floor (a block of dead slots then adds nothing instead of exp(-inf + inf)).
    opens = jnp.full((block_h,), part, jnp.int32) == 0  # a vector: Triton selects between tensors, not scalars
    score_new = (q.astype(jnp.float32) * k_new.astype(jnp.float32)[None, :]).sum(axis=-1) * scale
    out = jnp.where(opens[:, None], v_new.astype(jnp.float32)[None, :], jnp.zeros((block_h, 1), jnp.float32))
    carry = (out, jnp.where(opens, score_new, jnp.full((block_h,), -1e30, jnp.float32)),
             jnp.where(opens, jnp.ones((block_h,), jnp.float32), jnp.zeros((block_h,), jnp.float32)))

    def block(i: Array, carry: tuple) -> tuple:
        out, running_max, total = carry
        slots = pl.ds(pl.multiple_of(i * block_k, block_k), block_k)
        scores = plgpu.dot(q, keys_ref[slots, :].T).astype(jnp.float32) * scale  # [block_h, block_k]
        slot = i * block_k + jnp.arange(block_k)
        scores = jnp.where(((slot >= start) & (slot < index))[None, :], scores, -jnp.inf)
        new_max = jnp.maximum(running_max, scores.max(axis=-1))
        correction = jnp.exp(running_max - new_max)
        weights = jnp.exp(scores - new_max[:, None])
        values_block = values_ref[slots, :]
        out = correction[:, None] * out + plgpu.dot(weights.astype(values_block.dtype), values_block)
        return out, new_max, correction * total + weights.sum(axis=-1)

    first, stop = start // block_k, pl.cdiv(index, block_k)
    share = pl.cdiv(stop - first, parts)
    low = first + part * share
    out, running_max, total = jax.lax.fori_loop(low, jnp.minimum(low + share, stop), block, carry)
    if parts == 1:
        plgpu.store(results[0].at[pl.ds(0, block_h), :], (out / total[:, None]).astype(results[0].dtype),
                    mask=head_mask)
    else:
        for ref, value in zip(results, (out, running_max, total)):
            ref[...] = value

    @pl.when(part == 0)
    def _write_new_entry():
        keys_out[pl.ds(index, 1), :] = k_new[None, :]
        values_out[pl.ds(index, 1), :] = v_new[None, :]
