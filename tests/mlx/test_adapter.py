"""The adapter without mlx installed: one line with the install hint (runs with or without mlx)."""

from __future__ import annotations

import importlib.util

import pytest

from framework.backends.mlx.adapter import MLXAdapter
from framework.core.errors import BackendError
from tests.conftest import compose_config


def test_missing_mlx_names_the_extra_to_install(monkeypatch, tmp_path):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name.startswith("mlx") else real(name, *a))
    with pytest.raises(BackendError, match=r"backend=mlx needs mlx, mlx-lm: pip install -e '\.\[mlx\]'"):
        MLXAdapter(cache_dir=str(tmp_path)).prepare_backend(compose_config(["recipe=dpo_mlx_cpu"]))
