"""The two thin drivers of an I/O-free flow (the httpx / sans-I/O shape).

A *flow* is a generator written once, with no I/O: it yields an :class:`EngineCall` whenever it needs an
engine answer and a :class:`RouterStep` whenever it routes or releases a worker (a router with a state
store talks to it), receives the answer through ``send`` (or the exception through ``throw``), and finally
returns its result. :func:`drive` makes the calls with sync clients and the router's sync methods,
:func:`adrive` with async clients and the router's ``a``-methods, both through the one driver loop
(:mod:`cp_memory.core.drive`). The decisions (which worker, releasing it, error mapping, the conversation's
commit/rollback) all live in the flow (:meth:`cp_memory.agents.ChainOfAgents.flow`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Generator
from typing import Any, TypeVar

from ..core.drive import adrive_flow, drive_flow
from .records import FlowStep

__all__ = ["Flow", "adrive", "drive"]

T = TypeVar("T")

#: a flow: yields engine calls and router steps, is sent their results, returns ``T``
Flow = Generator[FlowStep, Any, T]


def _answer(call: FlowStep) -> Any:
    return call.sync_method()(call.payload, **call.kwargs)


def _aanswer(call: FlowStep) -> Awaitable[Any]:
    return call.async_method()(call.payload, **call.kwargs)  # type: ignore[no-any-return]


def drive(flow: Flow[T]) -> T:
    """Run ``flow`` with sync clients; an exception of a call is thrown into the flow (it releases, rolls
    back, maps or re-raises)."""
    return drive_flow(flow, _answer)


async def adrive(flow: Flow[T]) -> T:
    """Run ``flow`` with async clients; an exception of a call is thrown into the flow."""
    return await adrive_flow(flow, _aanswer)
