"""The maxtext sampler: greedy parity with transformers' generate, padding, EOS, filters, log-probs."""

import re

import jax
import numpy as np
import pytest
import torch

from framework.backends.maxtext.models import Transformer, forward
from framework.backends.maxtext.sampler import Sampler, SamplingParams
from framework.core.errors import ConfigError, DataError
from tests.maxtext.tiny_checkpoints import load_tiny

EOS, PAD = 2, 0  # <|im_end|>, <|endoftext|> in the tiny tokenizers
# Tests share these settings and 3-prompt batches padded to 16 so that they share compiled code.
GREEDY = SamplingParams(max_new_tokens=12, temperature=0.0)
SAMPLED = SamplingParams(max_new_tokens=10, temperature=2.0, top_k=5, top_p=0.6, num_samples=3)


@pytest.fixture(scope="module")
def qwen2(tmp_path_factory) -> dict:
    tiny = load_tiny("tiny_qwen2", tmp_path_factory.getbasetemp())
    tiny["sampler"] = Sampler(Transformer(tiny["config"]), eos_token_ids=[EOS], pad_token_id=PAD, prompt_bucket=8)
    return tiny


def prompts_of_lengths(*lengths: int, seed: int = 0) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(3, 512, size=n).tolist() for n in lengths]


def hf_greedy(hf, sampler: Sampler, prompts, max_new_tokens: int, eos: list[int]) -> np.ndarray:
    ids, mask = sampler.left_pad(prompts)
    with torch.no_grad():
        out = hf.generate(input_ids=torch.tensor(ids, dtype=torch.long), attention_mask=torch.tensor(mask),
                          do_sample=False, max_new_tokens=max_new_tokens, eos_token_id=eos, pad_token_id=PAD)
    return out[:, ids.shape[1]:].numpy()


@pytest.mark.parametrize("name", ["tiny_qwen2", "tiny_qwen3", "tiny_llama"])
def test_greedy_matches_transformers_generate(name, tmp_path_factory):
    tiny = load_tiny(name, tmp_path_factory.getbasetemp())
    sampler = Sampler(Transformer(tiny["config"]), eos_token_ids=[EOS], pad_token_id=PAD, prompt_bucket=8)
    prompts = prompts_of_lengths(3, 11, 1)  # padded to 16: every row has left padding
    out = sampler.generate(tiny["params"], prompts, jax.random.key(0), GREEDY)
    expected = hf_greedy(tiny["hf"], sampler, prompts, GREEDY.max_new_tokens, [EOS])
    np.testing.assert_array_equal(np.asarray(out.completion_ids)[:, :expected.shape[1]], expected)


def test_padding_never_leaks_into_attention(qwen2):
    sampler, params = qwen2["sampler"], qwen2["params"]
    prompts = prompts_of_lengths(4, 15, 9, seed=3)
    batched = sampler.generate(params, prompts, jax.random.key(0), GREEDY)
    # Row 0 has 12 pad tokens; transformers sees the same prompt with none.
    with torch.no_grad():
        alone = qwen2["hf"].generate(input_ids=torch.tensor([prompts[0]]), do_sample=False, max_new_tokens=12,
                                     eos_token_id=[EOS], pad_token_id=PAD, return_dict_in_generate=True)
    expected = alone.sequences[0, 4:].numpy()
    np.testing.assert_array_equal(np.asarray(batched.completion_ids)[0, :len(expected)], expected)
    # Different pad values must not matter either.
    other_pad = Sampler(Transformer(qwen2["config"]), eos_token_ids=[EOS], pad_token_id=7, prompt_bucket=8)
    np.testing.assert_array_equal(
        np.asarray(other_pad.generate(params, prompts, jax.random.key(0), GREEDY).completion_ids),
        np.where(np.asarray(batched.completion_mask) == 1, np.asarray(batched.completion_ids), 7))


