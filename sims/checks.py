"""One-line ConfigErrors for the simulator's config records (layouts, workloads, efficiency tables)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping

from framework.core.errors import ConfigError


def no_unknown(origin: str, record: Mapping, valid: Iterable[str]) -> None:
    valid = tuple(valid)
    unknown = sorted(set(record) - set(valid))
    if unknown:
        raise ConfigError(f"{origin}: unknown key(s) {', '.join(unknown)}; valid: {', '.join(valid)}")


def check_mapping(origin: str, value) -> None:
    if not isinstance(value, Mapping):
        raise ConfigError(f"{origin} is {value!r}; expected an object")


def check_member(origin: str, value, valid: tuple[str, ...]) -> None:
    if value not in valid:
        raise ConfigError(f"{origin}: {value!r} is not valid; valid: {', '.join(valid)}")


def check_fraction(origin: str, value) -> None:
    if not isinstance(value, (int, float)) or not 0 < value <= 1:
        raise ConfigError(f"{origin} is {value!r}; expected a fraction in (0, 1]")


def check_non_negative(origin: str, value) -> None:
    if not isinstance(value, (int, float)) or value < 0:
        raise ConfigError(f"{origin} is {value!r}; expected a number >= 0")
