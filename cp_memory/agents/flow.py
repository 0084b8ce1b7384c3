"""The two thin drivers of an I/O-free flow (the httpx / sans-I/O shape).

A *flow* is a generator written once, with no I/O: it yields an :class:`EngineCall` whenever it needs an
engine answer and a :class:`RouterStep` whenever it routes or releases a worker (a router with a state
store talks to it), receives the answer through ``send`` (or the exception through ``throw``), and finally
returns its result. :func:`drive` makes the calls with sync clients and the router's sync methods,
:func:`adrive` with async clients and the router's ``a``-methods; the two differ only in ``await``. The
decisions (which worker, releasing it, error mapping, the conversation's commit/rollback) all live in the
flow (:meth:`cp_memory.agents.ChainOfAgents.flow`).
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, TypeVar

from .records import FlowStep

__all__ = ["Flow", "adrive", "drive"]

T = TypeVar("T")

#: a flow: yields engine calls and router steps, is sent their results, returns ``T``
Flow = Generator[FlowStep, Any, T]


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
