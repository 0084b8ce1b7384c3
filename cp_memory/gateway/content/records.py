"""The content stage's per-session state: where each block and chunk the gateway forwarded in full sits in
the history, and one context index per anchor (the exact prompt before a multi-block context).

Kept in the session's :class:`~cp_memory.gateway.sessions.SessionState` (keyed by tenant and session, so
nothing here is ever seen by another tenant or session), bounded by LRU maps, written only when a request
went out (two phases, like :class:`~cp_memory.core.dedup.Deduplicator`): the stage plans against the
committed state and returns a :class:`PendingContent`; :meth:`ContentState.commit` registers it once the
upstream accepted the request. A location is only a hint: before a pointer is emitted the stage checks that
the current request's history still shows the same bytes there (:mod:`cp_memory.gateway.content.dedup`).
"""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

from ...core.index import ContextIndex
from ...core.lru import LRUMap
from ..protocols import Api
from .holders import Path

__all__ = [
    "MAX_ANCHORS",
    "MAX_LOCATIONS",
    "MAX_ORDERS_PER_ANCHOR",
    "ContentState",
    "PendingContent",
    "Where",
    "text_key",
]

#: block and chunk locations a session remembers (each, LRU)
MAX_LOCATIONS = 4096
#: anchors (distinct prompts before a multi-block context) whose context index a session keeps (LRU)
MAX_ANCHORS = 64
#: aligned orders one anchor's index keeps (the oldest is evicted first)
MAX_ORDERS_PER_ANCHOR = 64


def text_key(text: str) -> str:
    """The key of an exact text (byte-identical: no normalisation)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class Where:
    """A span ``[start, end)`` of the string at ``path`` in segment ``segment`` of a forwarded request, and
    the ``label`` a pointer names it by."""

    segment: int
    path: Path
    start: int
    end: int
    label: str


@dataclass(frozen=True)
class PendingContent:
    """What one planned request registers once it went out: block and chunk locations (text key ->
    where), and the aligned orders to index (anchor -> block ids)."""

    blocks: tuple[tuple[str, Where], ...] = ()
    chunks: tuple[tuple[str, Where], ...] = ()
    orders: tuple[tuple[str, tuple[str, ...]], ...] = ()

    def __bool__(self) -> bool:
        return bool(self.blocks or self.chunks or self.orders)


def _new_index() -> ContextIndex:
    return ContextIndex(tail_order="retrieval")


@dataclass
class ContentState:
    """One session's content records (module doc); thread-safe."""

    blocks: LRUMap[tuple[Api, str], Where] = field(default_factory=lambda: LRUMap(MAX_LOCATIONS))
    chunks: LRUMap[tuple[Api, str], Where] = field(default_factory=lambda: LRUMap(MAX_LOCATIONS))
    indexes: LRUMap[tuple[Api, str], ContextIndex] = field(default_factory=lambda: LRUMap(MAX_ANCHORS))
    lock: threading.Lock = field(default_factory=threading.Lock)

    def block(self, api: Api, key: str) -> Where | None:
        return self.blocks.get((api, key))

    def chunk(self, api: Api, key: str) -> Where | None:
        return self.chunks.get((api, key))

    def aligned(self, api: Api, anchor: str, ids: Sequence[str]) -> tuple[Hashable, ...]:
        """The order the anchor's index gives ``ids`` (a permutation of them: exact alignment); changes nothing."""
        index = self.indexes.peek((api, anchor))
        if index is None:
            return tuple(ids)
        return index.match(list(ids)).order

    def commit(self, api: Api, pending: PendingContent) -> None:
        """Register what a request that went out sent in full; an earlier location of the same text is kept."""
        with self.lock:
            for key, where in pending.blocks:
                if self.blocks.peek((api, key)) is None:
                    self.blocks.set((api, key), where)
            for key, where in pending.chunks:
                if self.chunks.peek((api, key)) is None:
                    self.chunks.set((api, key), where)
            for anchor, ids in pending.orders:
                index = self.indexes.get_or_create((api, anchor), _new_index)
                if len(index) >= MAX_ORDERS_PER_ANCHOR:
                    index.evict(index.request_ids()[0])
                index.insert(list(ids))
