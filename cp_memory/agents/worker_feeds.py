"""The router's per-worker KV-cache feeds: which worker follows its engine, and what each request tracks.

A worker with a feed (:class:`~cp_memory.core.engine_cache.EngineCache`, e.g. :class:`cp_memory.engine.EngineCacheFeed`
on vLLM or SGLang) follows it from its first route given ``text=`` (the segment as the prompt shows it): its
cache model's ``capacity_tokens`` eviction is paused while the feed is healthy. That text is tracked when the
request is released ok (the engine holds its blocks then) and untracked when it failed. A router never given
``text=`` keeps the capacity guess on every worker: nothing would be tracked. Every call into a feed is
guarded (:class:`~cp_memory.core.engine_cache.GuardedFeed`): a feed that raises is logged, routing goes on.
Not thread-safe on its own: :class:`~cp_memory.agents.routing.AgentRouter` calls it under its lock.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from cp_memory.core.engine_cache import EngineCache, GuardedFeed
from cp_memory.core.index import ContextIndex

__all__ = ["WorkerFeeds"]

logger = logging.getLogger("cp_memory.agents.routing")


class WorkerFeeds:
    """One feed (or None) per worker of a router, with the texts of the requests in flight."""

    def __init__(self, feeds: Sequence[EngineCache | None] | None, names: Sequence[str]) -> None:
        out = (None,) * len(names) if feeds is None else tuple(feeds)
        if len(out) != len(names):
            raise ValueError(f"got {len(out)} feeds for {len(names)} workers (None for a worker without one)")
        for i, feed in enumerate(out):
            if feed is not None and not isinstance(feed, EngineCache):
                raise TypeError(
                    f"feeds[{i}] must be an engine's KV-cache feed (cp_memory.engine.EngineCacheFeed) or None, "
                    f"got {type(feed).__name__}"
                )
        self.feeds: tuple[EngineCache | None, ...] = out
        self._guards = tuple(GuardedFeed(f, logger, f"the cache model of {n}") for f, n in zip(out, names))
        self._following = [False] * len(out)  # attached to its feed (from its first route with text)
        self._texts: dict[str, tuple[str, str | None]] = {}  # request id -> (its text, preamble), in flight

    def routed(
        self, worker: int, index: ContextIndex, request_id: str, text: str | None, preamble: str | None = None
    ) -> None:
        """A request was routed to ``worker`` (cache model ``index``): keep ``text`` (and the prompt's
        ``preamble`` before it) to track at release; the worker follows its feed from its first text on."""
        if self.feeds[worker] is None or text is None:
            return
        self._texts[request_id] = (text, preamble)
        if not self._following[worker]:
            self._following[worker] = True
            self._guards[worker].attach(index)

    def released(self, worker: int, index: ContextIndex, request_id: str, ok: bool) -> None:
        """The request finished (``ok``: track its text, the engine has its blocks now) or failed (untrack)."""
        text, preamble = self._texts.pop(request_id, (None, None))
        if ok:
            self._guards[worker].track(index, request_id, text, preamble)
        else:
            self._guards[worker].untrack(index, request_id)
