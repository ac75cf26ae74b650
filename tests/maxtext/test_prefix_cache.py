"""Shared-prefix (cascade) decode attention: the kernel pair and its merge against float64 attention, and the
sampler's tokens with a shared prefix equal to those of the repeated cache, alone and per shard under meshes."""

import json
import sys
from types import SimpleNamespace

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from framework.backends.maxtext.models import transformer
from framework.backends.maxtext.models.prefix_cache import (SharedPrefix, cascade_attention, kv_cache_tokens,
                                                             prefix_decision, prompt_shards, shares_prefix)
from tests.maxtext.test_decode_attention import HEAD_DIM, HEADS, KV_HEADS


def cascade_inputs(starts: list[int], samples: int, prefix_slots: int, suffix_slots: int, seed: int = 0):
    """q for len(starts) * samples rows; per-prompt prefix K/V and per-row suffix K/V, float32."""
    rng = np.random.default_rng(seed)
    prompts = len(starts)

    def normal(*shape):
        return rng.normal(size=shape).astype(np.float32)

    q = normal(prompts * samples, 1, HEADS, HEAD_DIM)
    prefix = [normal(prompts, KV_HEADS, prefix_slots, HEAD_DIM) for _ in range(2)]
    suffix = [normal(prompts * samples, KV_HEADS, suffix_slots, HEAD_DIM) for _ in range(2)]
    return q, prefix, suffix


def cascade(q, prefix, suffix, starts, stop_prefix, stop_suffix) -> np.ndarray:
    prompts = len(starts)
    shared = SharedPrefix(jnp.asarray(prefix[0]), jnp.asarray(prefix[1]), jnp.asarray(starts, jnp.int32),
                          jnp.full((prompts,), stop_prefix, jnp.int32))
    return np.asarray(cascade_attention(jnp.asarray(q), shared, jnp.asarray(suffix[0]), jnp.asarray(suffix[1]),
                                        jnp.int32(stop_suffix), None, None))


@pytest.mark.parametrize("samples,suffix_stop", [(1, 1), (4, 1), (4, 70), (8, 128)])
def test_cascade_attention_is_attention_over_the_prompt_and_the_rows_own_tokens(samples, suffix_stop):
    # Prompts left-padded to 40 real slots of a 64-slot prefix: starts 0 (no padding), 10, 39 (one token).
    starts, prefix_stop = [0, 10, 39], 40
    q, prefix, suffix = cascade_inputs(starts, samples, 64, 128)
    out = cascade(q, prefix, suffix, starts, prefix_stop, suffix_stop)
    # The reference: each row's prompt K/V repeated and concatenated with its suffix, attended in float64.
    keys, values = (np.concatenate([np.repeat(p, samples, axis=0), s], axis=2) for p, s in zip(prefix, suffix))
    row_starts = np.repeat(starts, samples)
    live = np.zeros((len(q), keys.shape[2]), bool)
    for row, start in enumerate(row_starts):
        live[row, start:prefix_stop] = live[row, 64:64 + suffix_stop] = True
    expected = masked_reference(q, keys, values, live)
    assert out.shape == q.shape
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-5)
    # K/V outside the live slots (left padding, past the prompt, unwritten suffix slots) must not matter.
    prefix[0][1, :, :starts[1]], prefix[1][:, :, prefix_stop:], suffix[0][:, :, suffix_stop:] = 1e4, -1e4, 1e4
    np.testing.assert_allclose(cascade(q, prefix, suffix, starts, prefix_stop, suffix_stop), out, rtol=1e-6, atol=1e-6)


def masked_reference(q, keys, values, live) -> np.ndarray:
    """float64 softmax attention of q [B, 1, H, D] over the `live` [B, S] slots of [B, KVH, S, D]."""
    q, keys, values = (np.asarray(x, np.float64) for x in (q, keys, values))
    groups = q.shape[2] // keys.shape[1]
    k, v = np.repeat(keys, groups, axis=1), np.repeat(values, groups, axis=1)
    scores = np.einsum("bhd,bhsd->bhs", q[:, 0], k) / np.sqrt(q.shape[-1])
    scores = np.where(live[:, None], scores, -np.inf)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    return np.einsum("bhs,bhsd->bhd", probs / probs.sum(-1, keepdims=True), v)[:, None]


def test_the_sampler_shares_the_prefix_only_with_the_kernel_and_several_samples():
    on, off = SimpleNamespace(decode_kernel="pallas", shared_prefix="on"), SimpleNamespace(decode_kernel="pallas",
                                                                                           shared_prefix="off")
    xla = SimpleNamespace(decode_kernel="xla", shared_prefix="on")
    assert shares_prefix(on, 3, 2, 16, 6, 1)
    assert not shares_prefix(on, 3, 1, 16, 6, 1)  # n = 1: nothing to share, the plain kernel
    assert not shares_prefix(xla, 3, 2, 16, 6, 1)
    assert not shares_prefix(on, 3, 2, 16, 6, None)  # a mesh splits the prompts unlike their rows
    assert not shares_prefix(off, 16, 8, 2048, 256, 1)


