"""Records of a Chain-of-Agents run: what the chain will run (:class:`CoAPlan`), one engine request
(:class:`EngineCall`), per-call statistics, results and errors. No I/O here."""

from __future__ import annotations

import inspect
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import KW_ONLY, dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

from cp_memory.core.blocks import ContextBlock
from cp_memory.core.dedup import DedupResult

from .errors import ChainOfAgentsError, Role
from .routes import Route, RouteReason
from .segment import Segment

__all__ = [
    "AsyncCompletionClient",
    "CallStats",
    "ChainOfAgentsError",
    "CoAPlan",
    "CoAQuery",
    "CoAResult",
    "CompletionLike",
    "EngineCall",
    "FlowStep",
    "Role",
    "RouterStep",
    "SyncCompletionClient",
]


@runtime_checkable
class CompletionLike(Protocol):
    """What a completion result must expose (:class:`cp_memory.engine.CompletionResult` does)."""

    text: str
    ttft_s: float
    total_s: float
    prompt_tokens: int | None
    cached_tokens: int | None
    completion_tokens: int | None


class SyncCompletionClient(Protocol):
    """:class:`cp_memory.engine.EngineClient`'s ``complete``."""

    def complete(
        self,
        prompt: str,
        *,
        max_tokens: int = ...,
        temperature: float = ...,
        request_id: str | None = ...,
        stop: str | Sequence[str] | None = ...,
    ) -> CompletionLike: ...


class AsyncCompletionClient(Protocol):
    """:class:`cp_memory.engine.AsyncEngineClient`'s ``complete``."""

    async def complete(
        self,
        prompt: str,
        *,
        max_tokens: int = ...,
        temperature: float = ...,
        request_id: str | None = ...,
        stop: str | Sequence[str] | None = ...,
    ) -> CompletionLike: ...


@dataclass(frozen=True, kw_only=True)
class EngineCall:
    """One request the I/O-free chain asks its driver to send: ``client.<method>(payload, **kwargs)``.

    :meth:`sync_method` / :meth:`async_method` return the bound method after checking that the client
    is of the driver's kind, so the two drivers differ only in ``await``.
    """

    client: Any
    method: Literal["complete", "chat"]
    payload: Any
    kwargs: Mapping[str, Any]
    worker_name: str

    def _method(self) -> Any:
        fn = getattr(self.client, self.method, None)
        if fn is None:
            raise TypeError(f"{self.worker_name}'s client has no {self.method}() method")
        return fn

    def sync_method(self) -> Any:
        fn = self._method()
        if inspect.iscoroutinefunction(fn):
            raise TypeError(f"{self.worker_name} has an async client; use aanswer()/aanswer_many() with async clients")
        return fn

    def async_method(self) -> Any:
        fn = self._method()
        if not inspect.iscoroutinefunction(fn):
            raise TypeError(f"{self.worker_name} has a sync client; use answer()/answer_many() with sync clients")
        return fn


@dataclass(frozen=True)
class RouterStep:
    """One call the I/O-free chain asks its driver to make on its router: ``route`` or ``release``.

    The sync driver calls ``router.route`` / ``router.release``; the async driver awaits ``router.aroute`` /
    ``router.arelease``, so a router with a ``state_store`` never blocks the event loop while the store
    answers (:mod:`cp_memory.agents.routing`). Same shape as :class:`EngineCall`: the drivers treat both alike.
    """

    router: Any
    method: Literal["route", "release"]
    payload: Any
    kwargs: Mapping[str, Any]

    def sync_method(self) -> Any:
        return getattr(self.router, self.method)

    def async_method(self) -> Any:
        return getattr(self.router, "a" + self.method)


#: what a chain's flow yields: an engine call, or a step on its router
FlowStep = EngineCall | RouterStep


