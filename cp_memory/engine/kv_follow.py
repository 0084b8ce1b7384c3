"""``EngineCacheFeed``: an engine's KV-event feed, ready for the mem0 wrapper and ``AgentRouter`` to follow.

    with VLLMServer(model, kv_events=True) as server, server.client() as llm:  # its URL, model and API key
        with EngineCacheFeed(server.kv_events_endpoint, tokenize=llm.tokenize) as feed:
            memory = ContextPilotMemory(default_memory(), capacity_tokens=100_000)  # the fallback model
            memory.follow_engine(feed)  # every scope's index follows vLLM's evictions
            ...

One object: a :class:`~.kv_events.KVEventFeed` (its subscriber thread) into a :class:`~.kv_sync.KVCacheSync`,
and a tokenizer thread. :meth:`EngineCacheFeed.track_text` only queues ``(index, request id, text)`` and
returns: the tokenizer thread asks the engine for the text's token ids (``tokenize``, e.g.
``EngineClient.tokenize``) and tracks them as a *section* of the prompt
(:meth:`~.kv_sync.KVCacheSync.track_section`), so a search or a routing decision never waits on the engine,
and the caller needs to know neither the prompt's preamble (system prompt, chat template, history) nor the
engine's hash. The section's first and last ``edge_tokens`` tokens are left out: tokenised alone, the text's
edges may merge differently with their neighbours than inside the prompt.

It implements :class:`cp_memory.core.engine_cache.EngineCache`, the protocol the mem0 wrapper
(``follow_engine``) and ``AgentRouter(feeds=...)`` take. Faults never fail a request: the feed's own
(garbage, a gap, a disconnected publisher, a stopped feed) make the sync *lost* — attached indexes resume
their capacity model at once; a ``tokenize`` that raises or answers None leaves that one request untracked
(logged: a warning for the first failure in a row, then debug); a full queue drops the request (counted).
"""

from __future__ import annotations

import logging
import queue
import threading
import weakref
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

from ..core.checks import non_negative_int, positive_int
from ..core.index import ContextIndex
from .kv_events import KVEventFeed
from .kv_sync import KVCacheSync

logger = logging.getLogger(__name__)

__all__ = ["EngineCacheFeed", "FeedStats"]

Tokenize = Callable[[str], Sequence[int] | None]


@dataclass
class FeedStats:
    """Counters of one :class:`EngineCacheFeed`'s tokenizer side (the sync has its own: ``feed.sync.stats``)."""

    queued: int = 0
    tracked: int = 0  # sections handed to the sync
    untokenized: int = 0  # tokenize raised or answered None: left untracked
    dropped: int = 0  # the queue was full, or the feed not running


@dataclass(frozen=True)
class _Job:
    index: weakref.ref[ContextIndex]
    request_id: Hashable
    text: str | None  # None: untrack
    preamble: str | None = None  # the prompt's text before ``text``: bind to that exact chain
    index_id: int = 0  # id() of the index when queued (the feed's count of queued sections)


