"""The one driver loop (cp_memory.core.drive): a flow asks, the driver answers; failures go back where asked."""

from __future__ import annotations

import asyncio
from collections.abc import Generator
from typing import Any

import pytest

from cp_memory.core.drive import adrive_flow, drive_flow


class Flaky(Exception):
    pass


def lookup() -> Generator[str, Any, int]:
    """A flow that asks for two keys, falls back to 0 where a lookup fails, and adds them."""
    total = 0
    for key in ("a", "b"):
        try:
            total += yield key
        except Flaky:
            total += 0
    return total


def answer_from(store: dict[str, int]) -> Any:
    def answer(key: str) -> int:
        if key not in store:
            raise Flaky(key)
        return store[key]

    return answer


def test_each_request_is_answered_and_the_flow_returns_its_result() -> None:
    assert drive_flow(lookup(), answer_from({"a": 2, "b": 3})) == 5


def test_a_failure_of_the_kind_named_goes_back_into_the_flow_where_it_asked() -> None:
    assert drive_flow(lookup(), answer_from({"b": 3}), throws=Flaky) == 3


def test_a_failure_of_another_kind_leaves_the_driver() -> None:
    with pytest.raises(Flaky):
        drive_flow(lookup(), answer_from({"b": 3}), throws=KeyError)
    with pytest.raises(Flaky):
        drive_flow(lookup(), answer_from({"b": 3}), throws=())


def test_the_async_driver_is_the_same_loop_with_await() -> None:
    sync_answer = answer_from({"b": 3})

    async def answer(key: str) -> int:
        await asyncio.sleep(0)
        return int(sync_answer(key))

    assert asyncio.run(adrive_flow(lookup(), answer, throws=Flaky)) == 3
    with pytest.raises(Flaky):
        asyncio.run(adrive_flow(lookup(), answer, throws=()))


def test_a_flow_that_asks_nothing_returns_at_once() -> None:
    def nothing() -> Generator[str, Any, str]:
        return "done"
        yield "never"  # pragma: no cover

    assert drive_flow(nothing(), answer_from({})) == "done"
