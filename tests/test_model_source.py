"""framework.models.source: a random-init model's small files first, its weights from a child process, the
same directory the synchronous build gives; a failed or stopped build publishes nothing and says so in one line."""

import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from framework.core.errors import ConfigError, DataError
from framework.core.paths import CONF_DIR
from framework.models.source import METADATA_LINE, METADATA_ONLY, start_model_source
from framework.models.tiny import metadata_dir, resolve_model_dir, tiny_model_dir


def model_cfg(**hf_config) -> dict:
    cfg = yaml.safe_load((CONF_DIR / "model" / "tiny_qwen2.yaml").read_text())
    cfg["hf_config"] |= hf_config
    return cfg


def digests(directory: Path) -> dict[str, str]:
    return {f.name: hashlib.sha256(f.read_bytes()).hexdigest() for f in sorted(Path(directory).iterdir())}


def test_background_build_gives_the_synchronous_directory_its_metadata_first(tmp_path):
    cfg = model_cfg() | {"hub_id": "org/not-cached"}  # random_init wins over a hub id, as in resolve_model_dir
    source = start_model_source(cfg, tmp_path / "background")
    metadata = source.metadata()
    assert metadata == metadata_dir(tiny_model_dir(cfg, tmp_path / "background"))
    assert {"config.json", "generation_config.json", "tokenizer.json"} <= set(digests(metadata))
    assert "model.safetensors" not in digests(metadata)
    built = source.weights()
    synchronous = Path(resolve_model_dir(cfg, tmp_path / "synchronous"))
    assert built.name == synchronous.name  # the same fingerprinted directory name
    assert digests(built) == digests(synchronous)  # weights, config, tokenizer and build marker, byte for byte
    assert all(digests(built)[name] == digest for name, digest in digests(metadata).items())
    assert source.metrics()["model_ready_s"] > 0
    source.close()

    # the metadata-only child (torch hidden) publishes the same files and nothing else
    child = subprocess.run([sys.executable, "-m", "framework.models.source", json.dumps(cfg),
                            str(tiny_model_dir(cfg, tmp_path / "alone")), METADATA_ONLY],
                           capture_output=True, text=True, timeout=300)
    assert child.returncode == 0 and child.stdout.split() == [METADATA_LINE], child.stderr[-2000:]
    assert [p.name for p in (tmp_path / "alone").iterdir() if not p.name.startswith(".")] == [metadata.name]
    assert digests(metadata_dir(tiny_model_dir(cfg, tmp_path / "alone"))) == digests(metadata)

    again = start_model_source(cfg, tmp_path / "background")  # published: nothing is built again
    assert again.metadata() == again.weights() == built and again.metrics()["model_ready_s"] == 0.0


def test_a_relative_cache_is_the_launch_directorys_not_the_build_childs(tmp_path, monkeypatch):
    """backend.adapter.cache_dir defaults to outputs/cache, relative to where the run starts (a `crucible` command
    anywhere); the build child runs in the repo root: it once built there while the run looked in its own directory
    and handed transformers a path it took for a hub id."""
    monkeypatch.chdir(tmp_path)
    source = start_model_source(model_cfg(), Path("outputs/cache/models"))
    built = source.weights()
    assert built.is_absolute() and built.parent == tmp_path / "outputs/cache/models"
    assert source.metadata().parent == built.parent and (built / "model.safetensors").is_file()
    source.close()


def test_a_bad_config_in_the_child_is_its_one_line_and_publishes_nothing(tmp_path):
    source = start_model_source(model_cfg(vocab_size=100), tmp_path)
    with pytest.raises(ConfigError, match=r"^model.hf_config.vocab_size: 100 is too small"):
        source.metadata()
    with pytest.raises(ConfigError, match=r"^model.hf_config.vocab_size: 100 is too small"):
        source.metadata()  # a second caller (setup and the layout search both ask) gets the same line
    with pytest.raises(ConfigError):
        source.weights()
    assert not [p for p in tmp_path.iterdir() if not p.name.startswith(".")]  # neither the model nor its metadata