class EngineCacheFeed:
    """An engine's KV-cache events for index owners (see the module docstring). Thread-safe.

    Args:
        endpoint: the engine's KV-event socket (``VLLMServer.kv_events_endpoint``, SGLang's
            ``--kv-events-config`` endpoint).
        tokenize: text -> the engine's token ids, called on the feed's tokenizer thread (a sync
            ``EngineClient.tokenize``; with an async client, give the feed a sync ``EngineClient`` of its own).
        sync: the :class:`KVCacheSync` to feed (default: a new one, bounded by ``engine_blocks``).
        engine_blocks: the engine's KV-cache blocks when known (vLLM's ``num_blocks``): the mirror holds at
            most twice that many (default bound: :data:`~.kv_mirror.DEFAULT_MAX_BLOCKS`).
        edge_tokens: tokens left out at each end of a tracked section.
        max_queue: sections waiting for ``tokenize`` at most (more are dropped, counted).
        replay_endpoint: the engine's KV-event replay socket (``VLLMServer.kv_replay_endpoint``): a gap in the
            event sequence is asked of it before the feed is reported lost (:class:`KVEventFeed`).
        topic, bind: passed to :class:`KVEventFeed`.
    """

    def __init__(
        self,
        endpoint: str,
        tokenize: Tokenize,
        *,
        sync: KVCacheSync | None = None,
        edge_tokens: int = 2,
        max_queue: int = 4096,
        topic: str = "",
        bind: bool | None = None,
        engine_blocks: int | None = None,
        replay_endpoint: str | None = None,
    ) -> None:
        if not callable(tokenize):
            raise TypeError(f"tokenize must be callable (text -> token ids), got {type(tokenize).__name__}")
        non_negative_int(edge_tokens, "edge_tokens")
        positive_int(max_queue, "max_queue")
        if sync is not None and engine_blocks is not None:
            raise ValueError("give engine_blocks to the KVCacheSync passed as sync, not to the feed")
        self.sync = sync if sync is not None else KVCacheSync(engine_blocks=engine_blocks)
        self.feed = KVEventFeed(
            endpoint, self.sync.apply, on_lost=self.sync.lost, topic=topic, bind=bind, replay_endpoint=replay_endpoint
        )
        self.tokenize = tokenize
        self.edge_tokens = edge_tokens
        self.stats = FeedStats()
        self._jobs: queue.Queue[_Job | None] = queue.Queue(max_queue)
        self._thread: threading.Thread | None = None
        self._failing = False
        self._queued: dict[tuple[int, Hashable], int] = {}  # sections queued per (index, request), not yet run
        self._queued_lock = threading.Lock()

    # -- lifecycle ---------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive() and self.feed.running

    @property
    def live(self) -> bool:
        """The feed is complete and healthy: attached indexes follow the engine, their capacity model paused."""
        return self.sync.live

    def start(self) -> EngineCacheFeed:
        """Subscribe (raises when the socket cannot be opened) and start the tokenizer thread."""
        if self.running:
            return self
        self.feed.start()
        self._thread = threading.Thread(target=self._work, name=f"kv-tokenize {self.feed.endpoint}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Unsubscribe: attached indexes resume their capacity model; queued sections are dropped."""
        self.feed.stop()  # tells the sync (on_lost): nobody follows the engine any more
        thread, self._thread = self._thread, None
        if thread is not None:
            self._put(None, block=True)
            thread.join(timeout=10.0)

    def __enter__(self) -> EngineCacheFeed:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"<EngineCacheFeed {self.feed.endpoint} live={self.live} {self.stats}>"

    # -- the EngineCache protocol --------------------------------------------------------------
    def attach(self, index: ContextIndex) -> None:
        self.sync.attach(index)

    def detach(self, index: ContextIndex) -> None:
        self.sync.detach(index)

    def track_text(self, index: ContextIndex, request_id: Hashable, text: str, *, preamble: str | None = None) -> None:
        """Queue ``text`` (a prompt's block section) for tokenising; the request is tracked after. With
        ``preamble`` (the prompt's text before the section, as sent) ``preamble + text`` is tokenised in one
        piece and watched from the prompt's first block: the request binds to its own chain, whatever other
        prompt holds the same section after another preamble."""
        if not isinstance(text, str) or not text.strip():
            return
        if preamble is not None and not isinstance(preamble, str):
            logger.warning("request %r not tracked: preamble must be a str or None", request_id)
            return
        key = (id(index), request_id)
        with self._queued_lock:  # counted before the job can run
            self._queued[key] = self._queued.get(key, 0) + 1
        if self._put(_Job(weakref.ref(index), request_id, text, preamble or None, id(index))):
            self.stats.queued += 1
        else:
            self._done(key)

    def untrack(self, index: ContextIndex, request_id: Hashable) -> None:
        """Stop watching the request: in order with its sections still queued, else at once (an index's
        evictions come here, many at a time: they never crowd the tokenizer queue)."""
        with self._queued_lock:
            queued = (id(index), request_id) in self._queued
        if not (queued and self._put(_Job(weakref.ref(index), request_id, None))):
            self.sync.untrack(index, request_id)

    def flushed(self) -> None:
        """We flushed the engine and it confirmed: see :meth:`KVCacheSync.flushed`."""
        self.sync.flushed()

    def flush(self, flush_cache: Callable[[], bool]) -> bool:
        """One call: flush the engine (``flush_cache``, e.g. ``EngineClient.flush_cache``) and, once it
        confirmed, empty every index following this feed — tracked or not, their subscribers (the mem0
        wrapper's scopes) hear of each request — and expect the engine's own report of the clear. False:
        the engine did not confirm; nothing changed here."""
        if not flush_cache():
            return False
        self.sync.flushed(clear_indexes=True)
        return True

    # -- internals ---------------------------------------------------------------------------
    def _put(self, job: _Job | None, *, block: bool = False) -> bool:
        if job is not None and not self.running:
            self.stats.dropped += 1
            return False
        try:
            self._jobs.put(job, block=block, timeout=10.0 if block else None)
        except queue.Full:
            self.stats.dropped += 1
            logger.debug("KV-event feed %s: tokenizer queue full; a request is left untracked", self.feed.endpoint)
            return False
        return True

    def _work(self) -> None:
        while True:
            job = self._jobs.get()
            if job is None:
                return
            try:
                self._run(job)
            except Exception:  # the thread must outlive any one request
                logger.exception("KV-event feed %s: tracking request %r failed", self.feed.endpoint, job.request_id)

    def _done(self, key: tuple[int, Hashable]) -> None:
        with self._queued_lock:
            left = self._queued.pop(key, 0) - 1
            if left > 0:
                self._queued[key] = left

    def _run(self, job: _Job) -> None:
        try:
            self._apply(job)
        finally:  # after the track landed: a later untrack goes straight to the sync, in order
            if job.text is not None:
                self._done((job.index_id, job.request_id))

    def _apply(self, job: _Job) -> None:
        index = job.index()
        if index is None:
            return
        if job.text is None:
            self.sync.untrack(index, job.request_id)
            return
        if job.preamble is not None:  # one piece, as the prompt shows it: its chain from the first block
            tokens = self._tokens(job.preamble + job.text, head=False)
            ok = tokens is not None and self.sync.track(index, job.request_id, tokens)
        else:
            tokens = self._tokens(job.text)
            ok = tokens is not None and self.sync.track_section(index, job.request_id, tokens)
        if ok:
            self.stats.tracked += 1

    def _tokens(self, text: str, *, head: bool = True) -> list[int] | None:
        """``text``'s token ids less ``edge_tokens`` at its end (and at its head unless ``head`` is False:
        a prompt's first token merges with nothing before it)."""
        try:
            tokens = self.tokenize(text)
            if tokens is None:
                raise ValueError("tokenize answered None (unsupported by this engine?)")
            out = [int(t) for t in tokens]
        except Exception as exc:
            self.stats.untokenized += 1
            level = logging.DEBUG if self._failing else logging.WARNING
            self._failing = True
            logger.log(
                level,
                "KV-event feed %s: cannot tokenize a block section (%s: %s); that request is left untracked",
                self.feed.endpoint,
                type(exc).__name__,
                exc,
            )
            return None
        self._failing = False
        edge = self.edge_tokens
        return out[edge if head else 0 : len(out) - edge] if edge else out
