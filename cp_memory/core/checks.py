"""The shared argument checks: one wording and one rule for every setting of the package.

Each check returns the value it accepted (so ``self.n = positive_int(n, "n")`` reads as one step) or raises a
``ValueError`` naming the argument, what it must be and what it got — a wrong type included, as every
setting of the package did before these checks were shared (docs/ARCHITECTURE.md, "Errors"). A ``bool`` is
never a number here (``True`` is not a count), and a number (a price, a factor, a fraction) is finite.

    >>> positive_int(3, "top_k")
    3
    >>> positive_int(True, "top_k")
    Traceback (most recent call last):
    ...
    ValueError: top_k must be an int >= 1, got True
    >>> one_of("late", "layout", ("append", "late"))
    'late'

``member`` is :func:`one_of` for a vocabulary (an enum): it returns the member for the member or its value.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Collection
from typing import TypeVar

__all__ = [
    "fraction",
    "int_at_least",
    "int_in_range",
    "member",
    "non_negative_int",
    "number_at_least",
    "one_of",
    "positive_int",
]

T = TypeVar("T")
E = TypeVar("E", bound=enum.Enum)


def int_at_least(value: object, name: str, low: int) -> int:
    """``value`` if it is an int (not a bool) ``>= low``, else a ``ValueError`` naming ``name``."""
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise ValueError(f"{name} must be an int >= {low}, got {value!r}")
    return value


def positive_int(value: object, name: str) -> int:
    """A count of at least one: an int (not a bool) ``>= 1``."""
    return int_at_least(value, name, 1)


def non_negative_int(value: object, name: str) -> int:
    """A count that may be zero: an int (not a bool) ``>= 0``."""
    return int_at_least(value, name, 0)


def int_in_range(value: object, name: str, low: int, high: int) -> int:
    """An int (not a bool) in ``[low, high]``."""
    if not isinstance(value, int) or isinstance(value, bool) or not low <= value <= high:
        raise ValueError(f"{name} must be an int in [{low}, {high}], got {value!r}")
    return value


def _finite_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def number_at_least(value: object, name: str, low: float) -> float:
    """A finite number (not a bool) ``>= low``, as a float: a price, a factor."""
    if not _finite_number(value) or value < low:  # type: ignore[operator]
        raise ValueError(f"{name} must be a number >= {low}, got {value!r}")
    return float(value)  # type: ignore[arg-type]


def fraction(value: object, name: str) -> float:
    """A finite number (not a bool) in ``[0, 1]``, as a float."""
    if not _finite_number(value) or not 0 <= value <= 1:  # type: ignore[operator]
        raise ValueError(f"{name} must be a fraction in [0, 1], got {value!r}")
    return float(value)  # type: ignore[arg-type]


def one_of(value: T, name: str, choices: Collection[T]) -> T:
    """``value`` if it is one of ``choices``, else a ``ValueError`` listing them."""
    if value not in choices:
        raise ValueError(f"{name} must be one of {tuple(choices)}, got {value!r}")
    return value


def member(vocabulary: type[E], value: object, name: str) -> E:
    """``value`` (a member of ``vocabulary`` or its value) as the member, else a ``ValueError`` listing the
    values: ``policy must be 'affinity' or 'round_robin', got 'x'``."""
    try:
        return vocabulary(value)
    except ValueError:
        allowed = " or ".join(repr(m.value) for m in vocabulary)
        raise ValueError(f"{name} must be {allowed}, got {value!r}") from None
