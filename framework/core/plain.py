"""Config values as plain Python data: OmegaConf containers and tuples become dicts and lists."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def to_plain(value: Any) -> Any:
    """Nested mappings and sequences (DictConfig, ListConfig, tuples) as dicts and lists, so they hash,
    compare and serialise to JSON; strings and scalars unchanged."""
    if isinstance(value, Mapping):
        return {str(k): to_plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        return [to_plain(v) for v in value]
    return value
