"""framework.models.tiny: offline random-init HF model directories that transformers loads as usual."""

import json
from pathlib import Path

import pytest
import yaml

from framework.core.paths import CONF_DIR
from framework.core.errors import ConfigError, DataError
from framework.models.tiny import BUILD_MARKER, build_tiny_model, resolve_model_dir

CONF_MODEL = CONF_DIR / "model"
TINY_NAMES = ["tiny_qwen2", "tiny_qwen3", "tiny_llama"]
ARCHITECTURES = {"tiny_qwen2": "Qwen2ForCausalLM", "tiny_qwen3": "Qwen3ForCausalLM",
                 "tiny_llama": "LlamaForCausalLM"}


def model_cfg(name: str) -> dict:
    return yaml.safe_load((CONF_MODEL / f"{name}.yaml").read_text())


@pytest.fixture(scope="session")
def tiny_root(tmp_path_factory) -> Path:
    return tmp_path_factory.getbasetemp() / "tiny_models"


@pytest.mark.parametrize("name", TINY_NAMES)
def test_build_gives_a_directory_transformers_loads(name, tiny_root):
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    cfg = model_cfg(name)
    out = build_tiny_model(cfg, tiny_root / name)
    model = AutoModelForCausalLM.from_pretrained(out)
    tokenizer = AutoTokenizer.from_pretrained(out)
    generation = GenerationConfig.from_pretrained(out)

    assert type(model).__name__ == ARCHITECTURES[name]
    assert model.config.hidden_size == cfg["hf_config"]["hidden_size"] == 64
    assert model.config.num_hidden_layers == 2
    assert len(tokenizer) == cfg["hf_config"]["vocab_size"]
    im_end, endoftext = tokenizer.convert_tokens_to_ids(["<|im_end|>", "<|endoftext|>"])
    assert (tokenizer.eos_token_id, tokenizer.pad_token_id) == (im_end, endoftext)
    assert (model.config.eos_token_id, model.config.pad_token_id) == (im_end, endoftext)
    assert generation.eos_token_id == [im_end, endoftext] and generation.pad_token_id == endoftext
    text = "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n#### 72"
    assert tokenizer.decode(tokenizer(text)["input_ids"]) == text


def test_chat_template_is_chatml_with_generation_prompt(tiny_root):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(build_tiny_model(model_cfg("tiny_qwen2"), tiny_root / "tiny_qwen2"))
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "2+2?"}]
    rendered = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    assert rendered == ("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n"
                        "<|im_start|>assistant\n")
    without = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=False)
    assert not without.endswith("assistant\n")
    # Special tokens are single tokens, never split by BPE.
    ids = tokenizer("<|im_start|>user<|im_end|>")["input_ids"]
    assert ids[0] == tokenizer.convert_tokens_to_ids("<|im_start|>") and ids[-1] == tokenizer.eos_token_id


def test_builds_are_seeded_and_reproducible(tmp_path):
    from safetensors.numpy import load_file

    cfg = model_cfg("tiny_llama")
    first, second = build_tiny_model(cfg, tmp_path / "a"), build_tiny_model(cfg, tmp_path / "b")
    weights_a, weights_b = load_file(first / "model.safetensors"), load_file(second / "model.safetensors")
    assert weights_a.keys() == weights_b.keys()
    assert all((weights_a[k] == weights_b[k]).all() for k in weights_a)
    assert (first / "tokenizer.json").read_text() == (second / "tokenizer.json").read_text()


def test_complete_build_is_reused_and_a_changed_config_rebuilds(tmp_path):
    cfg = model_cfg("tiny_qwen2")
    out = build_tiny_model(cfg, tmp_path / "m")
    weights = out / "model.safetensors"
    stamp = weights.stat().st_mtime_ns
    assert build_tiny_model(cfg, out) == out and weights.stat().st_mtime_ns == stamp

    changed = {**cfg, "hf_config": {**cfg["hf_config"], "intermediate_size": 96}}
    build_tiny_model(changed, out)
    assert json.loads((out / "config.json").read_text())["intermediate_size"] == 96


