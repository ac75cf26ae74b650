"""The decoder's layers as one scanned body (issue 15): the program does not grow with the layer
count, remat policies change memory and not the maths, and the execution options are checked."""

import re

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from framework.backends.maxtext.models import ModelConfig, Transformer
from framework.backends.maxtext.trainers.update import completion_log_probs
from framework.core.errors import ConfigError
from tests.maxtext.test_models import padded_batch
from tests.maxtext.tiny_checkpoints import load_tiny, model_cfg


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory) -> dict:
    return load_tiny("tiny_qwen3", tmp_path_factory.getbasetemp())


def _config(layers: int, **options) -> ModelConfig:
    hf = {**model_cfg("tiny_qwen3")["hf_config"], "num_hidden_layers": layers}
    return ModelConfig.from_hf_config(hf).replace(**options)


def _matmuls_in_forward(config: ModelConfig) -> int:
    model = Transformer(config)
    ids = jnp.ones((2, 8), jnp.int32)
    variables = jax.eval_shape(lambda: model.init(jax.random.key(0), ids, ids, jnp.ones((2, 8), bool)))
    jaxpr = jax.make_jaxpr(lambda v: model.apply(v, ids, ids, jnp.ones((2, 8), bool)))(variables)
    return str(jaxpr).count("dot_general")


def test_program_size_does_not_grow_with_the_layer_count():
    """Scan over layers: a 2-layer and a 12-layer model trace the same number of matmuls (one layer body)."""
    assert _matmuls_in_forward(_config(2)) == _matmuls_in_forward(_config(12))


def test_layer_parameters_are_stacked_on_a_leading_axis(qwen3):
    layers = qwen3["config"].num_layers
    stacked = jax.tree.leaves(qwen3["params"]["layers"])
    assert stacked and all(leaf.shape[0] == layers for leaf in stacked)


@pytest.mark.parametrize("policy", ["minimal", "full"])
def test_remat_policies_give_the_same_loss_and_gradients(qwen3, policy):
    ids, mask = padded_batch(seed=7)
    real = jnp.asarray(mask[:, :-1] * mask[:, 1:], jnp.float32)

    def loss_and_grads(config: ModelConfig):
        model = Transformer(config)

        def loss(params):
            log_probs, _ = completion_log_probs(model, params, ids, mask, ids.shape[1] - 1, 1.0, chunk_size=4)
            return jnp.sum(log_probs * real)

        return jax.jit(jax.value_and_grad(loss))(qwen3["params"])

    base_loss, base_grads = loss_and_grads(qwen3["config"])
    loss, grads = loss_and_grads(qwen3["config"].replace(remat=policy))
    assert _remat_regions(qwen3["config"].replace(remat=policy)) == _remat_regions(qwen3["config"]) + 1
    np.testing.assert_allclose(float(loss), float(base_loss), rtol=1e-6)
    for ours, theirs in zip(jax.tree.leaves(grads), jax.tree.leaves(base_grads)):
        np.testing.assert_allclose(np.asarray(ours), np.asarray(theirs), rtol=1e-4, atol=2e-5)  # float32 reordering


def _remat_regions(config: ModelConfig) -> int:
    """checkpoint (remat) regions in the traced forward (the chunked vocabulary projection has its own)."""
    model, (ids, mask) = Transformer(config), padded_batch(seed=7)
    variables = jax.eval_shape(lambda: model.init(jax.random.key(0), ids, ids, jnp.asarray(mask, bool)))
    return str(jax.make_jaxpr(lambda v: model.apply(v, ids, ids, mask))(variables)).count("remat2[")


def test_attention_auto_picks_cudnn_only_on_a_gpu_in_bfloat16():
    bf16 = _config(2, dtype="bfloat16")
    assert bf16.for_platform("none", "auto", "auto", "gpu").attention_kernel == "cudnn"
    assert bf16.for_platform("none", "auto", "auto", "cpu").attention_kernel == "xla"
    assert _config(2).for_platform("full", "auto", "auto", "gpu").attention_kernel == "xla"  # float32: no cuDNN kernel
    assert _config(2).for_platform("full", "auto", "auto", "gpu").remat == "full"


