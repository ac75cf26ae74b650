"""Patches of the torch backend, one topic per module (registered at import; bodies import torch lazily)."""

from framework.backends.torch.patches import attention, precision  # noqa: F401
