"""Config values as plain JSON data (OmegaConf containers and tuples included), for cache keys."""

from __future__ import annotations

import json
from collections.abc import Mapping

from framework.core.errors import ConfigError
from framework.core.plain import to_plain


def json_key(value: Mapping, what: str) -> str:
    """A canonical JSON string of a nested mapping; ConfigError naming `what` if it holds non-data."""
    try:
        return json.dumps(to_plain(value), sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as error:
        valid = "strings, numbers, booleans, null, lists and mappings"
        raise ConfigError(f"{what} must hold only {valid}: {error}") from None


