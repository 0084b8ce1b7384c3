"""Keep :class:`~cp_memory.core.index.ContextIndex` requests in step with what the engine really holds.

A :class:`KVCacheSync` listens to an engine's KV-cache events (:class:`~.kv_events.KVEventFeed`),
mirrors its blocks (:class:`~.kv_mirror.BlockMirror`) and, for every request a caller *tracks* —
its index, its request id and the prompt tokens whose cache the index counts on (the block section
of the prompt) — evicts the request from its index as soon as the engine removes one of those
blocks. That replaces the ``capacity_tokens`` guess: while the feed is live, attached indexes keep
their capacity model paused (:meth:`ContextIndex.use_capacity_model`); when it is lost (garbage, a
sequence gap, a failing listener) they fall back to it at once, and evictions the feed still
reports are applied as well — a removal is a fact even when others may be missing. No request ever
fails because of the feed: it only ever evicts.

    server = VLLMServer(model, kv_events=True).start()
    sync = KVCacheSync()
    feed = KVEventFeed(server.kv_events_endpoint, sync.apply, on_lost=sync.lost).start()
    index = ContextIndex(capacity_tokens=100_000)       # the fallback model
    sync.attach(index)
    p = index.insert(block_ids, token_lens=lens)
    ... send the prompt ...
    sync.track(index, p.request_id, client.tokenize(block_section_text))

The feed is *live* once it has seen everything since the engine started (sequence 0) or since a
cache clear; before that (a feed attached to a running engine) the capacity model stays on. A tracked
request whose blocks have not been reported yet is *pending*: it is resolved by later events, or
after ``pending_batches`` batches without them it is evicted when one of its blocks was removed in
between (a tombstone) and left to the capacity model otherwise. After a confirmed flush of our own,
call :meth:`KVCacheSync.flushed`: the engine reports the clear only with its next step.

Bounded: the mirror holds at most ``2 x engine_blocks`` blocks (or
:data:`~.kv_mirror.DEFAULT_MAX_BLOCKS` when the engine's block count is not given), ``max_tracked``
requests are watched, and a batch is applied :data:`APPLY_CHUNK` events at a time: callers waiting
for the sync (a new scope's ``attach``, a ``track``) get in between two chunks, not after the batch.
A removal of a block the mirror had forgotten still evicts the requests watching it.
"""

from __future__ import annotations

import enum
import logging
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Hashable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field

from ..core.checks import positive_int
from ..core.index import ContextIndex
from .kv_events import AllBlocksCleared, BlockRemoved, BlockStored, EventBatch, KVEvent
from .kv_mirror import DEFAULT_MAX_BLOCKS, ENGINE_BLOCKS_FACTOR, BlockMirror, Presence

logger = logging.getLogger(__name__)

__all__ = ["APPLY_CHUNK", "EvictionCause", "KVCacheSync", "SyncStats"]

#: events applied under the sync's lock at a time; waiting callers get the lock between two chunks
APPLY_CHUNK = 2048
#: seconds a batch waits at most between two chunks for the callers it lets in
HANDOFF_S = 1.0

WatchKey = tuple[int, Hashable]  # (id(index), request id)


@dataclass
class _Watch:
    index: weakref.ref[ContextIndex]
    request_id: Hashable
    tokens: tuple[int, ...]
    hashes: tuple[Hashable, ...] = ()
    since: int = 0  # batches applied when it became pending
    anchored: bool = True  # tokens from the prompt's first token (else a section anywhere in the prompt)


class EvictionCause(enum.Enum):
    """Why a tracked request left its index (:attr:`SyncStats.causes`)."""

    #: the engine removed one of its blocks (``BlockRemoved``: evicted to make room, or replaced)
    REMOVED = "removed"
    #: its blocks were removed before the events that stored them arrived (a pending request's tombstone)
    REMOVED_WHILE_PENDING = "removed while pending"
    #: the engine reported its cache cleared (``AllBlocksCleared``: a reset of someone else's, or a restart)
    CLEARED = "cleared"
    #: our own confirmed flush (:meth:`KVCacheSync.flushed`)
    FLUSHED = "flushed"


