"""The fused decode-attention kernel (Pallas, interpreted on CPU: attention over the live cache slots plus the
new token, whose K/V it writes into the cache) against float64 attention, alone, in the sampler, and per shard
under a mesh."""

import json
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from framework.backends.maxtext.models import transformer
from framework.backends.maxtext.models.decode_attention import (CACHE_BLOCK, MAX_PARTS, cache_slots, decode_attention,
                                                                first_live_slot, sequence_splits)

HEADS, KV_HEADS, HEAD_DIM = 8, 2, 16


def reference(q, keys, values, start, stop) -> np.ndarray:
    """float64 softmax attention of q [B, 1, H, D] over slots [start, stop) of [B, KVH, S, D]."""
    q, keys, values = (np.asarray(x, np.float64) for x in (q, keys, values))
    groups = q.shape[2] // keys.shape[1]
    k, v = np.repeat(keys, groups, axis=1), np.repeat(values, groups, axis=1)  # [B, H, S, D]
    scores = np.einsum("bhd,bhsd->bhs", q[:, 0], k) / np.sqrt(q.shape[-1])
    slots = np.arange(keys.shape[2])
    live = (slots >= np.asarray(start)[:, None]) & (slots < np.broadcast_to(stop, np.shape(start))[:, None])
    scores = np.where(live[:, None], scores, -np.inf)
    probs = np.exp(scores - scores.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    return np.einsum("bhs,bhsd->bhd", probs, v)[:, None]


def random_inputs(slots: int, batch: int, seed: int = 0):
    """q [B, 1, H, D], the new token's k, v [B, 1, KVH, D], the cache's keys, values [B, KVH, S, D]."""
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(batch, 1, HEADS, HEAD_DIM)).astype(np.float32)
    k, v = (rng.normal(size=(batch, 1, KV_HEADS, HEAD_DIM)).astype(np.float32) for _ in range(2))
    keys, values = (rng.normal(size=(batch, KV_HEADS, slots, HEAD_DIM)).astype(np.float32) for _ in range(2))
    return q, k, v, keys, values


def attend(q, k, v, keys, values, start, index, parts=None):
    out, keys, values = decode_attention(*map(jnp.asarray, (q, k, v, keys, values, start)), jnp.int32(index),
                                         None, None, parts)
    return np.asarray(out), np.asarray(keys), np.asarray(values)


def test_the_kernels_cache_is_whole_blocks_and_the_first_live_slot_comes_from_the_mask():
    assert [cache_slots(n, 0, "pallas") for n in (1, CACHE_BLOCK, CACHE_BLOCK + 1, 512)] == [64, 64, 128, 512]
    assert cache_slots(300, 100, "xla") == 400 and cache_slots(300, 100, "pallas") == 448
    live = np.zeros((3, 1, 8), bool)
    live[0, 0, 2:6], live[1, 0, :], live[2, 0, 7] = True, True, True
    assert first_live_slot(jnp.asarray(live)).tolist() == [2, 0, 7]


@pytest.mark.parametrize("slots, index", [(CACHE_BLOCK, 40), (4 * CACHE_BLOCK, 3 * CACHE_BLOCK + 9),
                                          (4 * CACHE_BLOCK, 2 * CACHE_BLOCK)])
def test_the_kernel_attends_to_the_live_slots_and_the_new_token_and_writes_it(slots, index):
    # Rows: from slot 0, a short prompt after long padding, the new token alone, a start inside a later block.
    start = np.array([0, index - 9, index, min(CACHE_BLOCK + 3, index)], np.int32)
    q, k, v, keys, values = random_inputs(slots, len(start))
    out, new_keys, new_values = attend(q, k, v, keys, values, start, index)
    written_keys, written_values = keys.copy(), values.copy()
    written_keys[:, :, index], written_values[:, :, index] = k[:, 0], v[:, 0]
    np.testing.assert_array_equal(new_keys, written_keys)  # the new entries at `index`, every other slot kept
    np.testing.assert_array_equal(new_values, written_values)
    assert out.shape == q.shape and out.dtype == np.float32
    np.testing.assert_allclose(out, reference(q, written_keys, written_values, start, index + 1), rtol=1e-5, atol=1e-5)
    # What the cache holds outside [start, index) must not matter (garbage there, same output).
    dead = np.ones(slots, bool)
    dead[start[1]:index] = False
    keys[1][:, dead], values[1][:, dead] = 1e4, -1e4
    again, _, _ = attend(q, k, v, keys, values, start, index)
    np.testing.assert_allclose(again[1], out[1], rtol=1e-6, atol=1e-6)


def test_few_rows_split_their_slots_into_parts_and_many_rows_do_not():
    assert sequence_splits(256, 4096) == 1 and sequence_splits(1024, 4096) == 1  # the rollout's 128 rows x 2 KV heads
    assert sequence_splits(32, 4096) == MAX_PARTS and sequence_splits(64, 4096) == 4 and sequence_splits(128, 4096) == 2
    assert sequence_splits(4, 2 * CACHE_BLOCK) == 2  # never more parts than blocks


