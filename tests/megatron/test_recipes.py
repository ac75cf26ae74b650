"""The megatron recipes compose, their layouts fit their models, and the preflight predicts a step (fast)."""

from __future__ import annotations

import pytest
from hydra.utils import instantiate

from framework.backends.megatron.distributed import resolve_layout
from framework.backends.megatron.model import check_layout, decoder_shape
from framework.backends.megatron.trainers.preflight import predict_step
from framework.core.build import build
from framework.core.parallel import ParallelConfig
from framework.tasks.pretrain import PretrainTask, check_pretrain
from tests.conftest import compose_config


@pytest.mark.parametrize("recipe, devices, accelerator", [("pretrain_megatron_cpu", 1, "cpu"),
                                                          ("pretrain_megatron", 1, "gpu"),
                                                          ("pretrain_megatron_tp2", 2, "gpu")])
def test_recipe_layout_fits_its_model_and_the_simulator_predicts_it(recipe, devices, accelerator):
    cfg = compose_config([f"recipe={recipe}"])
    assert cfg.backend.name == "megatron" and cfg.hardware.accelerator == accelerator
    task = build(PretrainTask, cfg.pretrain, "pretrain")
    check_pretrain(task)
    layout = resolve_layout(build(ParallelConfig, cfg.parallel, "parallel"), devices, "local", accelerator == "gpu")
    shape = decoder_shape(dict(cfg.model.hf_config))
    check_layout(shape, layout.tp, layout.pp)
    micro_batches = task.global_batch_size // (task.micro_batch_size * layout.dp)
    prediction = predict_step(dict(cfg.model.hf_config), dict(cfg.hardware), layout, task, micro_batches)
    assert prediction["preflight_predicted_step_s"] > 0 and prediction["preflight_fits"] is True


def test_the_gpu_recipe_is_a_1b_llama_at_sequence_2048():
    cfg = compose_config(["recipe=pretrain_megatron"])
    shape = decoder_shape(dict(cfg.model.hf_config))
    matmul = shape.num_layers * (shape.hidden_size * shape.head_dim * (2 * shape.num_heads + 2 * shape.num_query_groups)
                                 + 3 * shape.hidden_size * shape.ffn_hidden_size)
    assert 1.0e9 < matmul + shape.vocab_size * shape.hidden_size < 1.3e9
    assert cfg.pretrain.seq_length == 2048 and cfg.pretrain.compute_dtype == "bfloat16"
    assert shape.rope_scaling_factor == 32.0 and shape.tie_embeddings


def test_the_cpu_recipe_converts(cache_dir):
    cfg = compose_config(["recipe=pretrain_megatron_cpu", f"backend.adapter.cache_dir={cache_dir}"])
    adapter = instantiate(cfg.backend.adapter)
    adapter.prepare_backend(cfg)
    config = adapter.convert_config(cfg)
    assert config.task.compute_dtype == "float32" and config.layer_spec == "local"
    assert config.hf_config["model_type"] == "llama" and adapter.detect_versions()["megatron-core"]
