"""Crucible: compose ML experiments from Hydra config groups.

Importing this package stays cheap: no torch, jax, mlx or transformers. Backends import their
heavy libraries inside their own modules, only when a run selects them.
"""

__version__ = "0.1.0"
