"""The one driver loop of an I/O-free flow (the httpx / sans-I/O shape), sync and async.

A *flow* is a generator written once, with no I/O: it yields a request whenever it needs something from the
outside (a mem0 search, a store read, an engine call, a router step), is sent the answer (or, where the driver
is told so, thrown the exception the answer raised), and finally returns its result. Every package drives its
flows through :func:`drive_flow` or :func:`adrive_flow`; each passes the one function that answers its requests, so the
two drivers differ from each other only in ``await`` and from package to package only in that function.

>>> def double_then_add():
...     a = yield "first"
...     b = yield "second"
...     return 2 * a + b
>>> drive_flow(double_then_add(), {"first": 10, "second": 1}.__getitem__)
21
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator
from typing import Any, TypeVar

__all__ = ["adrive_flow", "drive_flow"]

R = TypeVar("R")
T = TypeVar("T")

#: which exceptions of an answer go back into the flow (where it asked); the others leave the driver
Throws = type[BaseException] | tuple[type[BaseException], ...]


def drive_flow(flow: Generator[R, Any, T], answer: Callable[[R], Any], *, throws: Throws = BaseException) -> T:
    """Run ``flow`` to its end, answering each request with ``answer(request)``.

    An exception of ``answer`` that is an instance of ``throws`` is thrown into the flow where it asked (the
    flow decides: release, roll back, fall back, re-raise); any other leaves the driver as it is. Pass
    ``throws=()`` for a flow that never handles its requests' failures.
    """
    try:
        request = next(flow)
        while True:
            try:
                got = answer(request)
            except throws as exc:
                request = flow.throw(exc)
            else:
                request = flow.send(got)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


async def adrive_flow(
    flow: Generator[R, Any, T], answer: Callable[[R], Awaitable[Any]], *, throws: Throws = BaseException
) -> T:
    """:func:`drive_flow` with ``await answer(request)``: other tasks run while a request is answered."""
    try:
        request = next(flow)
        while True:
            try:
                got = await answer(request)
            except throws as exc:
                request = flow.throw(exc)
            else:
                request = flow.send(got)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
