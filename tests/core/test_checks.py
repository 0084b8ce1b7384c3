"""cp_memory.core.checks: one rule and one wording for every count, fraction and choice of the package."""

from __future__ import annotations

import enum
import math

import pytest

from cp_memory.core.checks import (
    fraction,
    int_in_range,
    member,
    non_negative_int,
    number_at_least,
    one_of,
    positive_int,
)


def test_a_count_is_an_int_and_never_a_bool() -> None:
    assert positive_int(3, "top_k") == 3
    assert non_negative_int(0, "log_every") == 0
    for bad in (True, False, 0, -1, 1.0, "3", None):
        with pytest.raises(ValueError, match=r"top_k must be an int >= 1, got "):
            positive_int(bad, "top_k")
    for bad in (True, -1, 0.0):
        with pytest.raises(ValueError, match="log_every must be an int >= 0"):
            non_negative_int(bad, "log_every")


def test_an_int_in_a_range_names_the_range() -> None:
    assert int_in_range(2, "shared", 0, 3) == 2
    with pytest.raises(ValueError, match=r"shared must be an int in \[0, 3\], got 4"):
        int_in_range(4, "shared", 0, 3)


def test_a_fraction_is_a_finite_number_in_zero_one() -> None:
    assert fraction(1, "protect") == 1.0 and isinstance(fraction(1, "protect"), float)
    for bad in (True, -0.1, 1.5, math.nan, math.inf, "0.5", None):
        with pytest.raises(ValueError, match=r"protect must be a fraction in \[0, 1\]"):
            fraction(bad, "protect")


def test_a_number_at_least_a_bound_is_finite_and_never_a_bool() -> None:
    assert number_at_least(0, "PriceRatios.read", 0) == 0.0 and isinstance(number_at_least(2, "x", 0), float)
    assert number_at_least(1.25, "margin", 1.0) == 1.25
    for bad in (True, -0.1, math.nan, math.inf, "1", None):
        with pytest.raises(ValueError, match=r"PriceRatios.read must be a number >= 0, got "):
            number_at_least(bad, "PriceRatios.read", 0)
    with pytest.raises(ValueError, match=r"margin must be a number >= 1.0, got 0.5"):
        number_at_least(0.5, "margin", 1.0)


def test_one_of_lists_the_choices() -> None:
    assert one_of("late", "layout", ("append", "late")) == "late"
    with pytest.raises(ValueError, match=r"layout must be one of \('append', 'late'\), got 'early'"):
        one_of("early", "layout", ("append", "late"))


class Scope(str, enum.Enum):
    TARGET = "target"
    GLOBAL = "global"


def test_a_vocabulary_takes_its_member_or_its_value() -> None:
    assert member(Scope, "global", "balance_scope") is Scope.GLOBAL
    assert member(Scope, Scope.TARGET, "balance_scope") is Scope.TARGET
    with pytest.raises(ValueError, match=r"balance_scope must be 'target' or 'global', got 'pool'"):
        member(Scope, "pool", "balance_scope")


def test_the_settings_that_share_them_refuse_a_bool() -> None:
    """A block's token count accepted ``True`` before the checks were shared; the LRU's size never did."""
    from cp_memory.core.blocks import ContextBlock
    from cp_memory.core.lru import LRUMap

    with pytest.raises(ValueError, match="block tokens must be an int >= 0, got True"):
        ContextBlock("a", "text", tokens=True)
    with pytest.raises(ValueError, match="capacity must be an int >= 1, got True"):
        LRUMap(True)
