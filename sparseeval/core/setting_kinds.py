"""The kinds of value a setting can hold (pydantic types, each with its meaning in words for the refusal), and
the one-value parsers the CLI's arguments and the library's checks share with the settings
(:mod:`sparseeval.core.settings` declares the settings with these kinds)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BeforeValidator, Field, TypeAdapter, ValidationError


@dataclass(frozen=True)
class Kind:
    """What a value of a setting must be, in words (the refusal says it)."""

    words: str


def _split(raw: Any) -> Any:
    """A comma-separated list's text as its parts (blanks and empty entries dropped); other values as given."""
    return tuple(part.strip() for part in raw.split(",") if part.strip()) if isinstance(raw, str) else raw


Text = Annotated[str, Kind("text")]
Device = Annotated[str, Field(pattern=r"^(auto|cpu|mps|cuda(:[0-9]+)?)$"), Kind("auto, cpu, cuda or cuda:N")]
PositiveInt = Annotated[int, Field(ge=1), Kind("a positive integer")]
NonNegativeInt = Annotated[int, Field(ge=0), Kind("an integer >= 0")]
Seed = Annotated[int, Field(ge=0, lt=2**32), Kind("an integer seed in [0, 2**32)")]
Share = Annotated[float, Field(ge=0.0, le=1.0), Kind("a share in [0, 1]")]
OpenShare = Annotated[float, Field(gt=0.0, lt=1.0), Kind("a number strictly between 0 and 1")]
CutQuantile = Annotated[float, Field(ge=0.5, lt=1.0), Kind("a number in [0.5, 1)")]
Points = Annotated[float, Field(gt=0.0, le=50.0), Kind("points in (0, 50]")]
NonNegative = Annotated[float, Field(ge=0.0), Kind("a number >= 0")]
#: a relative margin: below 0 a worse challenger may still win (what a test of the replacement path sets)
Margin = Annotated[float, Field(allow_inf_nan=False), Kind("a finite number")]
Names = Annotated[tuple[str, ...], BeforeValidator(_split), Kind("a comma-separated list")]
Counts = Annotated[tuple[PositiveInt, ...], BeforeValidator(_split), Kind("comma-separated positive integers")]


def _check(kind: Any, raw: str | float) -> Any:
    try:
        return TypeAdapter(kind).validate_python(raw)
    except ValidationError:
        raise ValueError(raw) from None


# the parsers of the CLI's arguments and of callers that check one value: the same kinds as the settings'
def positive_int(raw: str) -> int:
    """A count that must be at least 1 (K, a batch, a number of seeds)."""
    return _check(PositiveInt, raw)


def non_negative_int(raw: str) -> int:
    """A count that may be 0 (0: the thing it counts is off)."""
    return _check(NonNegativeInt, raw)


def open_unit(raw: str) -> float:
    """A number strictly between 0 and 1 (a quantile that must leave models on both sides)."""
    return _check(OpenShare, raw)


def cut_quantile(raw: str | float) -> float:
    """Where a frontier split cuts the score: a quantile in [0.5, 1) (above it: the stronger models)."""
    return _check(CutQuantile, raw)
