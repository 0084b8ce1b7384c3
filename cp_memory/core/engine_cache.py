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

from collections.abc import Hashable
from typing import Protocol, runtime_checkable

from .index import ContextIndex

__all__ = ["EngineCache"]


@runtime_checkable
class EngineCache(Protocol):
    """An engine's KV-cache feed as index owners use it (see the module docstring)."""

    def attach(self, index: ContextIndex) -> None:
        """Let ``index`` follow the engine: its capacity model is paused while the feed is healthy."""
        ...

    def detach(self, index: ContextIndex) -> None:
        """Stop following: ``index`` keeps its capacity model from now on, and its requests are untracked."""
        ...

    def track_text(self, index: ContextIndex, request_id: Hashable, text: str) -> None:
        """``request_id`` (live in ``index``) counts on the engine caching ``text``: the block section of a
        prompt that was (or is about to be) sent, wherever it sits in that prompt. Never blocks on I/O."""
        ...

    def untrack(self, index: ContextIndex, request_id: Hashable) -> None:
        """``request_id`` left ``index`` by other means (rolled back, evicted): stop watching it."""
        ...
