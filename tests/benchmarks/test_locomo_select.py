"""``--conversations``: which LoCoMo conversations a run takes (benchmarks.common.locomo_select)."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from benchmarks.common.locomo_select import select_conversations

CONVS: list[Any] = [SimpleNamespace(sample_id=f"conv-{26 + i}") for i in range(6)]


def _picked(spec: str) -> list[int]:
    return [i for i, _ in select_conversations(spec, CONVS)]


def test_indices_ranges_and_sample_ids_in_the_order_asked_each_once() -> None:
    assert _picked("all") == [0, 1, 2, 3, 4, 5]
    assert _picked("3") == [3]
    assert _picked("0-3") == [0, 1, 2, 3]
    assert _picked("4, conv-27, 0-1") == [4, 1, 0]
    assert select_conversations("conv-31", CONVS) == [(5, CONVS[5])]


@pytest.mark.parametrize(("spec", "message"), [("7", "out of range"), ("first", "bad conversation")])
def test_a_bad_spec_is_named(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        select_conversations(spec, CONVS)
