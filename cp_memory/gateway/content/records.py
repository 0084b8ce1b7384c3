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

import base64
import binascii
import hashlib
import threading
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

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


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what} {value!r:.20} is not a non-negative int")
    return value


def _str(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what} is not a str")
    return value


def _where_row(api: Api, key: str, w: Where) -> list[Any]:
    return [api.value, key, w.segment, list(w.path), w.start, w.end, w.label]


def _where_of(row: Any) -> tuple[tuple[Api, str], Where]:
    """A located text from its row; ``ValueError`` for anything malformed."""
    if not isinstance(row, list) or len(row) != 7:
        raise ValueError("a location is not a 7-item row")
    api, key, segment, path, start, end, label = row
    if not isinstance(path, list) or not all(isinstance(p, (str, int)) and not isinstance(p, bool) for p in path):
        raise ValueError("a location's path is not a list of str and int")
    where = Where(_int(segment, "segment"), tuple(path), _int(start, "start"), _int(end, "end"), _str(label, "label"))
    if where.end < where.start:
        raise ValueError("a location ends before it starts")
    return (Api(_str(api, "api")), _str(key, "key")), where


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

    def dump(self) -> dict[str, Any]:
        """The records as JSON values, least recently used first (:meth:`load` rebuilds them)."""
        with self.lock:
            return {
                "blocks": [_where_row(api, key, w) for (api, key), w in self.blocks.items()],
                "chunks": [_where_row(api, key, w) for (api, key), w in self.chunks.items()],
                "indexes": [
                    [api.value, anchor, base64.b64encode(index.snapshot()).decode("ascii")]
                    for (api, anchor), index in self.indexes.items()
                ],
            }

    @classmethod
    def load(cls, doc: Any) -> ContentState:
        """The records :meth:`dump` gave; ``ValueError`` for anything malformed (a location is only a hint, checked
        against the request's own bytes before a pointer names it, but its fields must have their types)."""
        if not isinstance(doc, dict):
            raise ValueError("the content records are not an object")
        state = cls()
        for name, target in (("blocks", state.blocks), ("chunks", state.chunks)):
            rows = doc.get(name)
            if not isinstance(rows, list) or len(rows) > MAX_LOCATIONS:
                raise ValueError(f"{name} is not a list of at most {MAX_LOCATIONS} locations")
            for row in rows:
                key, where = _where_of(row)
                target.set(key, where)
        indexes = doc.get("indexes")
        if not isinstance(indexes, list) or len(indexes) > MAX_ANCHORS:
            raise ValueError(f"indexes is not a list of at most {MAX_ANCHORS}")
        for row in indexes:
            if not isinstance(row, list) or len(row) != 3:
                raise ValueError("an index is not a 3-item row")
            api, anchor, data = (_str(v, "an index field") for v in row)
            try:
                snapshot = base64.b64decode(data, validate=True)
            except binascii.Error as exc:
                raise ValueError(f"an index snapshot is not base64: {exc}") from exc
            index = ContextIndex.restore(snapshot, max_requests=MAX_ORDERS_PER_ANCHOR, tail_order="retrieval")
            state.indexes.set((Api(api), anchor), index)
        return state

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
