"""Numeric ranges of config keys, declared on the schema's type: `Annotated[float, Range(0, 1, high_open=True)]`.

One mechanism for every schema (tasks, model, hardware, adapters' signatures): `validation.type_error`
reads the `Range` of an annotated field, so `framework.core.build.build` and the config validation
(`check_against_signature`, before anything heavy runs) refuse a value outside it with one line.
Every float must also be finite (NaN and inf are refused) unless its Range says `finite=False`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated


@dataclass(frozen=True)
class Range:
    low: float | None = None
    high: float | None = None
    low_open: bool = False  # (low, ... instead of [low, ...
    high_open: bool = False
    finite: bool = True  # NaN and +-inf refused

    def error(self, value: float) -> str | None:
        """Why `value` is outside the range, or None."""
        if isinstance(value, float) and not math.isfinite(value):
            return None if not self.finite else f"{value} is not a finite number; valid: {self}"
        below = self.low is not None and (value <= self.low if self.low_open else value < self.low)
        above = self.high is not None and (value >= self.high if self.high_open else value > self.high)
        return f"{value} is out of range; valid: {self}" if below or above else None

    def __str__(self) -> str:
        if self.low is not None and self.high is not None:
            return f"{'(' if self.low_open else '['}{_num(self.low)}, {_num(self.high)}{')' if self.high_open else ']'}"
        if self.low is not None:
            return f"{'>' if self.low_open else '>='} {_num(self.low)}"
        if self.high is not None:
            return f"{'<' if self.high_open else '<='} {_num(self.high)}"
        return "any finite number" if self.finite else "any number"


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e15 else f"{value:g}"


POSITIVE = Range(0, low_open=True)  # > 0
NON_NEGATIVE = Range(0)  # >= 0
AT_LEAST_ONE = Range(1)  # >= 1 (counts)
FRACTION = Range(0, 1)  # [0, 1]
PROBABILITY_OPEN = Range(0, 1, high_open=True)  # [0, 1): dropout, Adam betas
SEED = Range(0, 2**32 - 1)  # numpy, torch and JAX all take it


def range_of(annotation) -> Range | None:
    """The Range in an `Annotated[...]` annotation's metadata, or None."""
    return next((m for m in getattr(annotation, "__metadata__", ()) if isinstance(m, Range)), None)


# Annotations the schemas use (types with their range): `learning_rate: PositiveFloat`.
PositiveFloat = Annotated[float, POSITIVE]
NonNegativeFloat = Annotated[float, NON_NEGATIVE]
Fraction = Annotated[float, FRACTION]
OpenFraction = Annotated[float, PROBABILITY_OPEN]
Count = Annotated[int, AT_LEAST_ONE]
NonNegativeInt = Annotated[int, NON_NEGATIVE]
Seed = Annotated[int, SEED]