@dataclass
class SyncStats:
    """Counters of one :class:`KVCacheSync` (for logs and benchmark records)."""

    batches: int = 0
    events: int = 0  # events applied
    tracked: int = 0
    evicted: int = 0  # requests evicted from their index because the engine dropped their blocks
    #: ``evicted`` by cause (:class:`EvictionCause` value -> requests)
    causes: dict[str, int] = field(default_factory=dict)
    expired: int = 0  # pending requests given up (left to the capacity model)
    lost: int = 0  # times the feed was lost
    reasons: list[str] = field(default_factory=list)


class KVCacheSync:
    """Engine KV events -> :meth:`ContextIndex.evict` for tracked requests (see the module docstring).

    Thread-safe: :meth:`apply` and :meth:`lost` run on the feed's thread, :meth:`track` on callers'.
    ``max_tracked`` bounds the watched requests (the oldest are dropped, left to the capacity model);
    ``engine_blocks`` (the engine's KV-cache blocks, e.g. vLLM's ``--num-gpu-blocks-override``) bounds the
    mirror at twice that.
    """

    def __init__(
        self,
        *,
        block_size: int | None = None,
        pending_batches: int = 8,
        max_tracked: int = 100_000,
        engine_blocks: int | None = None,
    ) -> None:
        positive_int(pending_batches, "pending_batches")
        positive_int(max_tracked, "max_tracked")
        if engine_blocks is not None:
            positive_int(engine_blocks, "engine_blocks")
        cap = DEFAULT_MAX_BLOCKS if engine_blocks is None else ENGINE_BLOCKS_FACTOR * engine_blocks
        self.mirror = BlockMirror(block_size=block_size, max_blocks=cap)
        self.pending_batches = pending_batches
        self.max_tracked = max_tracked
        self.stats = SyncStats()
        self._lock = threading.RLock()
        self._waiters = 0  # callers waiting for the lock (a batch lets them in between two chunks)
        self._waiters_lock = threading.Lock()
        self._live = False  # in sync with the engine (seen its start or a clear, nothing lost since)
        self._expect_clear = 0  # clears of our own flushes, not yet reported by the engine
        self._indexes: weakref.WeakSet[ContextIndex] = weakref.WeakSet()
        self._watches: OrderedDict[WatchKey, _Watch] = OrderedDict()  # resolved, oldest first
        self._pending: OrderedDict[WatchKey, _Watch] = OrderedDict()
        self._by_hash: dict[Hashable, set[WatchKey]] = {}

    # -- public ----------------------------------------------------------------------------
    @property
    def live(self) -> bool:
        """The feed is complete: attached indexes follow the engine, their capacity model paused."""
        return self._live

    @property
    def tracked(self) -> int:
        """Requests watched, pending ones included."""
        with self._locked():
            return len(self._watches) + len(self._pending)

    @property
    def pending(self) -> int:
        """Tracked requests whose blocks the engine has not reported yet."""
        with self._locked():
            return len(self._pending)

    def attach(self, index: ContextIndex) -> None:
        """Let ``index`` follow the engine: its capacity model is paused while the feed is live."""
        with self._locked():
            self._indexes.add(index)
            index.use_capacity_model(not self._live)

    def detach(self, index: ContextIndex) -> None:
        """Stop following: ``index`` keeps its capacity model from now on; its requests are untracked."""
        with self._locked():
            self._indexes.discard(index)
            mine = [k for k in (*self._watches, *self._pending) if k[0] == id(index)]
            for key in mine:
                self._forget(key)
        index.use_capacity_model(True)

    def track(self, index: ContextIndex, request_id: Hashable, token_ids: Sequence[int] | None) -> bool:
        """``request_id`` (live in ``index``) counts on the engine caching ``token_ids``' full blocks,
        ``token_ids`` being the prompt's tokens from its first one.

        ``token_ids`` of None (``tokenize`` unsupported or failed) or not ints: logged, not tracked
        (``False``); the request stays to the capacity model and nothing is raised."""
        return self._track(index, request_id, token_ids, anchored=True)

    def track_section(self, index: ContextIndex, request_id: Hashable, token_ids: Sequence[int] | None) -> bool:
        """:meth:`track` for a *section* of the prompt, tokenised alone (its block lines), wherever it
        sits after a system prompt, a chat template or a history this caller does not know
        (:meth:`~.kv_mirror.BlockMirror.find_section`): the request is watched on the cached chain that
        holds the section — its ancestors included, since the engine reuses a block only after them."""
        return self._track(index, request_id, token_ids, anchored=False)

    def _track(
        self, index: ContextIndex, request_id: Hashable, token_ids: Sequence[int] | None, *, anchored: bool
    ) -> bool:
        if token_ids is None or isinstance(token_ids, (str, bytes)):
            logger.warning("request %r not tracked: no token ids", request_id)
            return False
        try:
            tokens = tuple(int(t) for t in token_ids)
            hash(request_id)
        except (TypeError, ValueError) as exc:
            logger.warning("request %r not tracked: %s", request_id, exc)
            return False
        key: WatchKey = (id(index), request_id)
        with self._locked():
            self._forget(key)
            self.stats.tracked += 1
            watch = _Watch(weakref.ref(index), request_id, tokens, since=self.stats.batches, anchored=anchored)
            self._resolve(key, watch, expire=False)
            while len(self._watches) + len(self._pending) > self.max_tracked:
                oldest = next(iter(self._watches or self._pending))
                self._forget(oldest)
        return True

    def untrack(self, index: ContextIndex, request_id: Hashable) -> None:
        with self._locked():
            self._forget((id(index), request_id))

    def flushed(self, *, clear_indexes: bool = False) -> None:
        """We flushed the engine (it confirmed): every tracked request is gone; the engine's own
        ``AllBlocksCleared`` for this flush, reported with its next step, is then expected.
        ``clear_indexes``: every attached index is emptied too (its untracked requests as well: the engine
        holds nothing any more); their subscribers hear of each request."""
        with self._locked():
            self._evict_all(EvictionCause.FLUSHED)
            self.mirror.clear()
            self._expect_clear += 1
            self._set_live(True)
            indexes = list(self._indexes) if clear_indexes else []
        for index in indexes:  # outside the sync's lock: an index's subscribers may call back into the feed
            index.clear()

    def apply(self, batch: EventBatch) -> None:
        """The feed's ``on_batch``: apply a batch of events, evict what the engine dropped
        (:data:`APPLY_CHUNK` events at a time, letting waiting callers in between)."""
        with self._locked():
            self.stats.batches += 1
            if batch.seq == 0 and not any(isinstance(e, AllBlocksCleared) for e in batch.events):
                self._set_live(True)  # the engine's first batch: we have seen all of its history
        stored = False
        events = batch.events
        for start in range(0, len(events), APPLY_CHUNK):
            if start:
                self._let_waiters_in()
            with self._locked():
                for event in events[start : start + APPLY_CHUNK]:
                    stored = self._apply_event(event) or stored
                self.stats.events += min(APPLY_CHUNK, len(events) - start)
        with self._locked():
            if self._pending:
                self._retry_pending(stored)

    def lost(self, reason: str) -> None:
        """The feed's ``on_lost``: attached indexes fall back to their capacity model."""
        with self._locked():
            self.stats.lost += 1
            if len(self.stats.reasons) < 20:
                self.stats.reasons.append(reason)
            self._set_live(False)

    # -- internals ---------------------------------------------------------------------------
    @contextmanager
    def _locked(self) -> Iterator[None]:
        """The sync's lock, counted as waited for until held (:meth:`apply` lets waiters in first)."""
        with self._waiters_lock:
            self._waiters += 1
        try:
            self._lock.acquire()
        finally:
            with self._waiters_lock:
                self._waiters -= 1
        try:
            yield
        finally:
            self._lock.release()

    def _let_waiters_in(self) -> None:
        """Between two chunks of a batch (the lock not held): wait until the callers waiting got the lock."""
        deadline = time.monotonic() + HANDOFF_S
        while self._waiters and time.monotonic() < deadline:
            time.sleep(0.0005)

    def _apply_event(self, event: KVEvent) -> bool:
        """One event, under the lock; returns whether it stored blocks."""
        if isinstance(event, AllBlocksCleared):
            self.mirror.apply(event)
            if self._expect_clear:
                self._expect_clear -= 1  # our flush: already evicted in flushed()
            else:
                self._evict_all(EvictionCause.CLEARED)
            self._set_live(True)
            return False
        removed = self.mirror.apply(event)
        if isinstance(event, BlockRemoved) and self.mirror.follows(event):
            removed = list(event.block_hashes)  # forgotten by the bounded mirror or not: watchers go
        for h in removed:
            for key in list(self._by_hash.get(h, ())):
                self._evict(key, EvictionCause.REMOVED)
        return isinstance(event, BlockStored)

    def _set_live(self, live: bool) -> None:
        if live == self._live:
            return
        self._live = live
        for index in list(self._indexes):
            index.use_capacity_model(not live)
        if live:
            logger.info("KV-event feed live: indexes follow the engine's evictions")

    def _resolve(self, key: WatchKey, watch: _Watch, *, expire: bool) -> None:
        found = self.mirror.lookup(watch.tokens) if watch.anchored else self.mirror.find_section(watch.tokens)
        if found.presence is Presence.HELD:
            watch.hashes = found.hashes
            self._pending.pop(key, None)
            self._watches[key] = watch
            for h in found.hashes:
                self._by_hash.setdefault(h, set()).add(key)
            return
        if not expire:
            self._pending[key] = watch
            return
        self._pending.pop(key, None)
        if found.presence is Presence.REMOVED:
            self._evict_request(watch, EvictionCause.REMOVED_WHILE_PENDING)
        else:
            self.stats.expired += 1
            logger.debug("no KV events for request %r after %d batches", watch.request_id, self.pending_batches)

    def _retry_pending(self, stored: bool) -> None:
        now = self.stats.batches
        for key, watch in list(self._pending.items()):
            expire = now - watch.since >= self.pending_batches
            if stored or expire:
                self._resolve(key, watch, expire=expire)

    def _forget(self, key: WatchKey) -> _Watch | None:
        self._pending.pop(key, None)
        watch = self._watches.pop(key, None)
        if watch is not None:
            for h in watch.hashes:
                keys = self._by_hash.get(h)
                if keys is not None:
                    keys.discard(key)
                    if not keys:
                        del self._by_hash[h]
        return watch

    def _evict(self, key: WatchKey, cause: EvictionCause) -> None:
        watch = self._forget(key)
        if watch is not None:
            self._evict_request(watch, cause)

    def _evict_request(self, watch: _Watch, cause: EvictionCause) -> None:
        index = watch.index()
        if index is not None and index.evict(watch.request_id):
            self.stats.evicted += 1
            self.stats.causes[cause.value] = self.stats.causes.get(cause.value, 0) + 1
            logger.debug("request %r evicted from its index: %s", watch.request_id, cause.value)

    def _evict_all(self, cause: EvictionCause) -> None:
        watches = list(self._watches.values()) + list(self._pending.values())
        self._watches.clear()
        self._pending.clear()
        self._by_hash.clear()
        for watch in watches:
            self._evict_request(watch, cause)