def test_auto_shares_the_prefix_where_it_was_measured_faster():
    auto = SimpleNamespace(decode_kernel="pallas", shared_prefix="auto")
    assert not shares_prefix(auto, 16, 8, 256, 256, 1)  # the recipe: 256 + 256 was 4.7% slower shared
    assert shares_prefix(auto, 16, 8, 1024, 256, 1)  # 1.11x faster
    assert not shares_prefix(auto, 2, 8, 2048, 256, 1)  # 2 prompts: slower at every length
    assert not shares_prefix(auto, 32, 8, 1024, 256, 4)  # 8 prompts on each of 4 shards
    assert shares_prefix(auto, 64, 8, 1024, 256, 4)
    assert not shares_prefix(auto, 64, 8, 1024, 256, None)


def test_the_sharing_decision_says_why():
    """prefix_decision: shares_prefix's answer with the reason the run logs (rollout_plan.prompt_sharing)."""
    auto, on = (SimpleNamespace(decode_kernel="pallas", shared_prefix=setting) for setting in ("auto", "on"))
    assert prefix_decision(auto, 16, 8, 256, 256, 1) == (False, "prompt 256 < 4 x 256 new tokens")
    assert prefix_decision(auto, 32, 8, 1024, 256, 4) == (False, "8 prompts a batch shard < 16")
    assert prefix_decision(auto, 16, 8, 1024, 256, 1) == (
        True, "prompt 1024 >= 4 x 256 new tokens, 16 prompts a batch shard >= 16")
    assert prefix_decision(on, 16, 8, 256, 256, 1) == (True, "backend.adapter.shared_prefix=on")
    unlike = (False, "the rollout mesh splits the prompts unlike their rows")
    assert prefix_decision(on, 16, 8, 256, 256, None) == unlike
    assert prefix_decision(on, 16, 1, 256, 256, 1) == (False, "one sample per prompt")
    xla = SimpleNamespace(decode_kernel="xla", shared_prefix="on")
    assert prefix_decision(xla, 16, 8, 256, 256, 1) == (False,
                                                         "decode kernel xla: only the pallas kernel shares a prefix")


def test_the_run_logs_and_records_whether_its_sampler_shares_the_prompt(caplog):
    import logging

    from framework.backends.maxtext.trainers.rollout_plan import prompt_sharing
    from tests.maxtext.test_rollout_layouts import grpo_task

    auto = SimpleNamespace(decode_kernel="pallas", shared_prefix="auto")
    long = grpo_task("grpo.max_prompt_tokens=1024", "grpo.max_new_tokens=256")  # 16 prompts x 8
    with caplog.at_level(logging.INFO):
        assert prompt_sharing(auto, long, None, None) == {
            "shared_prefix": True, "shared_prefix_reason": "prompt 1024 >= 4 x 256 new tokens, 16 prompts a batch "
                                                           "shard >= 16"}
        short = grpo_task("grpo.max_prompt_tokens=256", "grpo.max_new_tokens=256")
        assert not prompt_sharing(auto, short, None, None)["shared_prefix"]
    assert "shared prefix: off (prompt 256 < 4 x 256 new tokens)" in caplog.messages


def test_the_prompts_shards_are_those_of_the_rows_or_none():
    def mesh(**shape):
        return SimpleNamespace(shape={"data": 1, "fsdp": 1, "expert": 1, "tensor": 1, **shape},
                               size=int(np.prod(list(shape.values()))))

    assert prompt_shards(16, 8, None, None) == 1
    assert prompt_shards(16, 8, mesh(data=4), None) == 4
    assert prompt_shards(16, 8, mesh(data=2, tensor=2), None) == 2  # tensor splits heads, not prompts
    assert prompt_shards(2, 8, mesh(data=4), None) is None  # 2 prompts on dp=4: replicated, their 16 rows split


