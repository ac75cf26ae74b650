"""Flax models of the maxtext backend against transformers, and the HF checkpoint loader/saver."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch

from framework.backends.maxtext.checkpoint_io import (hf_tensor_name, hf_to_flax, load_hf_params, per_layer,
                                                      save_hf_checkpoint)
from framework.backends.maxtext.models import KVCache, ModelConfig, Transformer, abstract_params, forward
from framework.backends.maxtext.models.rope import positions_from_mask, rope_inverse_frequencies
from framework.backends.maxtext.trainers.update import completion_log_probs
from framework.core.errors import CheckpointError, ConfigError, DataError
from tests.maxtext.tiny_checkpoints import load_tiny, model_cfg

TINY_NAMES = ["tiny_qwen2", "tiny_qwen3", "tiny_llama"]


@pytest.fixture(scope="module", params=TINY_NAMES)
def tiny(request, tmp_path_factory) -> dict:
    return load_tiny(request.param, tmp_path_factory.getbasetemp())


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory) -> dict:
    """The architecture with the most parts (qk-norm, explicit head_dim, tied embeddings) for the
    checks that do not depend on the architecture."""
    return load_tiny("tiny_qwen3", tmp_path_factory.getbasetemp())


def padded_batch(seed: int = 0, vocab: int = 512):
    ids = np.random.default_rng(seed).integers(3, vocab, size=(4, 10))
    mask = np.ones_like(ids)
    mask[1, :3] = 0  # left padding
    mask[2, 6:] = 0  # right padding
    mask[3, :2], mask[3, 7:] = 0, 0  # both: a GRPO row (left-padded prompt, padding after EOS)
    return ids, mask


def hf_logits(hf, ids, mask) -> np.ndarray:
    with torch.no_grad():
        return hf(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask)).logits.numpy()


def test_logits_match_transformers(tiny):
    ids, mask = padded_batch()
    model = Transformer(tiny["config"])
    logits, cache = jax.jit(lambda p: forward(model, p, ids, mask))(tiny["params"])
    assert cache is None and logits.dtype == jnp.float32
    real = mask.astype(bool)
    np.testing.assert_array_less(np.abs(np.asarray(logits) - hf_logits(tiny["hf"], ids, mask))[real], 1e-4)


def test_cached_decoding_matches_full_forward(qwen3):
    """Prefill a left-padded prefix, then feed the rest one token at a time through the KV cache.
    (The sampler's parity tests run the cached path of every architecture.)"""
    config, params = qwen3["config"], qwen3["params"]
    model = Transformer(config)
    ids, _ = padded_batch(seed=1)
    mask = np.ones_like(ids)
    mask[0, :4] = 0
    positions = positions_from_mask(mask)
    cached_forward = jax.jit(lambda p, i, m, pos, c: forward(model, p, i, m, pos, c))
    full, _ = jax.jit(lambda p: forward(model, p, ids, mask))(params)

    prefix = 6
    cache = KVCache.create(config, ids.shape[0], ids.shape[1])
    step_logits, cache = cached_forward(params, ids[:, :prefix], mask[:, :prefix], positions[:, :prefix], cache)
    collected = [step_logits]
    for t in range(prefix, ids.shape[1]):
        step_logits, cache = cached_forward(params, ids[:, t:t + 1], mask[:, t:t + 1], positions[:, t:t + 1], cache)
        collected.append(step_logits)
    assert int(cache.index) == ids.shape[1]
    cached = np.concatenate([np.asarray(x) for x in collected], axis=1)
    real = mask.astype(bool)
    np.testing.assert_allclose(cached[real], np.asarray(full)[real], atol=1e-5)


def test_chunked_log_probs_match_transformers(tiny):
    model = Transformer(tiny["config"])
    ids, mask = padded_batch(seed=2)
    temperature = 0.7
    # chunk_size 4 does not divide the 9 target positions: exercises the padded last chunk.
    log_probs = jax.jit(lambda p: completion_log_probs(model, p, ids, mask, ids.shape[1] - 1, temperature=temperature,
                                                       chunk_size=4)[0])(tiny["params"])
    ref_logits = torch.tensor(hf_logits(tiny["hf"], ids, mask)[:, :-1]) / temperature
    reference = torch.log_softmax(ref_logits, -1).gather(-1, torch.tensor(ids[:, 1:, None]))[..., 0].numpy()
    real = (mask[:, :-1] * mask[:, 1:]).astype(bool)
    assert log_probs.shape == (4, 9)
    np.testing.assert_allclose(np.asarray(log_probs)[real], reference[real], atol=1e-4)


def test_chunked_log_prob_gradients_match_torch(qwen3):
    """Gradients through the chunked, rematerialised vocabulary projection equal torch autograd's
    (tied embeddings get both contributions)."""
    tiny = qwen3
    model = Transformer(tiny["config"])
    ids, mask = padded_batch(seed=5)
    real = mask[:, :-1] * mask[:, 1:]

    def total(params):
        log_probs, _ = completion_log_probs(model, params, ids, mask, ids.shape[1] - 1, temperature=1.0, chunk_size=4)
        return jnp.sum(log_probs * real)

    grads = jax.jit(jax.grad(total))(tiny["params"])
    hf = tiny["hf"]
    hf.zero_grad()
    logits = hf(input_ids=torch.tensor(ids), attention_mask=torch.tensor(mask)).logits[:, :-1]
    picked = torch.log_softmax(logits, -1).gather(-1, torch.tensor(ids[:, 1:, None]))[..., 0]
    (picked * torch.tensor(real)).sum().backward()
    torch_grads = {name: p.grad.numpy() for name, p in hf.named_parameters()}

    boxed = abstract_params(model)
    for path, leaf in jax.tree_util.tree_flatten_with_path(grads)[0]:
        names = tuple(k.key for k in path)
        box = boxed
        for name in names:
            box = box[name]
        layers, shape, _ = per_layer(names, box)
        for layer, ours in [(None, leaf)] if layers is None else enumerate(leaf):
            expected = hf_to_flax(torch_grads[hf_tensor_name(names, layer)], names, shape)
            np.testing.assert_allclose(np.asarray(ours), expected, rtol=1e-3, atol=1e-5,
                                       err_msg=f"{'/'.join(names)} layer {layer}")


def test_saved_checkpoint_loads_in_transformers_with_same_logits(tiny, tmp_path):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out = save_hf_checkpoint(tiny["params"], tiny["config"], tiny["dir"], tmp_path / "saved")
    reloaded = AutoModelForCausalLM.from_pretrained(out).eval()
    assert type(reloaded) is type(tiny["hf"])
    ids, mask = padded_batch(seed=3)
    real = mask.astype(bool)
    np.testing.assert_allclose(hf_logits(reloaded, ids, mask)[real], hf_logits(tiny["hf"], ids, mask)[real],
                               atol=1e-6)
    assert AutoTokenizer.from_pretrained(out).eos_token == "<|im_end|>"
    assert (out / "generation_config.json").is_file()


def test_bfloat16_matches_float32_closely(qwen3):
    fp32_config, fp32_params = qwen3["config"], qwen3["params"]
    bf16_config = ModelConfig.from_pretrained(qwen3["dir"], param_dtype="bfloat16")
    bf16_params = load_hf_params(qwen3["dir"], bf16_config)
    assert all(leaf.dtype == jnp.bfloat16 for leaf in jax.tree.leaves(bf16_params))
    ids, mask = padded_batch(seed=4)
    reference, _ = jax.jit(lambda p: forward(Transformer(fp32_config), p, ids, mask))(fp32_params)
    approx, _ = jax.jit(lambda p: forward(Transformer(bf16_config), p, ids, mask))(bf16_params)
    assert approx.dtype == jnp.float32
    real = mask.astype(bool)
    error = np.abs(np.asarray(approx) - np.asarray(reference))[real]
    scale = np.abs(np.asarray(reference))[real].mean()
    assert error.mean() < 0.05 * scale


def test_llama3_rope_scaling_matches_transformers():
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    hf_config = model_cfg("llama3_1_8b")["hf_config"]
    config = ModelConfig.from_hf_config(hf_config)
    assert config.rope_type == "llama3" and config.head_dim == 128
    reference, _ = ROPE_INIT_FUNCTIONS["llama3"](LlamaConfig(**hf_config))
    np.testing.assert_allclose(rope_inverse_frequencies(config), reference.numpy(), rtol=1e-6)
    assert not np.allclose(rope_inverse_frequencies(config.replace(rope_type="default")), reference.numpy())


@pytest.mark.parametrize("name, flags", [
    ("qwen2_5_0_5b_instruct", dict(qkv_bias=True, o_bias=False, qk_norm=False, tie_word_embeddings=True, head_dim=64)),
    ("qwen2_5_1_5b_instruct", dict(qkv_bias=True, o_bias=False, qk_norm=False, tie_word_embeddings=True, head_dim=128)),
    ("qwen3_8b", dict(qkv_bias=False, qk_norm=True, tie_word_embeddings=False, head_dim=128)),
    ("llama3_1_8b", dict(qkv_bias=False, mlp_bias=False, qk_norm=False, num_kv_heads=8)),
])
def test_real_model_configs_parse(name, flags):
    config = ModelConfig.from_hf_config(model_cfg(name)["hf_config"], param_dtype="bfloat16")
    assert {key: getattr(config, key) for key in flags} == flags
    assert config.param_dtype == config.dtype == "bfloat16"


def test_unsupported_configs_are_config_errors():
    with pytest.raises(ConfigError, match="model_type"):
        ModelConfig.from_hf_config(model_cfg("deepseek_v3")["hf_config"])
    yarn = {**model_cfg("tiny_llama")["hf_config"], "rope_scaling": {"rope_type": "yarn", "factor": 4.0}}
    with pytest.raises(ConfigError, match="rope_scaling.*yarn"):
        ModelConfig.from_hf_config(yarn)
    with pytest.raises(ConfigError, match="model.dtype"):
        ModelConfig.from_hf_config(model_cfg("tiny_llama")["hf_config"], param_dtype="float8")


def test_loader_errors_name_the_problem(qwen3, tmp_path):
    qwen3_dir, config = qwen3["dir"], qwen3["config"]
    with pytest.raises(DataError, match="does not exist"):
        load_hf_params(tmp_path / "nowhere", config)
    with pytest.raises(CheckpointError, match="lm_head.weight is missing"):
        load_hf_params(qwen3_dir, config.replace(tie_word_embeddings=False))
    with pytest.raises(CheckpointError, match=r"mlp.down_proj.weight has shape \(64, 128\)"):
        load_hf_params(qwen3_dir, config.replace(intermediate_size=96))
    with pytest.raises(CheckpointError, match="no model.safetensors"):
        load_hf_params(tmp_path, config)


def test_hub_ids_resolve_through_snapshot_download(qwen3, tmp_path, monkeypatch):
    """The real hub path, offline: a snapshot in the HF cache layout is found; a missing one is a DataError."""
    import shutil

    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    revision = "0" * 40
    repo = tmp_path / "models--crucible--tiny-qwen3"
    shutil.copytree(qwen3["dir"], repo / "snapshots" / revision)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text(revision)

    params = load_hf_params("crucible/tiny-qwen3", qwen3["config"])
    np.testing.assert_array_equal(np.asarray(params["norm"]["scale"]), np.asarray(qwen3["params"]["norm"]["scale"]))
    with pytest.raises(DataError, match="'crucible/absent': not a local directory and snapshot_download failed"):
        load_hf_params("crucible/absent", qwen3["config"])
