"""The two thin drivers of an I/O-free flow (the httpx / sans-I/O shape).

A *flow* is a generator written once, with no I/O: it yields an :class:`EngineCall` whenever it needs an
engine answer, receives the answer through ``send`` (or the exception through ``throw``), and finally
returns its result. :func:`drive` sends the calls with sync clients, :func:`adrive` with async clients;
the two differ only in ``await``. Routing, releasing workers, error mapping and the conversation's
commit/rollback all live in the flow (:meth:`cp_memory.agents.ChainOfAgents.flow`).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, TypeVar

from .records import EngineCall

__all__ = ["Flow", "adrive", "drive"]

T = TypeVar("T")

#: a flow: yields engine calls, is sent their results, returns ``T``
Flow = Generator[EngineCall, Any, T]


def drive(flow: Flow[T]) -> T:
    """Run ``flow`` with sync clients; an exception of a call is thrown into the flow."""
    try:
        call = next(flow)
        while True:
            try:
                result = call.sync_method()(call.payload, **call.kwargs)
            except BaseException as exc:  # noqa: BLE001 - the flow decides: release, roll back, map, re-raise
                call = flow.throw(exc)
            else:
                call = flow.send(result)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]


async def adrive(flow: Flow[T]) -> T:
    """Run ``flow`` with async clients; an exception of a call is thrown into the flow."""
    try:
        call = next(flow)
        while True:
            try:
                result = await call.async_method()(call.payload, **call.kwargs)
            except BaseException as exc:  # noqa: BLE001 - the flow decides: release, roll back, map, re-raise
                call = flow.throw(exc)
            else:
                call = flow.send(result)
    except StopIteration as stop:
        return stop.value  # type: ignore[no-any-return]
