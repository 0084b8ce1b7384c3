"""One search flow for sync and async mem0: a generator that yields the I/O it needs.

:func:`search_flow` is the whole search, written once. It never calls mem0: it yields a request
(:class:`Mem0Search`, :class:`Mem0Admit` or :class:`Mem0Get`) and receives the answer (or the exception,
thrown back in). With a shared state store (``state_store=``) it also yields the store's requests
(:mod:`cp_memory.state.ops`: read, compare-and-set write, delete).
:func:`drive_search` runs it against a sync mem0 and a sync store, :func:`adrive_search` against an async mem0
and an async store (redis.asyncio: the event loop runs other tasks while Redis answers or times out) — the two
drivers are the only code that differs between ``ContextPilotMemory`` and ``AsyncContextPilotMemory`` (httpx's way).
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Generator, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..core.drive import adrive_flow, drive_flow
from ..state.ops import AsyncStateStore, StoreRequest, aanswer, answer
from ..state.store import StateStore
from .calls import SearchCall
from .filters import StoredCopy
from .pipeline import Aligned, SearchPipeline

__all__ = ["Mem0Admit", "Mem0Get", "Mem0Search", "adrive_search", "drive_search", "search_flow"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Mem0Search:
    args: tuple[Any, ...]
    kwargs: dict[str, Any]


@dataclass(frozen=True)
class Mem0Get:
    memory_id: Any


@dataclass(frozen=True)
class Mem0Admit:
    """Which of ``memory_ids`` does the store match for ``filters`` now? Answer: id -> current payload of
    each admitted one (:func:`.admission.admitted_payloads`), or None when the store cannot decide."""

    memory_ids: tuple[str, ...]
    filters: Mapping[str, Any]


Request = Mem0Search | Mem0Admit | Mem0Get | StoreRequest
_STORE_REQUESTS = StoreRequest.__args__  # type: ignore[attr-defined]
Flow = Generator[Request, Any, Any]
Key = tuple[Hashable, str]


def _current_copies(pipeline: SearchPipeline, aligned: Aligned) -> Generator[Request, Any, dict[Key, StoredCopy]]:
    """The current stored copy of each proposed extra the store admits for the caller's filters (one store
    call per search); where the store cannot decide, mem0 ``get`` for each, if the scope allows it."""
    keys = aligned.extra_keys
    if not keys:
        return {}
    call = aligned.window.plan.call
    ids = tuple(dict.fromkeys(str(k[0]) for k in keys))
    try:
        admitted = yield Mem0Admit(ids, dict(call.filters or {}))
    except Exception:
        logger.warning("the store could not check extras %s against the caller's filters; left out", ids, exc_info=True)
        return {}
    if admitted is not None:  # the store decided: what it left out is outside the caller's filters now
        refused = [i for i in ids if i not in admitted]
        if refused:
            logger.warning(
                "superset/swap alignment proposed memories %s outside the caller's filters (%s) or deleted; left out",
                refused,
                call.scope,
            )
        return {k: StoredCopy.of_payload(k[0], admitted[str(k[0])]) for k in keys if str(k[0]) in admitted}
    if not pipeline.reads_extras(aligned):
        logger.debug("superset/swap extras refused: the store cannot check filters beyond entity ids")
        return {}
    copies: dict[Key, StoredCopy] = {}
    for key in keys:
        try:
            item = yield Mem0Get(key[0])
        except Exception:
            logger.warning("could not read extra memory %s; left out", key[0], exc_info=True)
            continue
        copy = StoredCopy.of_item(item)
        if copy is not None:
            copies[key] = copy
    return copies


def search_flow(pipeline: SearchPipeline, call: SearchCall, conversation_id: Any) -> Flow:
    """The search: mem0 ``search`` (errors propagate: they are the caller's), then alignment, extras
    verification (the store, then :func:`.filters.admits`), dedup and rendering (errors fall back to
    mem0's order)."""
    try:
        return (yield from _search(pipeline, call, conversation_id))
    finally:
        pipeline.done()


def _search(pipeline: SearchPipeline, call: SearchCall, conversation_id: Any) -> Flow:
    plan = yield from pipeline.plan_op(call, conversation_id)
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
        aligned = yield from pipeline.align_op(window)
        copies = yield from _current_copies(pipeline, aligned)
        extras = {}
        for key in aligned.extra_keys:
            block = pipeline.check_extra(aligned, key, copies.get(key))
            if block is not None:
                extras[key] = block
        return (yield from pipeline.finish_op(aligned, extras))
    except Exception as exc:
        logger.exception("ContextPilot alignment/dedup failed; returning mem0's own order")
        return pipeline.fallback(plan, response, exc)


def _answer(request: Request, search: Callable[..., Any], get: Callable[[Any], Any], admit: Any) -> Any:
    if isinstance(request, Mem0Search):
        return search(*request.args, **request.kwargs)
    if isinstance(request, Mem0Admit):
        return None if admit is None else admit(request.memory_ids, request.filters)
    if isinstance(request, Mem0Get):
        return get(request.memory_id)
    raise TypeError(f"{type(request).__name__} is answered by the driver's store, and this flow has none")


def drive_search(
    flow: Flow,
    search: Callable[..., Any],
    get: Callable[[Any], Any],
    admit: Callable[[Sequence[str], Mapping[str, Any]], Any] | None = None,
    store: StateStore | None = None,
) -> Any:
    """Run ``flow`` with sync mem0 calls (already wrapped in retries by the caller); ``admit``: the store
    check (:func:`.admission.store_admission`), None where the store cannot be asked; ``store``: the shared
    state store's sync side (None: the wrapper has none)."""

    def answer_one(request: Request) -> Any:
        if isinstance(request, _STORE_REQUESTS) and store is not None:
            return answer(store, request)
        return _answer(request, search, get, admit)

    return drive_flow(flow, answer_one, throws=Exception)


async def adrive_search(
    flow: Flow,
    search: Callable[..., Awaitable[Any]],
    get: Callable[[Any], Awaitable[Any]],
    admit: Callable[[Sequence[str], Mapping[str, Any]], Awaitable[Any]] | None = None,
    store: AsyncStateStore | None = None,
) -> Any:
    """Run ``flow`` with async mem0 calls and the shared store's async side: :func:`drive_search` with
    ``await``."""

    async def answer_one(request: Request) -> Any:
        if isinstance(request, _STORE_REQUESTS) and store is not None:
            return await aanswer(store, request)
        pending = _answer(request, search, get, admit)
        return None if pending is None else await pending

    return await adrive_flow(flow, answer_one, throws=Exception)