def test_decode_attention_auto_picks_the_pallas_kernel_only_on_a_gpu_in_bfloat16():
    bf16 = _config(2, dtype="bfloat16")
    assert bf16.for_platform("none", "auto", "auto", "gpu").decode_kernel == "pallas"
    assert bf16.for_platform("none", "auto", "auto", "cpu").decode_kernel == "xla"
    assert _config(2).for_platform("none", "auto", "auto", "gpu").decode_kernel == "xla"  # float32
    assert _config(2).for_platform("none", "auto", "pallas", "cpu").decode_kernel == "pallas"  # asked for
    on_rocm = bf16.for_platform("none", "auto", "auto", "rocm")  # kernels untested there: XLA's
    assert (on_rocm.attention_kernel, on_rocm.decode_kernel) == ("xla", "xla")
    # backend.adapter.shared_prefix travels as given (its auto is decided at trace time, by the shapes)
    assert bf16.for_platform("none", "auto", "auto", "gpu").shared_prefix == "auto"
    assert bf16.for_platform("none", "auto", "auto", "gpu", "off").shared_prefix == "off"


def test_kernel_platform_tells_rocm_from_cuda(monkeypatch):
    """A ROCm GPU client reports platform "gpu" like CUDA; its platform_version tells them apart."""
    import types

    import jax

    from framework.backends.maxtext.models import kernel_platform

    assert kernel_platform() == jax.default_backend() == "cpu"
    for version, expected in (("rocm 60302", "rocm"), ("cuda 12080", "gpu")):
        device = types.SimpleNamespace(client=types.SimpleNamespace(platform_version=version))
        monkeypatch.setattr(jax, "default_backend", lambda: "gpu")
        monkeypatch.setattr(jax, "devices", lambda: [device])
        assert kernel_platform() == expected
    with pytest.raises(ConfigError, match=r"backend.adapter.decode_attention: 'flash' is not one of xla, pallas"):
        _config(2, decode_kernel="flash")


def test_bad_execution_options_are_one_line_config_errors():
    with pytest.raises(ConfigError, match=r"backend.adapter.remat: 'some' is not one of none, minimal, full"):
        _config(2, remat="some")
    with pytest.raises(ConfigError, match=r"backend.adapter.attention: 'flash' is not one of xla, cudnn"):
        _config(2, attention_kernel="flash")
    with pytest.raises(ConfigError, match="cudnn has no float32 kernel"):
        _config(2).for_platform("none", "cudnn", "auto", "gpu")


def test_a_decode_step_reads_each_layer_in_place(qwen3):
    """With a cache the layers run unrolled on per-layer weights and cache buffers: a decode step
    slices nothing out of a stack (a scanned decode copied each layer's weights and cache per token)."""
    from framework.backends.maxtext.models import KVCache
    from framework.backends.maxtext.models.transformer import unstack_layers

    config = qwen3["config"]
    model = Transformer(config)
    cache = KVCache.create(config, 2, 8)
    one = jnp.ones((2, 1), jnp.int32)
    params = unstack_layers(qwen3["params"])
    assert len(params["layers"]) == config.num_layers
    jaxpr = str(jax.make_jaxpr(lambda p, c: model.apply({"params": p}, one, one, one, c))(params, cache))
    assert not re.findall(r"\b(?:dynamic_)?slice\[", jaxpr) and "scan[" not in jaxpr
    assert jaxpr.count("dynamic_update_slice") == 2 * config.num_layers + 1  # K and V per layer, the valid mask
    with pytest.raises(ValueError, match="needs per-layer params"):  # the stack is never sliced per token
        model.apply({"params": qwen3["params"]}, one, one, one, cache)


def test_the_update_refuses_rows_the_packed_attention_would_attend_wrongly():
    from framework.backends.maxtext.trainers.update import check_one_run_per_row
    from framework.core.errors import DataError

    check_one_run_per_row(np.array([[0, 1, 1, 0], [1, 1, 1, 1], [0, 0, 1, 0]]))  # left and/or right padding
    with pytest.raises(DataError, match="row 1 of the batch has 2 runs of real tokens"):
        check_one_run_per_row(np.array([[1, 1, 0, 0], [1, 0, 1, 1]]))
    with pytest.raises(DataError, match="row 0 of the batch has 0 runs"):
        check_one_run_per_row(np.array([[0, 0, 0, 0]]))
