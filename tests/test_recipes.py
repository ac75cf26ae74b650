"""Every recipe composes and its backend's convert_config accepts it (fast: no model is built, no step runs).

Recipes that name a hub model or the hub GSM8K get offline stand-ins for the hub only (the snapshot
path and the shipped GSM8K sample), so the test checks the config, not the network.
"""

from __future__ import annotations

import dataclasses

import pytest
from hydra.utils import instantiate

from framework.core.plain import to_plain
from tests.conftest import REPO_ROOT, compose_config

RECIPES = sorted(p.stem for p in (REPO_ROOT / "recipes").glob("*.yaml"))


@pytest.fixture
def offline_hub(monkeypatch, tmp_path):
    """hub model ids resolve to a folder named after them; hub GSM8K reads the shipped sample."""
    import framework.data.gsm8k as gsm8k
    import framework.models.hub as hub

    def snapshot(hub_id: str) -> str:
        return str(tmp_path / hub_id.replace("/", "--"))

    monkeypatch.setattr(hub, "hub_snapshot", snapshot)
    monkeypatch.setattr(hub, "hub_metadata", snapshot)  # maxtext's model source: the small files first
    monkeypatch.setattr(gsm8k, "load_from_hub", lambda dataset_id, split, limit=None, cache_dir=None:
                        gsm8k.load_gsm8k("sample", split, limit))


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("cache")  # one tiny model build for all CPU recipes


@pytest.mark.parametrize("recipe", RECIPES)
def test_recipe_passes_convert_config(recipe, offline_hub, monkeypatch, cache_dir):
    monkeypatch.setenv("CRUCIBLE_CACHE", str(cache_dir))
    cfg = compose_config([f"recipe={recipe}"])
    try:
        adapter = instantiate(cfg.backend.adapter)
        job = adapter.convert_config(cfg)
    except ImportError as error:
        pytest.skip(f"backend={cfg.backend.name} cannot be imported here: {error}")
    assert job.task is not None and job.model_name == cfg.model.name
    if hasattr(job, "parallel"):
        resolved = {axis: getattr(job.parallel, axis) for axis in cfg.parallel}
        plain = {axis: dataclasses.asdict(v) if dataclasses.is_dataclass(v) else v for axis, v in resolved.items()}
        assert plain == to_plain(cfg.parallel)


def test_a_null_rollout_layout_passes_maxtexts_convert_config(offline_hub, monkeypatch, cache_dir):
    """parallel.rollout=null: the rollout decodes in the update's layout (the early rollout checks skip it)."""
    monkeypatch.setenv("CRUCIBLE_CACHE", str(cache_dir))
    cfg = compose_config(["recipe=grpo_arithmetic_cpu", "parallel.rollout=null"])
    job = instantiate(cfg.backend.adapter).convert_config(cfg)
    assert job.parallel.rollout is None