def test_the_prefill_attends_over_each_rows_tokens_not_every_cache_slot(qwen2):
    """The prompts fill the cache through the packed causal kernel (as the update's forward), not scores over every
    slot of the cache: no [.., prompt, slots] array in the prefill's program, and its K/V equal a masked prefill's."""
    from framework.backends.maxtext.models import KVCache
    from framework.backends.maxtext.models.decode_attention import cache_slots
    from framework.backends.maxtext.models.rope import positions_from_mask
    from framework.backends.maxtext.models.transformer import unstack_layers

    model, sampler, config = Transformer(qwen2["config"]), qwen2["sampler"], qwen2["config"]
    ids, mask = sampler.left_pad(prompts_of_lengths(4, 15, 9, seed=3))
    slots = ids.shape[1] + 24
    variables = {"params": unstack_layers(qwen2["params"])}

    def fill(prefill):
        cache = KVCache.create(config, len(ids), slots)
        return model.apply(variables, ids, positions_from_mask(mask), mask, cache, prefill=prefill,
                           method=Transformer.hidden_states)

    shapes = {v.aval.shape for eqn in jax.make_jaxpr(lambda: fill(True))().eqns for v in eqn.outvars}
    assert not [s for s in shapes if s[-2:] == (ids.shape[1], slots)]
    (packed, packed_cache), (masked, masked_cache) = fill(True), fill(False)
    real = np.asarray(mask, bool)
    np.testing.assert_allclose(np.asarray(packed)[real], np.asarray(masked)[real], atol=2e-5)
    for a, b in zip(packed_cache.keys + packed_cache.values, masked_cache.keys + masked_cache.values):
        np.testing.assert_allclose(np.asarray(a)[:, :, :ids.shape[1]].swapaxes(1, 2)[real],
                                   np.asarray(b)[:, :, :ids.shape[1]].swapaxes(1, 2)[real], atol=2e-5)
    assert int(packed_cache.index) == int(masked_cache.index) == ids.shape[1]
    with pytest.raises(ValueError, match="fills a KVCache"):  # a shared prefix is made after a prefill, not filled
        model.apply(variables, ids, positions_from_mask(mask), mask, object(), prefill=True,
                    method=Transformer.hidden_states)
    np.testing.assert_array_equal(np.asarray(packed_cache.valid), np.asarray(masked_cache.valid))
    # and the sampler's own program prefills so: no float scores of the prompt's queries over the cache's slots
    program = sampler.lower(qwen2["params"], prompts_of_lengths(4, 15, 9), jax.random.key(0), GREEDY).as_text()
    prompt, slots = ids.shape[1], cache_slots(ids.shape[1], GREEDY.max_new_tokens, config.decode_kernel)
    assert not re.findall(rf"tensor<(?:\d+x)*{prompt}x{slots}xf32>", program)


def test_stops_at_eos_per_sequence_and_pads(qwen2):
    params, prompts = qwen2["params"], prompts_of_lengths(5, 8, 14, seed=4)
    free = np.asarray(qwen2["sampler"].generate(params, prompts, jax.random.key(0), GREEDY).completion_ids)
    # Make the last token that row 0 emits for the first time an EOS (step 0 if it repeats one token).
    stop_step = max(i for i in range(12) if free[0, i] not in free[0, :i])
    stop_token = int(free[0, stop_step])
    sampler = Sampler(Transformer(qwen2["config"]), eos_token_ids=[EOS, stop_token], pad_token_id=PAD,
                      prompt_bucket=8)
    out = sampler.generate(params, prompts, jax.random.key(0), GREEDY)
    ids, mask = np.asarray(out.completion_ids), np.asarray(out.completion_mask)
    np.testing.assert_array_equal(ids[0, :stop_step + 1], free[0, :stop_step + 1])
    assert (ids[0, stop_step + 1:] == PAD).all()
    assert mask[0].tolist() == [1] * (stop_step + 1) + [0] * (11 - stop_step)
    expected = hf_greedy(qwen2["hf"], sampler, prompts, GREEDY.max_new_tokens, [EOS, stop_token])
    np.testing.assert_array_equal(ids[:, :expected.shape[1]], expected)
    for row in (1, 2):
        hits = np.flatnonzero(np.isin(ids[row], [EOS, stop_token]))
        assert mask[row].sum() == (hits[0] + 1 if hits.size else GREEDY.max_new_tokens)