@pytest.mark.parametrize("parts", [2, 3, MAX_PARTS])
def test_parts_of_a_rows_slots_combine_to_the_same_attention_and_part_0_writes_the_new_entry(parts):
    # 5 blocks: parts of one block, of none (a row whose live slots fit in fewer blocks than parts), uneven shares.
    slots, index = 5 * CACHE_BLOCK, 4 * CACHE_BLOCK + 20
    start = np.array([0, index - 3, index, 2 * CACHE_BLOCK + 1], np.int32)
    q, k, v, keys, values = random_inputs(slots, len(start), seed=1)
    out, new_keys, new_values = attend(q, k, v, keys, values, start, index, parts)
    written_keys, written_values = keys.copy(), values.copy()
    written_keys[:, :, index], written_values[:, :, index] = k[:, 0], v[:, 0]
    np.testing.assert_array_equal(new_keys, written_keys)
    np.testing.assert_array_equal(new_values, written_values)
    np.testing.assert_allclose(out, reference(q, written_keys, written_values, start, index + 1), rtol=1e-5, atol=1e-5)
    whole, _, _ = attend(q, k, v, keys, values, start, index, 1)
    np.testing.assert_allclose(out, whole, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("parts", [1, 2])
def test_the_kernel_lowers_to_triton_for_a_gpu(parts):
    # CPU tests interpret the kernel; Triton's lowering rules (which reject, e.g., a select between a scalar and a
    # tensor) run only for a GPU: exported for CUDA here, as far as a machine without one gets.
    from jax import export

    from framework.backends.maxtext.models.decode_attention import _attend_and_append

    batch, slots = 8, 4 * CACHE_BLOCK
    shapes = [(batch, 1, 14, 64), (batch, 1, 2, 64), (batch, 1, 2, 64), (batch, 2, slots, 64), (batch, 2, slots, 64)]
    args = [jax.ShapeDtypeStruct(shape, jnp.bfloat16) for shape in shapes]
    args += [jax.ShapeDtypeStruct((batch,), jnp.int32), jax.ShapeDtypeStruct((), jnp.int32)]
    kernel = jax.jit(lambda *a: _attend_and_append(*a, parts=parts, interpret=False))
    triton = "__gpu$xla.gpu.triton"  # no serialisation guarantee; lowering is what is checked
    exported = export.export(kernel, platforms=["cuda"],
                             disabled_checks=[export.DisabledSafetyCheck.custom_call(triton)])(*args)
    assert exported.mlir_module().count(triton) == 1


def test_a_cache_of_partial_blocks_is_refused_by_the_kernel_and_decoded_by_xla_in_the_model(tmp_path_factory):
    """The kernel reads whole CACHE_BLOCKs (a partial last one would read past the buffer): it refuses such a cache,
    and the Transformer decodes one (not the sampler's) through XLA's masked path, token for token the same."""
    from framework.backends.maxtext.models import KVCache, Transformer, forward, positions_from_mask
    from tests.maxtext.tiny_checkpoints import load_tiny

    q, k, v, keys, values = random_inputs(CACHE_BLOCK + 36, 2)
    with pytest.raises(ValueError, match=f"100 slots; the kernel needs a multiple of {CACHE_BLOCK}"):
        attend(q, k, v, keys, values, np.zeros(2, np.int32), 50)
    tiny = load_tiny("tiny_qwen2", tmp_path_factory.getbasetemp())
    config, params = tiny["config"], tiny["params"]
    ids = np.random.default_rng(1).integers(3, config.vocab_size, size=(2, 12)).astype(np.int32)
    mask = np.ones_like(ids)
    mask[0, :3] = 0
    positions = positions_from_mask(jnp.asarray(mask))

    def logits(kernel: str) -> np.ndarray:
        model = Transformer(config.replace(decode_kernel=kernel))
        step = jax.jit(lambda cache, lo, hi: forward(model, params, ids[:, lo:hi], mask[:, lo:hi], positions[:, lo:hi],
                                                     cache), static_argnums=(1, 2))
        out, cache = step(KVCache.create(config, 2, CACHE_BLOCK + 36), 0, 6)
        outs = [out]
        for t in range(6, ids.shape[1]):  # one token at a time, as a decode step
            out, cache = step(cache, t, t + 1)
            outs.append(out)
        return np.concatenate([np.asarray(o) for o in outs], axis=1)

    np.testing.assert_allclose(logits("pallas"), logits("xla"), rtol=1e-5, atol=1e-5)


def test_the_model_imports_pallas_only_when_the_kernel_is_traced():
    """Pallas and its Triton backend cost about 80 ms of import: a run whose decode never calls the kernel (CPU,
    XLA's path) does not pay them at start-up."""
    import subprocess

    code = ("import sys; import framework.backends.maxtext.models.transformer; "
            "print('jax.experimental.pallas' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip() == "False"


def greedy_tokens(tiny: dict, kernel: str, prompts, mesh=None, rules=None) -> tuple[np.ndarray, int]:
    """The greedy completions, and how many times the traced program called the fused kernel."""
    from framework.backends.maxtext.models import Transformer
    from framework.backends.maxtext.sampler import Sampler, SamplingParams

    calls = []
    traced = transformer.decode_attention

    def counted(*args):
        calls.append(1)
        return traced(*args)

    transformer.decode_attention = counted
    try:
        jax.clear_caches()  # trace anew, so that the count is this program's
        model = Transformer(tiny["config"].replace(decode_kernel=kernel), mesh, rules)
        sampler = Sampler(model, eos_token_ids=[2], pad_token_id=0, prompt_bucket=8)
        out = sampler.generate(tiny["params"], prompts, jax.random.key(0),
                               SamplingParams(max_new_tokens=6, temperature=0.0))
    finally:
        transformer.decode_attention = traced
    return np.asarray(out.completion_ids), len(calls)


def test_the_sampler_decodes_the_same_tokens_with_the_kernel(tmp_path_factory):
    from tests.maxtext.test_sampler import prompts_of_lengths
    from tests.maxtext.tiny_checkpoints import load_tiny

    tiny = load_tiny("tiny_qwen2", tmp_path_factory.getbasetemp())
    prompts = prompts_of_lengths(3, 11, 1, 7)  # padded to 16: rows start at different slots
    fused, calls = greedy_tokens(tiny, "pallas", prompts)
    plain, no_calls = greedy_tokens(tiny, "xla", prompts)
    assert calls == tiny["config"].num_layers and no_calls == 0  # once per layer in the decode step's trace
    np.testing.assert_array_equal(fused, plain)


@pytest.mark.slow
def test_under_a_mesh_the_kernel_runs_per_shard_with_the_same_tokens(tmp_path_factory):
    from tests.maxtext.forced_devices import facts_on_cpu_devices

    facts = facts_on_cpu_devices(__file__, 4, str(tmp_path_factory.getbasetemp()), timeout=600)
    assert facts["shard_map_in_program"]
    assert facts["equal"] == {"dp4": True, "dp2_tp2": True, "dp2_tp2_sequence_rule": True, "tp4": True}
    assert set(facts["kernel_calls"].values()) == {2}  # tiny_qwen2's two layers each call it


def _on_forced_devices(base: str) -> dict:
    """Greedy tokens of the kernel under dp=4, dp=2 x tp=2 and tp=4 (KV heads whole) meshes against XLA alone."""
    from pathlib import Path

    from framework.backends.maxtext.sharding import build_mesh, logical_axis_rules
    from framework.core.parallel import ParallelConfig
    from tests.maxtext.test_sampler import prompts_of_lengths
    from tests.maxtext.tiny_checkpoints import load_tiny

    tiny = load_tiny("tiny_qwen2", Path(base))
    prompts = prompts_of_lengths(3, 11, 1, 7)
    expected, _ = greedy_tokens(tiny, "xla", prompts)
    dp2_tp2 = ParallelConfig(dp=2, fsdp=1, tp=2, pp=1, ep=1, cp=1)
    runs = {"dp4": (ParallelConfig(dp=4, fsdp=1, tp=1, pp=1, ep=1, cp=1), None), "dp2_tp2": (dp2_tp2, None),
            # a user rule sharding the cache's slots: the kernel still sees whole rows
            "dp2_tp2_sequence_rule": (dp2_tp2, logical_axis_rules({"cache_sequence": "tensor"})),
            # tp=4 splits tiny_qwen2's 4 query heads but not its 2 KV heads: the kernel keeps both whole per shard
            "tp4": (ParallelConfig(dp=1, fsdp=1, tp=4, pp=1, ep=1, cp=1), None)}
    equal, kernel_calls = {}, {}
    for name, (layout, rules) in runs.items():
        tokens, kernel_calls[name] = greedy_tokens(tiny, "pallas", prompts, build_mesh(layout), rules)
        equal[name] = bool(np.array_equal(tokens, expected))
    q, new = jnp.zeros((4, 1, HEADS, HEAD_DIM)), jnp.zeros((4, 1, KV_HEADS, HEAD_DIM))
    cache = jnp.zeros((4, KV_HEADS, CACHE_BLOCK, HEAD_DIM))
    mesh = build_mesh(dp2_tp2)
    jaxpr = jax.make_jaxpr(lambda *a: decode_attention(*a, mesh, None))(q, new, new, cache, cache,
                                                                        jnp.zeros(4, jnp.int32), jnp.int32(1))
    return {"equal": equal, "kernel_calls": kernel_calls, "shard_map_in_program": "shard_map" in str(jaxpr)}


if __name__ == "__main__":
    print(json.dumps(_on_forced_devices(sys.argv[1])))