def test_the_kv_cache_counts_the_prompt_once_where_the_sampler_shares_it():
    auto = SimpleNamespace(decode_kernel="pallas", shared_prefix="auto")
    # 16 prompts x 8 samples of 1024 + 256 tokens: prompts once (1024 slots) + rows' suffix (256) vs rows x 1280
    assert kv_cache_tokens(auto, 16, 8, 1024, 256, 1) == 16 * 1024 + 128 * 256
    assert kv_cache_tokens(auto, 16, 8, 1024, 256, 2) == 128 * 1280  # 8 prompts a shard: auto repeats them
    assert kv_cache_tokens(auto, 16, 8, 256, 256, 1) == 128 * 512  # the recipe's shapes: repeated
    on = SimpleNamespace(decode_kernel="pallas", shared_prefix="on")
    assert kv_cache_tokens(on, 16, 8, 256, 256, 1) == 16 * 256 + 128 * 256
    assert kv_cache_tokens(on, 16, 1, 256, 256, 1) == 16 * 512
    assert kv_cache_tokens(SimpleNamespace(decode_kernel="xla", shared_prefix="on"), 16, 8, 250, 200, 1) == 128 * 450



def test_the_prompts_shards_of_a_layout_not_yet_built_are_its_meshs():
    """The layout search asks prompt_shards of a candidate's abstract mesh (no devices): the cache's batch axes as the
    run's rules map them (data and fsdp by default; the mesh's fsdp is fsdp / ep)."""
    from framework.backends.maxtext.sharding import DEFAULT_RULES, abstract_mesh, logical_axis_rules

    mesh = abstract_mesh({"data": 1, "fsdp": 2, "expert": 2, "tensor": 2})
    assert prompt_shards(16, 8, mesh, DEFAULT_RULES) == 2
    assert prompt_shards(16, 8, abstract_mesh({"data": 2, "fsdp": 2, "expert": 1, "tensor": 1}), DEFAULT_RULES) == 4
    assert prompt_shards(16, 8, abstract_mesh({"data": 2, "fsdp": 2, "expert": 1, "tensor": 1}),
                         logical_axis_rules({"cache_batch": "data"})) == 2

def sampled(tiny: dict, prompts, samples: int, shared: str, eos=(2,), mesh=None, rules=None, temperature=0.0):
    """(completion ids, behaviour log-probs, how many times the traced program called cascade_attention)."""
    from framework.backends.maxtext.models import Transformer
    from framework.backends.maxtext.sampler import Sampler, SamplingParams

    calls = []
    traced = transformer.cascade_attention

    def counted(*args):
        calls.append(1)
        return traced(*args)

    transformer.cascade_attention = counted
    try:
        jax.clear_caches()  # trace anew, so that the count is this program's
        model = Transformer(tiny["config"].replace(decode_kernel="pallas", shared_prefix=shared), mesh, rules)
        sampler = Sampler(model, eos_token_ids=list(eos), pad_token_id=0, prompt_bucket=8, behaviour_log_probs=True)
        out = sampler.generate(tiny["params"], prompts, jax.random.key(0),
                               SamplingParams(max_new_tokens=6, temperature=temperature, num_samples=samples))
    finally:
        transformer.cascade_attention = traced
    return np.asarray(out.completion_ids), np.asarray(out.completion_log_probs), len(calls)


def traced_cascade_calls(config, prompts: int, samples: int, prompt_length: int, max_new_tokens: int) -> int:
    """How many times the sampler's program, traced (not run) for these shapes, calls cascade_attention."""
    from flax import linen as nn

    from framework.backends.maxtext.models import Transformer, abstract_params
    from framework.backends.maxtext.sampler import Sampler, SamplingParams

    calls, traced = [], transformer.cascade_attention
    transformer.cascade_attention = lambda *args: calls.append(1) or traced(*args)
    try:
        model = Transformer(config)
        sampler = Sampler(model, eos_token_ids=[2], pad_token_id=0, prompt_bucket=prompt_length)
        sampler.lower(nn.unbox(abstract_params(model)), [[5] * prompt_length] * prompts, jax.random.key(0),
                      SamplingParams(max_new_tokens=max_new_tokens, num_samples=samples))
    finally:
        transformer.cascade_attention = traced
    return len(calls)


@pytest.mark.parametrize("setting,prompts,prompt_length,max_new_tokens,shared", [
    ("auto", 16, 8, 2, True), ("auto", 16, 8, 3, False), ("auto", 4, 8, 2, False), ("off", 16, 8, 2, False),
    ("on", 4, 8, 3, True)])
def test_the_sampler_and_the_preflights_kv_count_make_the_same_choice(setting, prompts, prompt_length,
                                                                      max_new_tokens, shared):
    from framework.backends.maxtext.models import ModelConfig
    from tests.maxtext.tiny_checkpoints import model_cfg

    config = ModelConfig.from_hf_config(model_cfg("tiny_qwen2")["hf_config"]).replace(decode_kernel="pallas",
                                                                                    shared_prefix=setting)
    calls = traced_cascade_calls(config, prompts, 2, prompt_length, max_new_tokens)
    assert calls == (config.num_layers if shared else 0)
    # the kernel's 64-slot blocks: shared, a prompt's 64 and its 2 rows' 64 each; repeated, 2 rows' 64
    counted = {True: prompts * 64 + prompts * 2 * 64, False: prompts * 2 * 64}[shared]
    assert kv_cache_tokens(config, prompts, 2, prompt_length, max_new_tokens, 1) == counted