def test_a_model_another_run_published_meanwhile_serves_its_small_files(tmp_path):
    """The source found no build, then a synchronous build (another backend's run) published the model without
    a metadata directory: the children find it complete and say nothing; metadata() is the model directory."""
    from framework.models.source import _TinyBuild

    cfg = model_cfg()
    out_dir = Path(resolve_model_dir(cfg, tmp_path))
    assert not metadata_dir(out_dir).exists()
    build = _TinyBuild("tiny_qwen2", cfg, out_dir, has_metadata=False)
    try:
        assert (build.source.metadata() / "config.json").is_file()
        assert build.source.weights() == out_dir
    finally:
        build.stop()


def test_a_killed_build_is_one_line_naming_the_model_and_never_published(tmp_path):
    cfg = model_cfg()
    source = start_model_source(cfg, tmp_path)
    source.metadata()  # the child now builds the weights
    build = source._weights.__self__  # the _TinyBuild behind the source
    build.process.kill()
    with pytest.raises(DataError) as error:
        source.weights()
    message = str(error.value)
    assert "\n" not in message and "'tiny_qwen2'" in message and "exit status -9" in message
    assert not tiny_model_dir(cfg, tmp_path).exists()  # only the metadata and hidden staging leftovers
    retry = start_model_source(cfg, tmp_path)  # the next run builds it afresh from the published metadata on
    assert retry.weights() == tiny_model_dir(cfg, tmp_path)
    retry.close()


def test_the_run_process_never_imports_torch_for_a_random_init_model(tmp_path):
    code = ("import sys, yaml; from pathlib import Path; from framework.models.source import start_model_source; "
            f"cfg = yaml.safe_load(Path({str(CONF_DIR / 'model' / 'tiny_qwen2.yaml')!r}).read_text()); "
            f"s = start_model_source(cfg, Path({str(tmp_path)!r})); s.metadata(); s.weights(); "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "False"


def test_a_cached_hub_model_gives_its_snapshot_and_an_uncached_one_its_offline_line(tmp_path, monkeypatch):
    from huggingface_hub import constants

    snapshot = tmp_path / "hub" / "models--org--cached" / "snapshots" / "abc123"
    snapshot.mkdir(parents=True)
    for name in ("config.json", "tokenizer.json", "model.safetensors"):
        (snapshot / name).write_text("{}")
    (snapshot.parents[1] / "refs").mkdir()
    (snapshot.parents[1] / "refs" / "main").write_text("abc123")
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    source = start_model_source({"name": "cached", "hub_id": "org/cached"}, tmp_path / "cache")
    assert Path(source.metadata()) == Path(source.weights()) == snapshot
    with pytest.raises(ConfigError, match=r"^model.hub_id=org/missing: not in the local Hugging Face cache"):
        start_model_source({"name": "missing", "hub_id": "org/missing"}, tmp_path / "cache")  # before any thread


def test_closing_a_running_build_stops_its_children_and_leaves_no_staging_directory(tmp_path):
    source = start_model_source(model_cfg(), tmp_path)
    build = source._weights.__self__
    deadline = time.monotonic() + 120
    while not [p for p in tmp_path.iterdir() if p.name.startswith(".")] and time.monotonic() < deadline:
        time.sleep(0.05)  # until a child builds in its staging directory
    assert build.process.poll() is None, "the build ended before the test could stop it"
    source.close()
    assert build.process.poll() is not None and build.fast.poll() is not None
    assert not tiny_model_dir(model_cfg(), tmp_path).exists()
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]  # the staging directories removed


def test_a_typed_hub_id_as_model_name_keeps_the_random_init_build_in_the_cache(tmp_path):
    """model.name=Qwen/Qwen3-8B nested the build under cache/Qwen/; `../x` put it beside the cache."""
    for name, flat in (("Qwen/Qwen3-8B", "Qwen--Qwen3-8B-"), ("../x", "..--x-"), ("tiny_qwen2", "tiny_qwen2-")):
        built = tiny_model_dir(model_cfg() | {"name": name}, tmp_path / "cache")
        assert built.parent == tmp_path / "cache" and built.name.startswith(flat)
