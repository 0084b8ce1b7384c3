"""What an owner of context indexes needs of an engine's KV-cache feed: one protocol, no I/O.

vLLM and SGLang publish the blocks their prefix cache stores and drops (:mod:`cp_memory.engine.kv_events`).
A *feed* turns that into index evictions: an attached :class:`~cp_memory.core.index.ContextIndex` keeps its
``capacity_tokens`` model paused while the feed is healthy and resumes it when the feed is lost (garbage, a
gap, a dead publisher), and a request tracked with the text of its block section is evicted from its index
as soon as the engine drops one of the blocks that text occupies in the prompt.

The protocol lives here, in the core, because its users sit on different floors: the mem0 wrapper
(``cp_memory.memory``) and ``AgentRouter`` (``cp_memory.agents``) take *any* object with these four
methods, and ``cp_memory.engine`` implements it (:class:`cp_memory.engine.EngineCacheFeed`). Importing the
engine package would pull its HTTP stack (httpx, tenacity) into every mem0 user's import.

The contract for implementations: no method raises for a request's sake and none blocks on I/O —
``track_text`` is called on the caller's search or routing path (tokenising the text is the feed's
business, off that path). Callers still guard every call (a broken feed is logged, never a failed request).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Hashable
from functools import partial
from typing import Protocol, runtime_checkable

from .index import ContextIndex

__all__ = ["EngineCache", "GuardedFeed"]


@runtime_checkable
class EngineCache(Protocol):
    """An engine's KV-cache feed as index owners use it (see the module docstring)."""

    def attach(self, index: ContextIndex) -> None:
        """Let ``index`` follow the engine: its capacity model is paused while the feed is healthy."""
        ...

    def detach(self, index: ContextIndex) -> None:
        """Stop following: ``index`` keeps its capacity model from now on, and its requests are untracked."""
        ...

    def track_text(self, index: ContextIndex, request_id: Hashable, text: str, *, preamble: str | None = None) -> None:
        """``request_id`` (live in ``index``) counts on the engine caching ``text``: the block section of a
        prompt that was (or is about to be) sent. With ``preamble`` (the prompt's text before the section,
        as sent: system prompt, chat-template head, history) the request binds to exactly the chain that
        preamble starts; without it, to the cached chain a prompt holding ``text`` used last. Never blocks
        on I/O."""
        ...

    def untrack(self, index: ContextIndex, request_id: Hashable) -> None:
        """``request_id`` left ``index`` by other means (rolled back, evicted): stop watching it."""
        ...


class GuardedFeed:
    """Every call into one :class:`EngineCache` (or none: every call does nothing), guarded as its callers
    need: a feed that raises is logged on ``logger`` — a warning the first time per kind of call, debug after —
    and the caller goes on with its capacity model, never failing a request. ``owner`` names who follows the
    feed in the log line (e.g. "this index", "the cache model of worker-2")."""

    def __init__(self, feed: EngineCache | None, logger: logging.Logger, owner: str) -> None:
        self.feed = feed
        self._logger = logger
        self._owner = owner
        self._warned: set[str] = set()

    def attach(self, index: ContextIndex) -> None:
        if self.feed is not None:
            self._call("attach", self.feed.attach, index)

    def detach(self, index: ContextIndex) -> None:
        if self.feed is not None:
            self._call("detach", self.feed.detach, index)

    def track(
        self, index: ContextIndex, request_id: Hashable | None, text: str | None, preamble: str | None = None
    ) -> None:
        if self.feed is None or request_id is None or not text:
            return
        if preamble is None:  # a feed written before ``preamble`` existed still works
            self._call("track_text", self.feed.track_text, index, request_id, text)
        else:
            self._call("track_text", partial(self.feed.track_text, preamble=preamble), index, request_id, text)

    def untrack(self, index: ContextIndex, request_id: Hashable | None) -> None:
        if self.feed is not None and request_id is not None:
            self._call("untrack", self.feed.untrack, index, request_id)

    def _call(self, what: str, call: Callable[..., object], *args: object) -> None:
        try:
            call(*args)
        except Exception:
            level = logging.DEBUG if what in self._warned else logging.WARNING
            self._warned.add(what)
            self._logger.log(
                level,
                "the engine's KV-cache feed failed in %s; %s keeps the capacity guess",
                what,
                self._owner,
                exc_info=True,
            )
