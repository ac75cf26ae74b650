"""Bad input to backend=megatron is one line naming the key or file and what is valid."""

from __future__ import annotations

import json
import shutil

import pytest
from hydra.utils import instantiate

from framework.core.errors import ConfigError, DataError
from tests.conftest import compose_config, run_cli


def _convert(overrides, cache_dir):
    cfg = compose_config(["recipe=pretrain_megatron_cpu", f"backend.adapter.cache_dir={cache_dir}", *overrides])
    return instantiate(cfg.backend.adapter).convert_config(cfg)


def test_layout_that_does_not_divide_the_devices():
    """Checked against the launched ranks in trainer.setup (convert_config does not know them)."""
    from framework.backends.megatron.distributed import resolve_layout
    from framework.core.parallel import ParallelConfig

    with pytest.raises(ConfigError, match="parallel: 3 devices do not split into the fixed axes' product 2"):
        resolve_layout(ParallelConfig(dp=-1, fsdp=1, tp=2, pp=1, ep=1, cp=1), 3, "local", on_gpu=False)


@pytest.mark.parametrize("on_gpu, instead", [(False, "parallel.dp, parallel.tp or parallel.pp"),
                                             (True, "parallel.fsdp, parallel.dp, parallel.tp or parallel.pp")])
def test_experts_are_refused_with_maxtexts_message(on_gpu, instead):
    """One refusal for the dense backends (framework.core.parallel.check_dense): key, why, what to use instead; on a
    CPU it does not suggest fsdp, which megatron refuses there (the distributed optimizer needs CUDA)."""
    from framework.backends.megatron.distributed import check_axes
    from framework.core.parallel import ParallelConfig

    with pytest.raises(ConfigError, match=rf"^parallel.ep: 2; backend=megatron trains dense models \(no experts\), ep "
                                          rf"must be 1; spread the devices with {instead}$"):
        check_axes(ParallelConfig(dp=2, fsdp=1, tp=1, pp=1, ep=2, cp=1), "local", on_gpu=on_gpu)
    if not on_gpu:  # the axis left out is the one megatron refuses there
        with pytest.raises(ConfigError, match="parallel.fsdp: 2 shards the optimizer state"):
            check_axes(ParallelConfig(dp=1, fsdp=2, tp=1, pp=1, ep=1, cp=1), "local", on_gpu=False)


def test_layout_that_does_not_divide_heads_or_layers(cache_dir):
    with pytest.raises(ConfigError, match="parallel.tp: 3 does not divide the model's num_attention_heads"):
        _convert(["parallel.tp=3"], cache_dir)
    with pytest.raises(ConfigError, match="parallel.pp: 3 does not divide the model's num_hidden_layers"):
        _convert(["parallel.pp=3"], cache_dir)


def test_context_parallel_needs_transformer_engine(cache_dir):
    with pytest.raises(ConfigError, match="parallel.cp: 2 needs layer_spec=te"):
        _convert(["parallel.cp=2"], cache_dir)


def test_bf16_on_a_cpu(cache_dir):
    with pytest.raises(ConfigError, match="pretrain.compute_dtype: bfloat16 on a CPU"):
        _convert(["pretrain.compute_dtype=bfloat16"], cache_dir)


def test_a_data_set_that_is_not_text(cache_dir):
    with pytest.raises(ConfigError, match="task=pretrain needs a text data set"):
        _convert(["data=chat_sample"], cache_dir)


def test_a_corpus_without_text(cache_dir, tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text(json.dumps({"text": "fine"}) + "\n" + json.dumps({"content": "no text field"}) + "\n")
    with pytest.raises(DataError, match=r"corpus.jsonl:2: expected \{\"text\": non-empty string\}"):
        _convert(["data.source=local", f"data.path={corpus}"], cache_dir)


def test_a_model_without_a_tokenizer(cache_dir, tmp_path):
    from framework.backends.megatron import data
    from framework.models.tiny import resolve_model_dir

    config = _convert([], cache_dir)
    bare = tmp_path / "no_tokenizer"
    bare.mkdir()
    shutil.copy(f"{resolve_model_dir(config.model, cache_dir / 'models')}/config.json", bare / "config.json")
    with pytest.raises(DataError, match="model.path: .*no_tokenizer has no tokenizer"):
        data.load_tokenizer(str(bare))


def test_the_cli_prints_one_line(cache_dir):
    proc = run_cli(["recipe=pretrain_megatron_cpu", "parallel.pp=2", "progress=false", "hydra.run.dir=" +
                    str(cache_dir / "bad_run")], env={"CRUCIBLE_CACHE": str(cache_dir)})
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1].startswith("error: parallel:")
    assert "Traceback" not in proc.stderr


def test_optimizer_sharding_on_a_cpu(cache_dir):
    with pytest.raises(ConfigError, match="parallel.fsdp: 2 shards the optimizer state .* use parallel.dp=-1"):
        _convert(["parallel.dp=1", "parallel.fsdp=2"], cache_dir)


def test_a_gpu_recipe_on_a_machine_without_one(cache_dir):
    from framework.core.hardware import detect

    if detect().accelerator == "gpu":
        pytest.skip("this machine has a GPU")
    proc = run_cli(["recipe=pretrain_megatron", "hydra.run.dir=" + str(cache_dir / "gpu_run")],
                   env={"CRUCIBLE_CACHE": str(cache_dir)})
    assert proc.returncode == 2 and proc.stderr.strip().splitlines()[-1].startswith("error: hardware=h100 asks for")
