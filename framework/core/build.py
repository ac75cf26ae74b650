"""The one path from a config mapping to a typed dataclass, used by every adapter.

Types only, no defaults: the YAML holds every value. `build()` turns a plain mapping (or a DictConfig)
into the dataclass, nested dataclasses included; an unknown, missing or mistyped key is a ConfigError
that names the dotted key and what is valid.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, Mapping, TypeVar

from framework.core.errors import ConfigError

T = TypeVar("T")
HYDRA_KEYS = {"_target_", "_partial_", "_recursive_", "_convert_", "_args_"}


def build(cls: type[T], values: Any, key: str) -> T:
    """`cls(**values)` with nested dataclass fields built too; errors name `key`."""
    from framework.core.plain import to_plain
    from framework.core.validation import type_error

    values = to_plain(values)
    fields = [f.name for f in dataclasses.fields(cls) if f.init]
    if not isinstance(values, Mapping):
        got = "null" if values is None else repr(values)
        raise ConfigError(f"{key}: expected a mapping of {cls.__name__} fields, got {got}; valid: its keys one at a "
                          f"time, {key}.KEY=VALUE with KEY one of {', '.join(fields)}")
    hints = typing.get_type_hints(cls, include_extras=True)  # Annotated ranges (framework/core/ranges.py)
    unknown = sorted(set(values) - set(fields) - HYDRA_KEYS)
    if unknown:
        raise ConfigError(f"{key}.{unknown[0]}: unknown key; valid: {', '.join(sorted(fields))}")
    missing = [name for name in fields if name not in values]
    if missing:
        raise ConfigError(f"{key}.{missing[0]}: missing key")
    kwargs = {}
    for name in fields:
        value, nested = values[name], _dataclass_of(hints[name])
        if nested and isinstance(value, Mapping):
            kwargs[name] = build(nested, value, f"{key}.{name}")
            continue
        reason = type_error(value, hints[name])
        if reason:
            raise ConfigError(f"{key}.{name}: {reason}")
        kwargs[name] = value
    return cls(**kwargs)


def _dataclass_of(tp: Any) -> type | None:
    """The dataclass in `tp` (also inside Optional[...]), or None."""
    candidates = typing.get_args(tp) or (tp,)
    return next((c for c in candidates if isinstance(c, type) and dataclasses.is_dataclass(c)), None)
