"""Patches of the mlx backend, one topic per module (registration at import; bodies import mlx-lm lazily)."""

from framework.backends.mlx.patches import rope_parameters  # noqa: F401
