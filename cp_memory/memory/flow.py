"""One search flow for sync and async mem0: a generator that yields the I/O it needs.

:func:`search_flow` is the whole search, written once. It never calls mem0: it yields a request
(:class:`Mem0Search` or :class:`Mem0Get`) and receives the answer (or the exception, thrown back in).
:func:`drive` runs it against a sync mem0 and :func:`adrive` against an async one — the two drivers are the
only code that differs between ``ContextPilotMemory`` and ``AsyncContextPilotMemory`` (httpx's way).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Generator
from dataclasses import dataclass
from typing import Any

from .calls import SearchCall
from .pipeline import SearchPipeline

__all__ = ["Mem0Get", "Mem0Search", "adrive", "drive", "search_flow"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Mem0Search:
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


@dataclass(frozen=True)
class Mem0Get:
    memory_id: Any


Request = Mem0Search | Mem0Get
Flow = Generator[Request, Any, Any]


def search_flow(pipeline: SearchPipeline, call: SearchCall, conversation_id: Any) -> Flow:
    """The search: mem0 ``search`` (errors propagate: they are the caller's), then alignment, extras
    verification, dedup and rendering (errors fall back to mem0's order)."""
    plan = pipeline.plan(call, conversation_id)
    args, kwargs = call.with_top_k(plan.fetch_k)
    response = yield Mem0Search(args, kwargs)
    try:
        window = pipeline.window(plan, response)
        if window is None:
            return pipeline.fallback(plan, response, None)
        refetch = pipeline.refetch_k(window)
        if refetch is not None:  # same-text copies left the window short: ask once for more
            args, kwargs = call.with_top_k(refetch)
            try:
                response = yield Mem0Search(args, kwargs)
            except Exception:
                logger.warning("mem0 search for more results failed; using the first answer", exc_info=True)
            else:
                plan = type(plan)(plan.call, plan.conversation, refetch)
                window = pipeline.window(plan, response) or window
        aligned = pipeline.align(window)
        extras = {}
        for key in aligned.extra_keys:
            try:
                item = yield Mem0Get(key[0])
            except Exception:
                logger.warning("could not read extra memory %s; left out", key[0], exc_info=True)
                continue
            block = pipeline.check_extra(aligned, key, item)
            if block is not None:
                extras[key] = block
        return pipeline.finish(aligned, extras)
    except Exception as exc:
        logger.exception("ContextPilot alignment/dedup failed; returning mem0's own order")
        return pipeline.fallback(plan, response, exc)


def drive(flow: Flow, search: Callable[..., Any], get: Callable[[Any], Any]) -> Any:
    """Run ``flow`` with sync mem0 calls (already wrapped in retries by the caller)."""
    try:
        request = next(flow)
        while True:
            try:
                answer = (
                    search(*request.args, **request.kwargs)
                    if isinstance(request, Mem0Search)
                    else get(request.memory_id)
                )
            except Exception as exc:
                request = flow.throw(exc)
            else:
                request = flow.send(answer)
    except StopIteration as stop:
        return stop.value


async def adrive(flow: Flow, search: Callable[..., Awaitable[Any]], get: Callable[[Any], Awaitable[Any]]) -> Any:
    """Run ``flow`` with async mem0 calls: :func:`drive` with ``await``."""
    try:
        request = next(flow)
        while True:
            try:
                answer = await (
                    search(*request.args, **request.kwargs)
                    if isinstance(request, Mem0Search)
                    else get(request.memory_id)
                )
            except Exception as exc:
                request = flow.throw(exc)
            else:
                request = flow.send(answer)
    except StopIteration as stop:
        return stop.value