@dataclass(frozen=True, kw_only=True)
class CallStats:
    """One engine call of a chain: a worker (``role="worker"``, ``step`` = segment position) or the manager.

    ``route`` is the router's :class:`~cp_memory.agents.RouteReason`, or ``RouteReason.DEDICATED`` for a call
    to the chain's dedicated manager client (``worker`` is then -1).

    ``predicted_cached_tokens`` is what the router's cache model expected the engine to reuse (segment
    tokens only, estimated); ``cached_tokens``/``prompt_tokens`` are what the engine reported.
    """

    role: Role
    step: int
    worker: int
    worker_name: str
    route: RouteReason
    request_id: str
    block_ids: tuple[Hashable, ...]
    segment_tokens: int
    predicted_cached_tokens: int
    ttft_s: float
    total_s: float
    prompt_tokens: int | None
    cached_tokens: int | None
    completion_tokens: int | None
    output: str

    @classmethod
    def of(
        cls, *, role: Role, step: int, route: Route | None, seg: Segment | None, res: Any, manager_name: str
    ) -> CallStats:
        """The record of one answered call: ``route`` is None for a dedicated manager client."""
        return cls(
            role=role,
            step=step,
            worker=route.worker if route is not None else -1,
            worker_name=route.worker_name if route is not None else manager_name,
            route=route.reason if route is not None else RouteReason.DEDICATED,
            request_id=route.request_id if route is not None else str(getattr(res, "request_id", "") or ""),
            block_ids=seg.ids if seg is not None else (),
            segment_tokens=seg.tokens if seg is not None else 0,
            predicted_cached_tokens=route.matched_tokens if route is not None else 0,
            ttft_s=float(res.ttft_s),
            total_s=float(res.total_s),
            prompt_tokens=res.prompt_tokens,
            cached_tokens=res.cached_tokens,
            completion_tokens=res.completion_tokens,
            output=res.text,
        )


@dataclass(frozen=True, kw_only=True)
class CoAResult:
    """A question's answer, its CU trace (one CU per worker, chain order) and every engine call."""

    question: str
    answer: str
    cus: tuple[str, ...]
    calls: tuple[CallStats, ...]
    segments: tuple[Segment, ...]
    wall_s: float
    conversation_id: Hashable | None = None
    turn: int | None = None
    duplicates: tuple[Hashable, ...] = ()
    annotations: tuple[str, ...] = ()
    tag: Hashable | None = None

    @property
    def worker_calls(self) -> tuple[CallStats, ...]:
        return tuple(c for c in self.calls if c.role == "worker")

    @property
    def manager_call(self) -> CallStats:
        return next(c for c in self.calls if c.role == "manager")

    @property
    def prompt_tokens(self) -> int:
        return sum(c.prompt_tokens or 0 for c in self.calls)

    @property
    def cached_tokens(self) -> int:
        return sum(c.cached_tokens or 0 for c in self.calls)


@dataclass(frozen=True)
class CoAQuery:
    """One question for :meth:`ChainOfAgents.answer_many`: ``CoAQuery(question, blocks, conversation_id=...,
    tag=...)``; ``tag`` is copied to the result or error."""

    question: str
    blocks: tuple[ContextBlock, ...]
    _: KW_ONLY
    conversation_id: Hashable | None = None
    tag: Hashable | None = None


@dataclass(frozen=True, kw_only=True)
class CoAPlan:
    """What a chain will run: segments in chain order and the text the first worker gets as its
    "previous" summary (in a conversation: earlier turns' CUs and location annotations).

    ``dedup`` is the conversation's *pending* de-duplication of this turn (None outside a
    conversation): :meth:`ChainOfAgents.run` commits it when the chain succeeds and rolls it back when
    it fails, so a failed turn never makes later turns point at documents no model has read.
    """

    question: str
    segments: tuple[Segment, ...]
    first_cu: str
    conversation_id: Hashable | None
    turn: int | None
    duplicates: tuple[Hashable, ...]
    annotations: tuple[str, ...]
    tag: Hashable | None
    dedup: DedupResult | None = field(default=None, compare=False, repr=False)
