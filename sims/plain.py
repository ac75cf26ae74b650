"""Config values as plain JSON data (OmegaConf containers and tuples included), for cache keys."""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping

from framework.core.errors import ConfigError
from framework.core.plain import to_plain


def json_key(value: Mapping, what: str) -> str:
    """A canonical JSON string of a nested mapping; ConfigError naming `what` if it holds non-data.

    A sweep passes the same dicts again and again: for a plain dict the last key is remembered
    with a copy of the dict and reused while the dict still equals that copy (a C-speed compare
    instead of walking and serialising it)."""
    if type(value) is dict:
        remembered = _LAST.get(id(value))
        if remembered is not None and remembered[0] is value and remembered[1] == value:
            return remembered[2]
        key = _json_key(value, what)
        _LAST[id(value)] = (value, copy.deepcopy(value), key)
        if len(_LAST) > MAX_REMEMBERED:
            _LAST.pop(next(iter(_LAST)))
        return key
    return _json_key(value, what)


MAX_REMEMBERED = 64
_LAST: dict[int, tuple[dict, dict, str]] = {}  # id -> (the dict, a copy of it, its key); holds the dict alive


def _json_key(value: Mapping, what: str) -> str:
    try:
        return json.dumps(to_plain(value), sort_keys=True, allow_nan=False)
    except (TypeError, ValueError) as error:
        valid = "strings, numbers, booleans, null, lists and mappings"
        raise ConfigError(f"{what} must hold only {valid}: {error}") from None