def test_samples_are_grouped_per_prompt_and_seeded(qwen2):
    prompts = prompts_of_lengths(3, 7, 16, seed=6)
    first = qwen2["sampler"].generate(qwen2["params"], prompts, jax.random.key(2), SAMPLED)
    again = qwen2["sampler"].generate(qwen2["params"], prompts, jax.random.key(2), SAMPLED)
    other = qwen2["sampler"].generate(qwen2["params"], prompts, jax.random.key(3), SAMPLED)
    ids, masks = np.asarray(first.prompt_ids), np.asarray(first.prompt_mask)
    for row in range(9):
        assert ids[row][masks[row] == 1].tolist() == prompts[row // 3]
    completions = np.asarray(first.completion_ids)
    assert len({tuple(c) for c in completions[:3]}) > 1  # the samples of one prompt differ
    np.testing.assert_array_equal(completions, np.asarray(again.completion_ids))
    assert not np.array_equal(completions, np.asarray(other.completion_ids))


def test_sampled_tokens_obey_top_k_top_p(qwen2):
    """Every sampled token is among the top-k, and inside the top-p nucleus, of its step's logits."""
    top_k, top_p, temperature = SAMPLED.top_k, SAMPLED.top_p, SAMPLED.temperature
    out = qwen2["sampler"].generate(qwen2["params"], prompts_of_lengths(5, 10, 3, seed=8), jax.random.key(5), SAMPLED)
    assert out.completion_ids.shape == (9, 10) and out.prompt_ids.shape == (9, 16)
    sequence = np.concatenate([np.asarray(out.prompt_ids), np.asarray(out.completion_ids)], axis=1)
    mask = np.concatenate([np.asarray(out.prompt_mask), np.ones_like(out.completion_ids)], axis=1)
    model = Transformer(qwen2["config"])
    logits, _ = jax.jit(lambda p: forward(model, p, sequence, mask))(qwen2["params"])
    step_logits = np.asarray(logits)[:, 15:-1] / temperature  # the logits that chose each completion token
    sampled = np.asarray(out.completion_mask).astype(bool)  # pads after EOS were not sampled
    tokens = np.asarray(out.completion_ids)

    order = np.argsort(-step_logits, axis=-1)
    rank = np.argmax(order == tokens[..., None], axis=-1)
    assert (rank[sampled] < top_k).all()
    top = np.take_along_axis(step_logits, order[..., :top_k], axis=-1)
    probs = np.exp(top - top.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    mass_before = np.take_along_axis(np.cumsum(probs, -1) - probs, np.minimum(rank, top_k - 1)[..., None], -1)
    assert (mass_before[..., 0][sampled] < top_p).all()
    assert (rank[sampled] > 0).any()  # not secretly greedy


def test_bad_settings_and_prompts_are_clear_errors(qwen2):
    for key, value in [("max_new_tokens", 0), ("temperature", -1.0), ("top_k", -1), ("top_p", 0.0),
                       ("num_samples", 0)]:
        with pytest.raises(ConfigError, match=f"sampling.{key}"):
            SamplingParams(**{"max_new_tokens": 4, key: value})
    with pytest.raises(DataError, match="non-empty"):
        qwen2["sampler"].generate(qwen2["params"], [[5, 6], []], jax.random.key(0), GREEDY)
    with pytest.raises(ConfigError, match="eos_token_ids"):
        Sampler(Transformer(qwen2["config"]), eos_token_ids=[], pad_token_id=PAD)
    ids, mask = qwen2["sampler"].left_pad([[5, 6, 7, 8], [9]])
    mask[0, -2] = 0  # a hole inside row 0's prompt: the packed prefill would misplace its tokens
    with pytest.raises(DataError, match="prompt_mask row 0 is not left padding"):
        qwen2["sampler"].generate_padded(qwen2["params"], ids, mask, jax.random.key(0), GREEDY)


def test_sampling_by_vocabulary_blocks_draws_from_the_softmax():
    """Two-stage sampling (a block by its mass, then a token in it) has exactly softmax's distribution:
    200k draws per row match it within 5 standard errors, each row its own, a -inf logit never drawn."""
    import jax
    import jax.numpy as jnp

    from framework.backends.maxtext.sampler import categorical_by_blocks, vocab_block

    logits = jnp.array([[2.0, -1.0, 0.5, 3.0, -jnp.inf, 1.0, 0.0, -2.0, 1.5, 0.2, 2.5, -0.5],
                        [0.0, 0.0, 4.0, 0.0, 1.0, 1.0, -1.0, 0.0, 0.0, 3.0, 0.0, 0.0]])
    draws = 200_000
    keys = jax.random.split(jax.random.PRNGKey(0), draws)
    tokens = jax.jit(jax.vmap(lambda key: categorical_by_blocks(key, logits, block=4)))(keys)  # [draws, 2]
    for row in range(2):
        counts = np.bincount(np.asarray(tokens[:, row]), minlength=12) / draws
        expected = np.asarray(jax.nn.softmax(logits[row]))
        assert np.all(np.abs(counts - expected) <= 5 * np.sqrt(expected * (1 - expected) / draws) + 1e-9), row
    assert not np.any(np.asarray(tokens[:, 0]) == 4)
    assert vocab_block(151_936) == 1187 and vocab_block(128_256) == 2004 and vocab_block(512) is None


def test_the_sampler_draws_by_blocks_for_a_large_vocabulary():
    """A 4,096-entry vocabulary (two blocks of 2,048) goes through the two-stage draw in `_sample`; a block
    whose logits are all -inf is never drawn, and temperature scales before the draw."""
    import jax
    import jax.numpy as jnp

    from framework.backends.maxtext.sampler import _sample

    logits = jnp.concatenate([jnp.full((8, 2048), -jnp.inf), jnp.zeros((8, 2048)).at[:, 3000 - 2048].set(20.0)], axis=1)
    hot = _sample(logits, jax.random.PRNGKey(0), SamplingParams(max_new_tokens=1, temperature=1.0))
    assert hot.dtype == np.int32 and np.all(np.asarray(hot) == 3000)
    flat = _sample(logits, jax.random.PRNGKey(1), SamplingParams(max_new_tokens=1, temperature=1e4))
    assert np.all(np.asarray(flat) >= 2048) and len(set(np.asarray(flat).tolist())) > 1