@pytest.mark.slow
def test_a_shared_prefix_decodes_the_tokens_of_the_repeated_cache(tmp_path_factory):
    from tests.maxtext.test_sampler import prompts_of_lengths
    from tests.maxtext.tiny_checkpoints import load_tiny

    tiny = load_tiny("tiny_qwen2", tmp_path_factory.getbasetemp())
    prompts = prompts_of_lengths(3, 11, 1, 7)  # padded to 16: prompts start at different slots
    repeated, repeated_log_probs, none = sampled(tiny, prompts, 3, shared="off")
    tokens, log_probs, calls = sampled(tiny, prompts, 3, shared="on")
    assert none == 0 and calls == tiny["config"].num_layers
    np.testing.assert_array_equal(tokens, repeated)
    np.testing.assert_allclose(log_probs, repeated_log_probs, atol=1e-5)
    # An EOS that one prompt's rows emit mid-way (the others go on), and sampling at temperature 1.
    eos = int(tokens[0, 3])
    stopped, _, _ = sampled(tiny, prompts, 3, shared="on", eos=(eos,))
    assert (stopped[:3, 4:] == 0).all() and (stopped[3:, -1] != 0).all()  # the first prompt's rows stopped
    np.testing.assert_array_equal(stopped, sampled(tiny, prompts, 3, shared="off", eos=(eos,))[0])
    np.testing.assert_array_equal(sampled(tiny, prompts, 4, shared="on", temperature=1.0)[0],
                                  sampled(tiny, prompts, 4, shared="off", temperature=1.0)[0])
    assert sampled(tiny, prompts, 1, shared="on")[2] == 0  # n = 1: the plain kernel
    assert sampled(tiny, prompts, 3, shared="auto")[2] == 0  # 4 prompts of 16 + 6 tokens: auto repeats


@pytest.mark.slow
def test_under_a_mesh_a_prompts_rows_share_its_prefix_on_its_shard(tmp_path_factory):
    from tests.maxtext.forced_devices import facts_on_cpu_devices

    facts = facts_on_cpu_devices(__file__, 4, str(tmp_path_factory.getbasetemp()), timeout=900)
    assert facts["equal"] == {"dp4": True, "dp2_tp2": True, "dp2_tp2_sequence_rule": True, "dp4_2_prompts": True}
    layers = facts["layers"]
    # 4 prompts split over 4 (or 2) shards as their 8 rows do: shared; 2 prompts cannot split over dp=4 as
    # their 4 rows do: repeated.
    assert facts["cascade_calls"] == {"dp4": layers, "dp2_tp2": layers, "dp2_tp2_sequence_rule": layers,
                                      "dp4_2_prompts": 0}


def _on_forced_devices(base: str) -> dict:
    """Greedy tokens with a shared prefix under dp=4 and dp=2 x tp=2 against the repeated cache on one device."""
    from pathlib import Path

    from framework.backends.maxtext.sharding import build_mesh, logical_axis_rules
    from framework.core.parallel import ParallelConfig
    from tests.maxtext.test_sampler import prompts_of_lengths
    from tests.maxtext.tiny_checkpoints import load_tiny

    tiny = load_tiny("tiny_qwen2", Path(base))
    four, two = prompts_of_lengths(3, 11, 1, 7), prompts_of_lengths(5, 9)
    dp4 = ParallelConfig(dp=4, fsdp=1, tp=1, pp=1, ep=1, cp=1)
    dp2_tp2 = ParallelConfig(dp=2, fsdp=1, tp=2, pp=1, ep=1, cp=1)
    runs = {"dp4": (dp4, None, four), "dp2_tp2": (dp2_tp2, None, four),
            "dp2_tp2_sequence_rule": (dp2_tp2, logical_axis_rules({"cache_sequence": "tensor"}), four),
            "dp4_2_prompts": (dp4, None, two)}
    equal, calls = {}, {}
    for name, (layout, rules, prompts) in runs.items():
        expected = sampled(tiny, prompts, 2, shared="off")[0]
        tokens, _, calls[name] = sampled(tiny, prompts, 2, shared="on", mesh=build_mesh(layout), rules=rules)
        equal[name] = bool(np.array_equal(tokens, expected))
    return {"equal": equal, "cascade_calls": calls, "layers": tiny["config"].num_layers}


if __name__ == "__main__":
    print(json.dumps(_on_forced_devices(sys.argv[1])))
