"""Config values as plain JSON data (OmegaConf containers and tuples included), for cache keys."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence

from framework.core.errors import ConfigError


def json_key(value: Mapping, what: str) -> str:
    """A canonical JSON string of a nested mapping; ConfigError naming `what` if it holds non-data."""
    try:
        return json.dumps(_plain(value), sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as error:
        valid = "strings, numbers, booleans, null, lists and mappings"
        raise ConfigError(f"{what} must hold only {valid}: {error}") from None


def _plain(value):
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes)):
        return [_plain(v) for v in value]
    return value
