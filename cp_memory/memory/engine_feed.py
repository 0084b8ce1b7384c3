"""The wrapper's side of an engine's KV-cache feed (``follow_engine``): guarded calls into an ``EngineCache``.

With a feed (:class:`~cp_memory.core.engine_cache.EngineCache`, e.g. :class:`cp_memory.engine.EngineCacheFeed`
on vLLM or SGLang):

* every scope's index is attached — the ones in memory when the wrapper starts following, and every index
  created or restored from a snapshot after — so its ``capacity_tokens`` model is paused while the feed is
  healthy and resumes when it is lost;
* a search's block section (the ``[Doc i]`` lines the prompt shows, :func:`~cp_memory.core.render.render_blocks`)
  is tracked under the search's index request: when its turn is committed (the prompt was sent), or at once
  for a search with nothing to commit (no conversation, or ``commit="on_search"``);
* a rolled-back request, or one the index drops for ``max_requests_per_scope``, is untracked.

Every call into the feed is guarded: a feed that raises is logged (once per kind of call) and the search
goes on with the capacity model, never failing. Nothing here imports the engine package.
"""

from __future__ import annotations

import logging
import weakref
from collections.abc import Callable, Hashable, Sequence

from ..core.blocks import ContextBlock
from ..core.engine_cache import EngineCache, GuardedFeed
from ..core.index import ContextIndex
from ..core.render import render_blocks
from .config import ContextPilotConfig

__all__ = ["EngineFollow"]

logger = logging.getLogger(__name__)


class EngineFollow(GuardedFeed):
    """The feed a wrapper follows (None: none), every call guarded (:class:`GuardedFeed`: ``detach``,
    ``track``, ``untrack`` as they are), plus the wrapper's own part: the block section to track, switching
    feeds, and untracking what leaves an index. Thread-safe as the feed is."""

    def __init__(self, config: ContextPilotConfig) -> None:
        super().__init__(None, logger, "this index")
        self.config = config
        self._subscribed: weakref.WeakSet[ContextIndex] = weakref.WeakSet()

    @property
    def engine(self) -> EngineCache | None:
        return self.feed

    def section(self, blocks: Sequence[ContextBlock]) -> str | None:
        """The block lines of a prompt showing ``blocks``; None when no feed is followed (nothing to track)."""
        if self.feed is None or not blocks:
            return None
        return render_blocks(list(blocks), special_tokens=self.config.special_tokens, labels=self.config.labels)

    def follow(self, engine: EngineCache | None, indexes: Callable[[], list[ContextIndex]]) -> None:
        """Switch to ``engine`` (None: none; its failures warned anew); ``indexes()``, read after the switch
        (an index created meanwhile is attached either way), leave the old feed and join the new one."""
        if engine is not None and not isinstance(engine, EngineCache):
            raise TypeError(
                "follow_engine takes an engine's KV-cache feed (attach, detach, track_text, untrack: "
                f"cp_memory.engine.EngineCacheFeed) or None, got {type(engine).__name__}"
            )
        old = GuardedFeed(self.feed, logger, "this index")
        self.feed, self._warned = engine, set()
        for index in indexes():
            old.detach(index)
            super().attach(index)

    def attach(self, index: ContextIndex) -> None:
        """Attach ``index`` to the feed followed now; the first time, subscribe to its evictions: a request
        that leaves the index (its capacity model, its ``trim`` bound, the engine) is untracked."""
        if index not in self._subscribed:
            self._subscribed.add(index)
            ref = weakref.ref(index)
            index.subscribe(lambda rid: self._untrack_evicted(ref, rid))
        super().attach(index)

    def _untrack_evicted(self, ref: weakref.ref[ContextIndex], request_id: Hashable) -> None:
        index = ref()
        if index is not None:
            self.untrack(index, request_id)
