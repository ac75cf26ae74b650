"""Every recipe and every group option composes, and every `_target_` imports and binds."""

from __future__ import annotations

import pytest
from hydra.utils import instantiate

from framework.core.runtime import validate
from tests.conftest import CONF_DIR, REPO_ROOT, compose_config


def list_options(conf_dir, group: str) -> list[str]:
    return sorted(p.stem for p in (conf_dir / group).glob("*.yaml"))

GROUPS = ["backend", "task", "model", "hardware", "data", "logger"]
RECIPES = sorted(p.stem for p in (REPO_ROOT / "recipes").glob("*.yaml"))


def backend_task_pairs() -> list[tuple[str, str]]:
    pairs = []
    for backend in list_options(CONF_DIR, "backend"):
        adapter = instantiate(compose_config([f"backend={backend}"]).backend.adapter)
        pairs += [(backend, task) for task in sorted(adapter.trainers)]
    return pairs


def test_recipes_are_a_config_group():
    assert RECIPES, "recipes/ holds no recipe"
    assert list_options(CONF_DIR, "recipe") == RECIPES


@pytest.mark.parametrize("recipe", RECIPES)
def test_recipe_composes_and_validates(recipe):
    first_line = (REPO_ROOT / "recipes" / f"{recipe}.yaml").read_text().splitlines()[0]
    assert first_line == "# @package _global_"
    cfg = compose_config([f"recipe={recipe}"])
    validate(cfg)


@pytest.mark.parametrize("backend,task", backend_task_pairs())
def test_every_backend_task_pair_validates(backend, task):
    validate(compose_config([f"backend={backend}", f"task={task}"]))


@pytest.mark.parametrize("group,option", [(g, o) for g in ["model", "hardware", "data", "logger"] for o in list_options(CONF_DIR, g)])
def test_every_group_option_composes(group, option):
    cfg = compose_config([f"{group}={option}"])
    validate(cfg)
    assert cfg[group].name == option


def test_every_task_option_belongs_to_a_backend():
    runnable = {task for _, task in backend_task_pairs()}
    assert set(list_options(CONF_DIR, "task")) == runnable


def test_model_files_carry_their_hub_id_and_architecture():
    for option in list_options(CONF_DIR, "model"):
        cfg = compose_config([f"model={option}"]).model
        assert cfg.hf_config.model_type and cfg.hf_config.architectures
        assert cfg.hub_id or cfg.random_init, option
