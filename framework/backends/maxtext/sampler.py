"""Batched autoregressive sampling over a KV cache, compiled once per (batch, prompt bucket, settings).

Prompts are left-padded to a bucketed length; one prefill fills the cache for every prompt, the
n samples of each prompt share its K/V (models/prefix_cache.py: the Pallas decode kernel, n > 1, where
backend.adapter.shared_prefix says so) or get a copy of it each, and a `jax.lax.while_loop` decodes one
token per step on device (no host round-trip per token) until max_new_tokens or every sequence has emitted EOS.
Finished sequences emit pad tokens. Output rows are grouped per prompt: rows i*n .. i*n+n-1 are the
samples of prompt i (the layout GRPO's group advantages expect).
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import Mesh

from framework.backends.maxtext.models.decode_attention import cache_slots
from framework.backends.maxtext.models.prefix_cache import PrefixCache, prompt_shards, shares_prefix
from framework.backends.maxtext.models.rope import positions_from_mask
from framework.backends.maxtext.models.kv_cache import KVCache
from framework.backends.maxtext.models.transformer import Transformer, unstack_layers
from framework.backends.maxtext.sharding import LogicalRules, cast_floating, put
from framework.core.errors import ConfigError, DataError

Array = jax.Array
_EOS_SLOTS = 4


@dataclasses.dataclass(frozen=True)
class SamplingParams:
    """temperature 0 means greedy; top_k 0 and top_p 1.0 switch those filters off."""

    max_new_tokens: int
    temperature: float = 1.0
    top_k: int = 0
    top_p: float = 1.0
    num_samples: int = 1

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ConfigError(f"sampling.max_new_tokens: {self.max_new_tokens} must be >= 1")
        if self.temperature < 0:
            raise ConfigError(f"sampling.temperature: {self.temperature} must be >= 0 (0 = greedy)")
        if self.top_k < 0:
            raise ConfigError(f"sampling.top_k: {self.top_k} must be >= 0 (0 = off)")
        if not 0.0 < self.top_p <= 1.0:
            raise ConfigError(f"sampling.top_p: {self.top_p} must be in (0, 1] (1 = off)")
        if self.num_samples < 1:
            raise ConfigError(f"sampling.num_samples: {self.num_samples} must be >= 1")


@jax.tree_util.register_dataclass
@dataclasses.dataclass(frozen=True)
class SampleOutput:
    """All arrays have num_prompts * num_samples rows, grouped per prompt.

    prompt_ids/prompt_mask: [N, P] left-padded prompts (P = bucketed prompt length).
    completion_ids: [N, max_new_tokens], pad after EOS. completion_mask: 1 up to and including EOS.
    completion_log_probs: [N, max_new_tokens] float32, log softmax(logits / temperature) of each sampled token
    (the behaviour policy's, for an update one step off-policy; 0 after EOS), or None unless the Sampler was
    built with behaviour_log_probs=True: on-policy the update recomputes them under the training program.
    """

    prompt_ids: Array
    prompt_mask: Array
    completion_ids: Array
    completion_mask: Array
    completion_log_probs: Array | None = None


class Sampler:
    """`Sampler(model, eos_token_ids=..., pad_token_id=...)`, then `generate(params, prompts, rng, sampling)`.

    Compiled code is shared by every Sampler of an equal model: it is keyed by the model, the
    sampling settings and the (bucketed) shapes only.
    """

    def __init__(self, model: Transformer, *, eos_token_ids: Sequence[int], pad_token_id: int,
                 prompt_bucket: int = 32, mesh: Mesh | None = None, rules: LogicalRules | None = None,
                 behaviour_log_probs: bool = False) -> None:
        if not eos_token_ids:
            raise ConfigError("sampler: eos_token_ids is empty; give the tokenizer's EOS id(s)")
        # The model's activation constraints follow the sampler's mesh (default: the model's own).
        self.mesh = mesh if mesh is not None else model.mesh
        self.rules = rules if rules is not None else model.rules
        self.model = model.clone(mesh=self.mesh, rules=self.rules)
        self.eos_token_ids = tuple(int(i) for i in eos_token_ids)
        self._eos = np.full(max(_EOS_SLOTS, len(self.eos_token_ids)), -1, np.int32)
        self._eos[:len(self.eos_token_ids)] = self.eos_token_ids
        self.pad_token_id = int(pad_token_id)
        self.prompt_bucket = max(1, int(prompt_bucket))
        self.behaviour_log_probs = behaviour_log_probs  # a static flag: off, the program is the one before it
        self.program = _generate  # or its ahead-of-time compiled executable (trainers/aot.py)

    def generate(self, params: Any, prompts: Sequence[Sequence[int]], rng: Array,
                 sampling: SamplingParams) -> SampleOutput:
        """Sample completions for token-id prompts of any lengths (padded here, on the left)."""
        prompt_ids, prompt_mask = self.left_pad(prompts)
        return self.generate_padded(params, prompt_ids, prompt_mask, rng, sampling)

    def generate_padded(self, params: Any, prompt_ids: np.ndarray | Array, prompt_mask: np.ndarray | Array,
                        rng: Array, sampling: SamplingParams) -> SampleOutput:
        """Sample from prompts already left-padded to a common length ([B, P] ids and 0/1 mask)."""
        return self.program(*self._program_args(params, prompt_ids, prompt_mask, rng), sampling=sampling,
                            with_log_probs=self.behaviour_log_probs)

    def lower(self, params: Any, prompts: Sequence[Sequence[int]], rng: Array,
              sampling: SamplingParams) -> jax.stages.Lowered:
        """The sampling program `generate` runs for these prompts, lowered (for its HLO or cost analysis)."""
        return _generate.lower(*self._program_args(params, *self.left_pad(prompts), rng), sampling=sampling,
                               with_log_probs=self.behaviour_log_probs)

    def _program_args(self, params: Any, prompt_ids: np.ndarray | Array, prompt_mask: np.ndarray | Array,
                      rng: Array) -> tuple:
        mask = np.asarray(prompt_mask)
        if np.any(mask.sum(axis=1) == 0):
            raise DataError("sampler: a prompt is empty; every prompt needs at least one token")
        if (rows := np.flatnonzero(np.any(np.diff(mask.astype(np.int8), axis=1) < 0, axis=1))).size:
            raise DataError(f"sampler: prompt_mask row {int(rows[0])} is not left padding; each row must be 0s "
                            f"then 1s (the prefill runs each row's real tokens packed: Sampler.left_pad gives that)")
        prompt_ids = put(np.asarray(prompt_ids, np.int32), self.mesh, self.rules, ("activation_batch", None))
        prompt_mask = put(np.asarray(prompt_mask, np.int32), self.mesh, self.rules, ("activation_batch", None))
        return self.model, params, prompt_ids, prompt_mask, rng, self.eos_array(), np.int32(self.pad_token_id)

    def eos_array(self) -> np.ndarray:
        """EOS ids padded with -1 (never a token) to a fixed length, so their number costs no recompile; built
        once (decode_probe's prefill timing passes every token id)."""
        return self._eos

    def left_pad(self, prompts: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
        """[B, P] ids and mask, P = the longest prompt rounded up to a multiple of prompt_bucket."""
        if not prompts or any(len(p) == 0 for p in prompts):
            raise DataError("sampler: prompts must be a non-empty list of non-empty token-id lists")
        longest = max(len(p) for p in prompts)
        length = -(-longest // self.prompt_bucket) * self.prompt_bucket
        ids = np.full((len(prompts), length), self.pad_token_id, np.int32)
        mask = np.zeros((len(prompts), length), np.int32)
        for row, prompt in enumerate(prompts):
            ids[row, length - len(prompt):] = prompt
            mask[row, length - len(prompt):] = 1
        return ids, mask


@functools.partial(jax.jit, static_argnames=("model", "sampling", "with_log_probs"))
def _generate(model: Transformer, params: Any, prompt_ids: Array, prompt_mask: Array, rng: Array,
              eos: Array, pad: Array, sampling: SamplingParams, with_log_probs: bool = False) -> SampleOutput:
    config = model.config
    batch, prompt_length = prompt_ids.shape
    n = sampling.num_samples
    max_new = sampling.max_new_tokens
    # Decoding is bound by reading the weights every token: cast them to the compute dtype and split
    # the layer stack into per-layer arrays once, before the loop.
    variables = {"params": unstack_layers(cast_floating(params, config.dtype))}

    positions = positions_from_mask(prompt_mask)
    # Static: the shapes and the model's shared_prefix setting decide (the preflight's KV count asks the same).
    shared = shares_prefix(config, batch, n, prompt_length, max_new, prompt_shards(batch, n, model.mesh, model.rules))
    # With a shared prefix the prefill's cache holds the prompts only; the suffix comes after it.
    slots = cache_slots(prompt_length, 0 if shared else max_new, config.decode_kernel)
    cache = KVCache.create(config, batch, slots, model.mesh, model.rules)
    hidden, cache = model.apply(variables, prompt_ids, positions, prompt_mask, cache, prefill=True,
                                method=Transformer.hidden_states)
    last_logits = model.apply(variables, hidden[:, -1:], method=Transformer.logits)[:, 0]

    if shared:
        cache = PrefixCache.after_prefill(cache.keys, cache.values, prompt_mask, n, max_new, model.mesh, model.rules)
    else:
        cache = cache.repeat(n)
    last_logits = jnp.repeat(last_logits, n, axis=0)
    next_position = jnp.repeat(positions[:, -1] + 1, n)
    rng, step_rng = jax.random.split(rng)
    first_token = _sample(last_logits, step_rng, sampling)

    rows = batch * n
    tokens = jnp.full((rows, max_new), pad, jnp.int32).at[:, 0].set(first_token)
    # Behaviour log-probs ride in the loop state only when asked for: [rows, max_new] or [rows, 0].
    log_probs = jnp.zeros((rows, max_new if with_log_probs else 0), jnp.float32)
    if with_log_probs:
        log_probs = log_probs.at[:, 0].set(token_log_prob(last_logits, first_token, sampling.temperature))
    done = jnp.isin(first_token, eos)
    one = jnp.ones((rows, 1), jnp.int32)

    def not_finished(state: tuple) -> Array:
        step, _, done, *_ = state
        return (step < max_new) & ~jnp.all(done)

    def decode_step(state: tuple) -> tuple:
        step, token, done, position, cache, tokens, log_probs, rng = state
        logits, cache = model.apply(variables, token[:, None], position[:, None], one, cache)
        rng, step_rng = jax.random.split(rng)
        token = _sample(logits[:, 0], step_rng, sampling)
        token = jnp.where(done, pad, token)
        tokens = jax.lax.dynamic_update_slice(tokens, token[:, None], (0, step))
        if with_log_probs:
            chosen = token_log_prob(logits[:, 0], token, sampling.temperature)
            log_probs = jax.lax.dynamic_update_slice(log_probs, chosen[:, None], (0, step))
        done = done | jnp.isin(token, eos)
        return step + 1, token, done, position + 1, cache, tokens, log_probs, rng

    state = (jnp.int32(1), first_token, done, next_position, cache, tokens, log_probs, rng)
    _, _, _, _, _, tokens, log_probs, _ = jax.lax.while_loop(not_finished, decode_step, state)

    completion_mask = _through_first_eos(tokens, eos)
    return SampleOutput(
        prompt_ids=jnp.repeat(prompt_ids, n, axis=0), prompt_mask=jnp.repeat(prompt_mask, n, axis=0),
        completion_ids=tokens, completion_mask=completion_mask,
        completion_log_probs=(log_probs * completion_mask) if with_log_probs else None)


def token_log_prob(logits: Array, token: Array, temperature: float) -> Array:
    """log softmax(logits / temperature)[token] per row, in float32: the log-prob the update's loss uses for
    the same token (the full tempered softmax, before any top-k/top-p filter); temperature 0 (greedy) -> 1."""
    scaled = logits.astype(jnp.float32) / (temperature or 1.0)
    chosen = jnp.take_along_axis(scaled, token[:, None], axis=-1)[:, 0]
    return chosen - jax.nn.logsumexp(scaled, axis=-1)


def _through_first_eos(tokens: Array, eos: Array) -> Array:
    """1 for tokens up to and including each row's first EOS, 0 after it."""
    is_eos = jnp.isin(tokens, eos).astype(jnp.int32)
    eos_before = jnp.cumsum(is_eos, axis=1) - is_eos
    return (eos_before == 0).astype(jnp.int32)


def _sample(logits: Array, rng: Array, sampling: SamplingParams) -> Array:
    """Next token per row: greedy, or from softmax(logits / temperature) after top-k/top-p filtering."""
    logits = logits.astype(jnp.float32)
    if sampling.temperature == 0.0:
        return jnp.argmax(logits, axis=-1).astype(jnp.int32)
    scaled = logits / sampling.temperature
    if sampling.top_k == 0 and sampling.top_p >= 1.0:
        return categorical_by_blocks(rng, scaled).astype(jnp.int32)
    # Filter in sorted space: top_k (or a full sort for top_p alone), then the nucleus.
    k = sampling.top_k or scaled.shape[-1]
    top_values, top_indices = jax.lax.top_k(scaled, min(k, scaled.shape[-1]))
    if sampling.top_p < 1.0:
        probs = jax.nn.softmax(top_values, axis=-1)
        mass_before = jnp.cumsum(probs, axis=-1) - probs
        top_values = jnp.where(mass_before < sampling.top_p, top_values, -jnp.inf)
    choice = jax.random.categorical(rng, top_values, axis=-1)
    return jnp.take_along_axis(top_indices, choice[:, None], axis=-1)[:, 0].astype(jnp.int32)


def categorical_by_blocks(rng: Array, logits: Array, block: int | None = None) -> Array:
    """A draw from softmax(logits) per row ([rows, vocab] -> [rows]), in two stages: a vocabulary block
    by its probability mass (the logsumexp of its logits), then a token inside that block. Exactly the
    softmax distribution (P(block) * P(token | block) = P(token)), but with rows x (blocks + block)
    random numbers instead of rows x vocab: drawing Gumbel noise for all 151,936 entries of a Qwen
    vocabulary cost as long as the LM head every decode step. `block` divides vocab; default
    `vocab_block(vocab)`; without one, one draw over the whole row (jax.random.categorical)."""
    rows, vocab = logits.shape
    block = block or vocab_block(vocab)
    if not block:
        return jax.random.categorical(rng, logits, axis=-1)
    grouped = logits.reshape(rows, vocab // block, block)
    block_rng, token_rng = jax.random.split(rng)
    chosen = jax.random.categorical(block_rng, jax.nn.logsumexp(grouped, axis=-1), axis=-1)
    within = jnp.take_along_axis(grouped, chosen[:, None, None], axis=1)[:, 0]
    return chosen * block + jax.random.categorical(token_rng, within, axis=-1)


def vocab_block(vocab: int, largest: int = 2048, smallest: int = 256) -> int | None:
    """The largest divisor of vocab in [smallest, largest] (151,936 -> 1,187: 128 blocks), or None
    (small vocabularies, or none divides): then sampling draws over the whole row at once."""
    if vocab <= largest:
        return None
    return next((size for size in range(largest, smallest - 1, -1) if vocab % size == 0), None)
