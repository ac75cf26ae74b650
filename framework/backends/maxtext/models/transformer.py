"""Flax (linen) decoder for Llama, Qwen2/2.5 and Qwen3: one module family, switched by ModelConfig flags.

RoPE (optionally llama3-scaled), grouped-query attention, RMSNorm, SwiGLU, tied or untied embeddings.
Every parameter carries logical axis names (see sharding.DEFAULT_RULES). Parameters of the layers
are stacked on a leading "layers" axis. Without a cache (training, log-probs) the layers are one
`nn.scan` over a rematerialised layer body, so a 24-layer model compiles one layer; the rows are
packed (real tokens from slot 0) and attention is one fused causal kernel. With a KVCache (prefill,
decode) the layers run unrolled, each on its own weights and cache buffer (a scanned decode copied
each layer's slice of the stacks on every token), the slots are the cache entries written at
`cache.index`, and a query attends to the slots at or before its own that hold real tokens. Left
padding never leaks into attention, and RoPE uses the explicit `positions`.
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
from flax import linen as nn
from jax.sharding import Mesh

from framework.backends.maxtext.models.config import ModelConfig
from framework.backends.maxtext.models.decode_attention import CACHE_BLOCK, decode_attention, first_live_slot
from framework.backends.maxtext.models.kv_cache import KVCache, LayerCache, attend_mask, mark_valid, write_slots
from framework.backends.maxtext.models.prefix_cache import PrefixCache, cascade_attention
from framework.backends.maxtext.models.rope import apply_rope, positions_from_mask, rope_inverse_frequencies
from framework.backends.maxtext.sharding import LogicalRules, constrain

Array = jax.Array
_KERNEL_INIT = nn.initializers.normal(stddev=0.02)  # HF initializer_range; real weights are loaded
LOGITS_AXES = ("activation_batch", "activation_length", "activation_vocab")


class RMSNorm(nn.Module):
    dim: int
    eps: float
    axis_name: str
    dtype: str
    param_dtype: str

    @nn.compact
    def __call__(self, x: Array) -> Array:
        scale = self.param("scale", nn.with_logical_partitioning(nn.initializers.ones, (self.axis_name,)),
                           (self.dim,), self.param_dtype)
        x32 = x.astype(jnp.float32)
        normed = x32 * jax.lax.rsqrt(jnp.mean(x32 * x32, axis=-1, keepdims=True) + self.eps)
        return scale.astype(self.dtype) * normed.astype(self.dtype)


def _dense(features: int | tuple[int, ...], kernel_axes: tuple[str, ...], use_bias: bool,
           config: ModelConfig, name: str, axis: int | tuple[int, ...] = -1) -> nn.DenseGeneral:
    num_out = 1 if isinstance(features, int) else len(features)
    return nn.DenseGeneral(
        features=features, axis=axis, use_bias=use_bias, dtype=config.dtype, param_dtype=config.param_dtype,
        kernel_init=nn.with_logical_partitioning(_KERNEL_INIT, kernel_axes),
        bias_init=nn.with_logical_partitioning(nn.initializers.zeros, kernel_axes[-num_out:]), name=name)


class Attention(nn.Module):
    """Grouped-query attention in one of two modes.

    Packed (no cache): every row's real tokens are contiguous from slot 0 (Transformer.hidden_states
    shifts left padding away), so causal attention over `lengths` real keys is exact and runs as one
    fused kernel (jax.nn.dot_product_attention; cuDNN flash attention on GPU with attention="cudnn").
    Cached: the new keys/values are written into the layer's cache at `index` and the queries attend
    to the slots `attend` allows (left padding, causality); one new token per row with
    decode_kernel="pallas" runs the fused decode kernel, which also writes the new keys/values
    (models/decode_attention.py), or with a shared prompt prefix the cascade of two (models/prefix_cache.py).
    """

    config: ModelConfig
    mesh: Mesh | None = None
    rules: LogicalRules | None = None

    @nn.compact
    def __call__(self, x: Array, positions: Array, lengths: Array | None, attend: Array | None,
                 cache: LayerCache | None) -> tuple[Array, tuple[Array, Array] | None]:
        c = self.config
        q = _dense((c.num_heads, c.head_dim), ("embed", "heads", "head_dim"), c.qkv_bias, c, "q_proj")(x)
        k = _dense((c.num_kv_heads, c.head_dim), ("embed", "kv_heads", "head_dim"), c.qkv_bias, c, "k_proj")(x)
        v = _dense((c.num_kv_heads, c.head_dim), ("embed", "kv_heads", "head_dim"), c.qkv_bias, c, "v_proj")(x)
        if c.qk_norm:
            q = RMSNorm(c.head_dim, c.rms_norm_eps, "head_dim", c.dtype, c.param_dtype, name="q_norm")(q)
            k = RMSNorm(c.head_dim, c.rms_norm_eps, "head_dim", c.dtype, c.param_dtype, name="k_norm")(k)
        inv_freq = rope_inverse_frequencies(c)
        q = self._constrain(apply_rope(q, positions, inv_freq), "activation_heads")
        k = self._constrain(apply_rope(k, positions, inv_freq), "activation_kv_heads")
        v = self._constrain(v, "activation_kv_heads")

        if cache is None:
            out, new_cache = self._packed(q, k, v, lengths), None
        elif lengths is not None:  # a prompt into an empty cache, run packed: the caller writes (k, v) into it
            out, new_cache = self._packed(q, k, v, lengths), (k, v)
        else:
            keys, values, index, prefix = cache
            whole_blocks = keys.shape[2] % CACHE_BLOCK == 0  # the sampler's caches; others take XLA's path
            if prefix is None and c.decode_kernel == "pallas" and q.shape[1] == 1 and whole_blocks:
                # the fused kernel writes k, v itself
                out, keys, values = decode_attention(q, k, v, keys, values, first_live_slot(attend), index,
                                                     self.mesh, self.rules)
            else:
                keys, values = self._write(keys, k, index), self._write(values, v, index)
                if prefix is not None:  # a decode step's token: the suffix's live slots are [0, index]
                    out = cascade_attention(q, prefix, keys, values, index + 1, self.mesh, self.rules)
                else:
                    out = self._masked(q, keys, values, attend)
            new_cache = (keys, values)
        out = self._constrain(out, "activation_heads")
        out = _dense(c.hidden_size, ("heads", "head_dim", "embed"), c.o_bias, c, "o_proj", axis=(-2, -1))(out)
        return out, new_cache

    def _packed(self, q: Array, k: Array, v: Array, lengths: Array) -> Array:
        """Causal attention over the first `lengths[b]` keys of each row (queries past them are ignored)."""
        c = self.config
        return jax.nn.dot_product_attention(q, k.astype(q.dtype), v.astype(q.dtype), is_causal=True,
                                            key_value_seq_lengths=lengths, implementation=c.attention_kernel)

    def _write(self, buffer: Array, new: Array, index: Array) -> Array:
        return write_slots(buffer, new, index, self.mesh, self.rules)

    def _masked(self, q: Array, k: Array, v: Array, attend: Array) -> Array:
        """Attention under an explicit [B, T, S] mask, without repeating K/V: queries grouped per KV head."""
        c = self.config
        batch, length = q.shape[:2]
        groups = c.num_heads // c.num_kv_heads
        q = q.reshape(batch, length, c.num_kv_heads, groups, c.head_dim)
        scores = jnp.einsum("btkgd,bksd->bkgts", q, k.astype(q.dtype),
                            preferred_element_type=jnp.float32) * (c.head_dim ** -0.5)
        # A finite floor keeps fully masked rows (padding queries) free of NaN.
        scores = jnp.where(attend[:, None, None, :, :], scores, jnp.finfo(jnp.float32).min)
        probs = jax.nn.softmax(scores, axis=-1).astype(c.dtype)
        out = jnp.einsum("bkgts,bksd->btkgd", probs, v.astype(c.dtype))
        return out.reshape(batch, length, c.num_heads, c.head_dim)

    def _constrain(self, x: Array, heads_axis: str) -> Array:
        return constrain(x, ("activation_batch", "activation_length", heads_axis, None), self.mesh, self.rules)


class MLP(nn.Module):
    config: ModelConfig
    mesh: Mesh | None = None
    rules: LogicalRules | None = None

    @nn.compact
    def __call__(self, x: Array) -> Array:
        c = self.config
        gate = _dense(c.intermediate_size, ("embed", "mlp"), c.mlp_bias, c, "gate_proj")(x)
        up = _dense(c.intermediate_size, ("embed", "mlp"), c.mlp_bias, c, "up_proj")(x)
        hidden = constrain(nn.silu(gate) * up, ("activation_batch", "activation_length", "activation_mlp"),
                           self.mesh, self.rules)
        return _dense(c.hidden_size, ("mlp", "embed"), c.mlp_bias, c, "down_proj")(hidden)


class DecoderLayer(nn.Module):
    """One layer: (x, broadcast inputs, the layer's cache or None) -> (x, the updated cache or None).
    Scanned (no cache) or called once per layer (with a cache)."""

    config: ModelConfig
    mesh: Mesh | None = None
    rules: LogicalRules | None = None

    @nn.compact
    def __call__(self, x: Array, positions: Array, lengths: Array | None, attend: Array | None,
                 cache: LayerCache | None) -> tuple[Array, tuple[Array, Array] | None]:
        c = self.config
        normed = RMSNorm(c.hidden_size, c.rms_norm_eps, "norm", c.dtype, c.param_dtype, name="input_layernorm")(x)
        attn_out, new_cache = Attention(c, self.mesh, self.rules, name="self_attn")(
            normed, positions, lengths, attend, cache)
        x = x + attn_out
        normed = RMSNorm(c.hidden_size, c.rms_norm_eps, "norm", c.dtype, c.param_dtype,
                         name="post_attention_layernorm")(x)
        x = _constrain_hidden(x + MLP(c, self.mesh, self.rules, name="mlp")(normed), self.mesh, self.rules)
        return x, new_cache


# Named remat policies (MaxText's names): what the backward pass may keep instead of recomputing.
REMAT_POLICIES = {
    "none": None,  # keep every activation: fastest, most memory
    "minimal": jax.checkpoint_policies.dots_with_no_batch_dims_saveable,  # keep matmul outputs
    "full": jax.checkpoint_policies.nothing_saveable,  # keep only each layer's input
}


def _constrain_hidden(x: Array, mesh: Mesh | None, rules: LogicalRules | None) -> Array:
    return constrain(x, ("activation_batch", "activation_length", "activation_embed"), mesh, rules)


def scanned_layers(config: ModelConfig) -> type[nn.Module]:
    """The decoder layers as one `nn.scan` over a rematerialised layer body: one compiled layer,
    parameters stacked on a leading "layers" axis (as MaxText's scan_layers)."""
    layer = DecoderLayer
    if config.remat != "none":
        layer = nn.remat(layer, policy=REMAT_POLICIES[config.remat], prevent_cse=False)
    return nn.scan(layer, variable_axes={"params": 0}, split_rngs={"params": True},
                   in_axes=(nn.broadcast,) * 4, length=config.num_layers,
                   metadata_params={nn.PARTITION_NAME: "layers"})


def unstack_layers(params: Any) -> Any:
    """The params with the stacked "layers" entry as a tuple of per-layer trees: what decoding with a
    KVCache reads (each layer's weights as their own arrays; slicing the stack inside the decode loop
    would copy them on every token). Split once, before the loop."""
    layers = params["layers"]
    if isinstance(layers, tuple):
        return params
    count = jax.tree.leaves(layers)[0].shape[0]
    return {**params, "layers": tuple(jax.tree.map(lambda p, i=i: p[i], layers) for i in range(count))}


class Transformer(nn.Module):
    """Causal LM. `__call__` -> (float32 logits [B, T, V], updated cache or None).

    `hidden_states` and `logits` are the two halves, for callers that need logits of only a few
    positions (the sampler's prefill) or chunk the vocabulary projection (trainers/update.py:completion_log_probs).
    """

    config: ModelConfig
    mesh: Mesh | None = None
    rules: LogicalRules | None = None

    def setup(self) -> None:
        c = self.config
        self.embed_tokens = nn.Embed(
            num_embeddings=c.vocab_size, features=c.hidden_size, dtype=c.dtype, param_dtype=c.param_dtype,
            embedding_init=nn.with_logical_partitioning(_KERNEL_INIT, ("vocab", "embed")))
        self.layers = scanned_layers(c)(c, self.mesh, self.rules)
        self.norm = RMSNorm(c.hidden_size, c.rms_norm_eps, "norm", c.dtype, c.param_dtype)
        if not c.tie_word_embeddings:
            self.lm_head = _dense(c.vocab_size, ("embed", "vocab"), False, c, None)

    def __call__(self, input_ids: Array, positions: Array, attention_mask: Array,
                 cache: KVCache | None = None) -> tuple[Array, KVCache | None]:
        hidden, cache = self.hidden_states(input_ids, positions, attention_mask, cache)
        return self.logits(hidden), cache

    def hidden_states(self, input_ids: Array, positions: Array, attention_mask: Array,
                      cache: KVCache | PrefixCache | None = None,
                      prefill: bool = False) -> tuple[Array, KVCache | PrefixCache | None]:
        """Final-norm hidden states [B, T, H]. With a cache, the T tokens go to slots index..index+T-1.

        Without a cache, or with `prefill` (the T tokens fill a KVCache from slot 0: the sampler's prompts), each row's
        real tokens must be contiguous (left and/or right padding, no holes): the rows are shifted so that they
        start at slot 0, run packed (the fused causal kernel over each row's real tokens, not a mask over every
        slot of the cache), and shifted back; a prefill writes each layer's K/V to slots 0..T-1 as shifted back.
        """
        attention_mask = attention_mask.astype(bool)
        if cache is None or prefill:
            lead = jnp.argmax(attention_mask, axis=1)  # padding slots before the first real token
            to_packed, from_packed = _row_rotations(lead, input_ids.shape[1])
            x = self._embed(jnp.take_along_axis(input_ids, to_packed, axis=1))
            positions, lengths = jnp.take_along_axis(positions, to_packed, axis=1), attention_mask.sum(axis=1)
            if cache is None:
                x, _ = self.layers(x, positions, lengths.astype(jnp.int32), None, None)
            else:  # the prompts attend only to each other: the cache is filled from slot 0, whatever it held
                if not isinstance(cache, KVCache):
                    raise ValueError(f"Transformer.hidden_states(prefill=True) fills a KVCache, not {type(cache).__name__}")
                cache = mark_valid(attention_mask, cache.replace(index=jnp.zeros((), jnp.int32)))
                x, cache = self._unrolled(x, positions, lengths.astype(jnp.int32), None, cache, from_packed)
            return self.norm(jnp.take_along_axis(x, from_packed[..., None], axis=1)), cache
        # A PrefixCache decodes with the cascade kernel, which finds its live slots without a mask.
        attend, cache = (None, cache) if isinstance(cache, PrefixCache) else attend_mask(attention_mask, cache)
        x, cache = self._unrolled(self._embed(input_ids), positions, None, attend, cache)
        return self.norm(x), cache

    def _unrolled(self, x: Array, positions: Array, lengths: Array | None, attend: Array | None,
                  cache: KVCache | PrefixCache, from_packed: Array | None = None) -> tuple[Array, KVCache | PrefixCache]:
        """The layers one by one on their own weights and cache buffers (decoding is bound by reading each layer
        once); with `lengths` (a packed prefill) each layer's K/V shifted back by `from_packed` and written."""
        layer = DecoderLayer(self.config, self.mesh, self.rules, parent=None)
        layers = self.variables["params"]["layers"]
        if not isinstance(layers, tuple):  # slicing the stack here would copy every layer on every token
            raise ValueError("Transformer with a KVCache needs per-layer params: pass unstack_layers(params)")
        keys, values = [], []
        for i, layer_params in enumerate(layers):
            x, (k, v) = layer.apply({"params": layer_params}, x, positions, lengths, attend, cache.layer(i))
            if lengths is not None:
                back = from_packed[:, :, None, None]
                k, v = (write_slots(buffer, jnp.take_along_axis(new, back, axis=1), cache.index, self.mesh, self.rules)
                        for buffer, new in ((cache.keys[i], k), (cache.values[i], v)))
            keys.append(k)
            values.append(v)
        length = x.shape[1]
        return x, cache.replace(keys=tuple(keys), values=tuple(values), index=cache.index + length)

    def _embed(self, input_ids: Array) -> Array:
        return _constrain_hidden(self.embed_tokens(input_ids), self.mesh, self.rules)

    def logits(self, hidden: Array) -> Array:
        if self.config.tie_word_embeddings:
            logits = self.embed_tokens.attend(hidden)
        else:
            logits = self.lm_head(hidden)
        return constrain(logits.astype(jnp.float32), LOGITS_AXES, self.mesh, self.rules)


def _row_rotations(lead: Array, length: int) -> tuple[Array, Array]:
    """Gather indices [B, T] that rotate each row left by `lead` slots, and back."""
    slots = jnp.arange(length)[None, :]
    return (slots + lead[:, None]) % length, (slots - lead[:, None]) % length


def abstract_params(model: Transformer) -> Any:
    """Parameter shapes/dtypes with their logical axes (nn.LogicallyPartitioned leaves), nothing allocated."""
    ids = jnp.zeros((1, 1), jnp.int32)
    variables = jax.eval_shape(lambda: model.init(jax.random.key(0), ids, ids, jnp.ones((1, 1), bool)))
    return variables["params"]


def forward(model: Transformer, params: Any, input_ids: Array, attention_mask: Array,
            positions: Array | None = None, cache: KVCache | None = None) -> tuple[Array, KVCache | None]:
    """Logits (float32) and updated cache; positions default to those implied by the padding mask."""
    if positions is None:
        positions = positions_from_mask(attention_mask)
    if cache is not None:
        params = unstack_layers(params)
    return model.apply({"params": params}, input_ids, positions, attention_mask, cache)