def test_interrupted_build_is_not_reused(tmp_path):
    cfg = model_cfg("tiny_qwen2")
    out = build_tiny_model(cfg, tmp_path / "m")
    (out / BUILD_MARKER).unlink()  # as if the build had died before finishing
    (out / "model.safetensors").write_bytes(b"truncated")
    build_tiny_model(cfg, out)
    assert (out / "model.safetensors").stat().st_size > 1000 and (out / BUILD_MARKER).is_file()


def test_custom_corpus_shapes_the_vocabulary(tmp_path):
    from transformers import AutoTokenizer

    corpus = ["zyxwvut " * 50, "qqqq rrrr ssss " * 50]
    out = build_tiny_model(model_cfg("tiny_qwen3"), tmp_path / "m", corpus_texts=corpus)
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert len(tokenizer("zyxwvut")["input_ids"]) == 1
    assert len(tokenizer("Natalia")["input_ids"]) > 1  # not in this corpus


def test_bad_hf_config_is_a_config_error(tmp_path):
    with pytest.raises(ConfigError, match="model.hf_config"):
        build_tiny_model({"name": "x", "hf_config": {"hidden_size": 8}}, tmp_path / "m")
    small_vocab = {**model_cfg("tiny_qwen2"), "hf_config": {**model_cfg("tiny_qwen2")["hf_config"], "vocab_size": 100}}
    with pytest.raises(ConfigError, match="vocab_size"):
        build_tiny_model(small_vocab, tmp_path / "m")


def test_a_cached_hub_model_resolves_to_its_snapshot(tmp_path, monkeypatch):
    """The HF cache layout (models--org--name/refs/main -> snapshots/<commit>) is used without the network."""
    from huggingface_hub import constants

    snapshot = tmp_path / "hub" / "models--Qwen--Qwen2.5-0.5B-Instruct" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text("abc123")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert resolve_model_dir(model_cfg("qwen2_5_0_5b_instruct"), tmp_path / "cache") == str(snapshot)


def test_resolve_model_dir(tmp_path, monkeypatch):
    from huggingface_hub import constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "empty_hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    local = tmp_path / "local_model"
    local.mkdir()
    assert resolve_model_dir({"path": str(local), "hub_id": "org/model"}, tmp_path) == str(local)
    with pytest.raises(DataError, match=str(tmp_path / "missing")):
        resolve_model_dir({"path": str(tmp_path / "missing")}, tmp_path)

    hub = model_cfg("qwen2_5_0_5b_instruct")
    with pytest.raises(ConfigError, match=r"model.hub_id=Qwen/Qwen2.5-0.5B-Instruct: not in the local Hugging Face "
                                          r"cache .* model.path=DIR .* model.random_init=true"):
        resolve_model_dir(hub, tmp_path / "cache")  # an empty cache, offline (HF_HUB_OFFLINE in the fixture)
    assert not (tmp_path / "cache").exists()  # nothing is built for a hub model

    built = Path(resolve_model_dir(model_cfg("tiny_qwen2"), tmp_path / "cache"))
    assert built.parent == tmp_path / "cache" and built.name.startswith("tiny_qwen2-")
    assert (built / BUILD_MARKER).is_file()
    assert resolve_model_dir(model_cfg("tiny_qwen2"), tmp_path / "cache") == str(built)

    with pytest.raises(ConfigError, match="model.path, model.hub_id or model.random_init"):
        resolve_model_dir({"name": "nothing", "path": None, "hub_id": None, "random_init": False}, tmp_path)


def test_a_build_draws_no_progress_bar_and_leaves_transformers_bars_as_they_were(tmp_path, capfd):
    """Was transformers' "Writing model shards" bar on stderr, also under progress=false (megatron's CPU recipe)."""
    from transformers.utils import logging as transformers_logging

    before = transformers_logging.is_progress_bar_enabled()
    build_tiny_model(model_cfg("tiny_llama"), tmp_path / "m")
    assert "Writing model shards" not in capfd.readouterr().err
    assert transformers_logging.is_progress_bar_enabled() == before
