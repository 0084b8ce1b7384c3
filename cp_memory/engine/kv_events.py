"""KV-cache events of vLLM and SGLang: a ZMQ subscriber thread.

The records and the decoder of the wire format are :mod:`cp_memory.engine.kv_wire` (re-exported here).

:class:`KVEventFeed` subscribes (its own thread; the socket is used from that thread only) and hands
each decoded :class:`EventBatch` to a callback. A message that does not decode, a sequence gap (the
publisher dropped messages: its high-water mark), or a callback that raises is logged and reported
once to ``on_lost`` (the listener falls back to its own model); the feed keeps reading: a bad message
costs that message, never the feed. So is a publisher that goes away (the engine stopped or died: ZMQ
reports the disconnection) and a feed thread that stops for any reason. A sequence that starts again
after the publisher went away is a new publisher, i.e. a restarted engine with an empty cache: the feed
puts an :class:`AllBlocksCleared` in front of that batch. A sequence that repeats or goes back while the
same publisher is connected is a replayed or forged message: dropped (counted), up to
:data:`STALE_SEQUENCES` in a row — then the feed's own last sequence was the forged one and it follows
the publisher again (reported lost). A gap, with the publisher's replay endpoint given (vLLM's
``replay_endpoint``: a ZMQ ``ROUTER`` that answers ``[b"", start sequence]`` with every buffered message from
there, then an end marker of sequence -1), is first asked of it: when every missing message comes back in
order (at most :data:`MAX_REPLAY_MESSAGES` messages, :data:`MAX_REPLAY_BYTES` bytes, ``replay_timeout_s``
seconds) they are delivered before the batch that showed the gap and nothing is lost; otherwise the gap is
reported as before. Warnings are rate-limited: one per kind of fault, then at most one
a minute with the count of those left out. Needs ``pyzmq`` and ``msgspec`` (the ``kv-events`` extra),
imported when a feed starts.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

from ..core.checks import positive_int
from .kv_wire import (
    MAX_BLOCK_SIZE,
    MAX_EVENTS_PER_BATCH,
    MAX_HASH_BYTES,
    MAX_MESSAGE_BYTES,
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    EventBatch,
    KVEvent,
    MalformedEvents,
    decode_batch,
)

logger = logging.getLogger(__name__)

__all__ = [
    "MAX_BLOCK_SIZE",
    "MAX_EVENTS_PER_BATCH",
    "MAX_HASH_BYTES",
    "MAX_MESSAGE_BYTES",
    "MAX_REPLAY_BYTES",
    "MAX_REPLAY_MESSAGES",
    "RCV_HWM",
    "STALE_SEQUENCES",
    "AllBlocksCleared",
    "BlockRemoved",
    "BlockStored",
    "EventBatch",
    "KVEvent",
    "KVEventFeed",
    "MalformedEvents",
    "decode_batch",
    "subscriber_binds",
]

#: messages queued in the subscriber at most (ZMQ ``RCVHWM``): at most RCV_HWM x MAX_MESSAGE_BYTES buffered;
#: a slower feed makes the publisher queue (its own high-water mark), not us
RCV_HWM = 64
#: stale sequence numbers dropped in a row before the feed follows the publisher's sequence again
STALE_SEQUENCES = 16
#: seconds between two warnings of the same kind (the first always goes out)
WARN_EVERY_S = 60.0
#: the most messages one gap asks the replay endpoint for (vLLM keeps 10,000 steps by default); a bigger
#: gap (or a forged jump ahead) is reported lost at once
MAX_REPLAY_MESSAGES = 10_000
#: the most payload bytes one replay holds before it is delivered (a bigger replay gives up: reported lost)
MAX_REPLAY_BYTES = 64 * 2**20
#: the end marker's sequence in a replay answer
REPLAY_END = -1


def subscriber_binds(endpoint: str) -> bool:
    """Whether the subscriber must bind ``endpoint``: the publisher (vLLM, SGLang) binds wildcard
    (``tcp://*:N``) and ``ipc://`` / ``inproc://`` endpoints and *connects* to any other, e.g.
    ``tcp://127.0.0.1:N`` — then the subscriber binds it, on loopback, before the engine starts."""
    if endpoint.startswith(("ipc://", "inproc://")):
        return False
    return not ("*" in endpoint or "::" in endpoint)


def _loopback(endpoint: str) -> bool:
    """Whether a ``tcp://`` endpoint names a loopback host (any other transport: True)."""
    if not endpoint.startswith("tcp://"):
        return True
    host = endpoint[len("tcp://") :].rsplit(":", 1)[0].strip("[]")
    return host == "localhost" or host.startswith("127.") or host == "::1"


def _check_endpoint(endpoint: str) -> None:
    """Warn when others may publish on ``endpoint``: a non-loopback tcp host, an ipc socket outside a
    private directory. Our own engines use ``ipc://`` in a 0700 directory (``VLLMServer``)."""
    if not _loopback(endpoint):
        logger.warning(
            "KV-event feed %s: a non-loopback tcp endpoint; any host that reaches it can publish forged events "
            "(prefer ipc:// in a private directory)",
            endpoint,
        )
    elif endpoint.startswith("ipc://"):
        import os

        folder = os.path.dirname(endpoint[len("ipc://") :]) or "."
        try:
            mode = os.stat(folder).st_mode
        except OSError:
            return
        if mode & 0o077:
            logger.warning(
                "KV-event feed %s: its directory is open to other users (mode %o); they can publish forged "
                "events (prefer a 0700 directory)",
                endpoint,
                mode & 0o777,
            )


def _check_feed_args(
    endpoint: str, replay_endpoint: str | None, replay_timeout_s: float, max_message_bytes: int, max_events: int
) -> None:
    """:class:`KVEventFeed`'s arguments: ``ValueError`` naming the bad one; a warning for an open endpoint."""
    for name, address in (("endpoint", endpoint), ("replay_endpoint", replay_endpoint)):
        if (address is not None or name == "endpoint") and (not isinstance(address, str) or "://" not in address):
            raise ValueError(f"{name} must be a ZMQ address like ipc:///path or tcp://127.0.0.1:5557, got {address!r}")
    timeout_ok = isinstance(replay_timeout_s, (int, float)) and not isinstance(replay_timeout_s, bool)
    if not timeout_ok or not replay_timeout_s > 0:
        raise ValueError(f"replay_timeout_s must be a positive number, got {replay_timeout_s!r}")
    positive_int(max_message_bytes, "max_message_bytes")
    positive_int(max_events, "max_events")
    _check_endpoint(endpoint)
    if replay_endpoint is not None:
        _check_endpoint(replay_endpoint)


class _Warnings:
    """Rate-limited warnings: the first of each kind, then at most one per ``every`` seconds with the
    count of those left out (logged at debug meanwhile)."""

    def __init__(self, every: float = WARN_EVERY_S) -> None:
        self.every = every
        self._last: dict[str, float] = {}
        self._quiet: dict[str, int] = {}

    def log(self, kind: str, level: int, msg: str, *args: object) -> None:
        now = time.monotonic()
        last = self._last.get(kind)
        if level < logging.WARNING or last is None or now - last >= self.every:
            quiet = self._quiet.pop(kind, 0) if level >= logging.WARNING else 0
            if level >= logging.WARNING:
                self._last[kind] = now
            suffix = f" ({quiet} more of this kind since the last warning)" if quiet else ""
            logger.log(level, msg + suffix, *args)
            return
        self._quiet[kind] = self._quiet.get(kind, 0) + 1
        logger.debug(msg, *args)


# ---------------------------------------------------------------------------------------------
# the subscriber thread
# ---------------------------------------------------------------------------------------------


class KVEventFeed:
    """A ZMQ ``SUB`` socket on ``endpoint`` read by a daemon thread; ``on_batch`` gets each batch.

    ``on_lost(reason)`` is called once each time the feed stops being trustworthy (garbage, a
    sequence gap, ``on_batch`` raising, the publisher disconnecting, the feed stopping); the feed
    goes on reading, and is trustworthy again from the next batch that clears the cache (the listener
    decides what resynchronises it). Use as a context manager or call :meth:`start` / :meth:`stop`.
    ``max_message_bytes`` and ``max_events`` bound one message (module docstring). ``replay_endpoint``: the
    publisher's replay socket (vLLM's ``replay_endpoint``), asked for the messages of a gap before it is
    reported lost, waiting at most ``replay_timeout_s``. Counters: ``batches`` delivered (recovered ones
    included), ``malformed``, ``replayed`` (stale sequences), ``dropped`` (every message not delivered),
    ``gaps`` (reported lost), ``recovered`` (messages a replay brought back), ``disconnects``.
    """

    def __init__(
        self,
        endpoint: str,
        on_batch: Callable[[EventBatch], None],
        *,
        on_lost: Callable[[str], None] | None = None,
        topic: str = "",
        bind: bool | None = None,
        poll_ms: int = 100,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
        max_events: int = MAX_EVENTS_PER_BATCH,
        replay_endpoint: str | None = None,
        replay_timeout_s: float = 2.0,
    ) -> None:
        _check_feed_args(endpoint, replay_endpoint, replay_timeout_s, max_message_bytes, max_events)
        self.endpoint = endpoint
        self.on_batch = on_batch
        self.on_lost = on_lost
        self.topic = topic
        self.bind = subscriber_binds(endpoint) if bind is None else bind
        self.poll_ms = poll_ms
        self.max_message_bytes = max_message_bytes
        self.max_events = max_events
        self.replay_endpoint = replay_endpoint
        self.replay_timeout_s = float(replay_timeout_s)
        self.recovered = 0
        self._ctx: Any = None  # the feed thread's ZMQ context while it runs (its replay requests use it)
        self.batches = 0
        self.malformed = 0
        self.replayed = 0
        self.dropped = 0
        self.gaps = 0
        self.disconnects = 0
        self.last_seq: int | None = None
        self._publisher_left = False  # a disconnection since the last new publisher: a sequence may restart
        self._stale = 0  # stale sequences in a row
        self._warnings = _Warnings()
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._thread: threading.Thread | None = None
        self._error: BaseException | None = None

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> KVEventFeed:
        """Open the socket (in the feed's thread) and return once it is connected or bound."""
        if self.running:
            return self
        try:
            import msgspec  # noqa: F401
            import zmq  # noqa: F401
        except ImportError as exc:
            raise ImportError("the KV-event feed needs pyzmq and msgspec: pip install 'cp-memory[kv-events]'") from exc
        self._stop.clear()
        self._ready.clear()
        self._error = None
        self._thread = threading.Thread(target=self._run, name=f"kv-events {self.endpoint}", daemon=True)
        self._thread.start()
        self._ready.wait(30.0)
        if self._error is not None:
            raise RuntimeError(f"KV-event feed cannot open {self.endpoint}: {self._error}") from self._error
        return self

    def stop(self) -> None:
        """Close the socket; ``on_lost`` is told (nobody follows the engine any more)."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.join(timeout=10.0)

    def __enter__(self) -> KVEventFeed:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return (
            f"<KVEventFeed {self.endpoint} batches={self.batches} malformed={self.malformed} "
            f"replayed={self.replayed} dropped={self.dropped} gaps={self.gaps} disconnects={self.disconnects}>"
        )

    # -- internals ---------------------------------------------------------------------------
    def _open(self) -> tuple[Any, Any] | None:
        """The context and the SUB socket, bounded (MAXMSGSIZE, RCVHWM); None when it cannot open."""
        import zmq

        ctx = zmq.Context()
        sock = ctx.socket(zmq.SUB)
        try:
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.MAXMSGSIZE, self.max_message_bytes)  # a bigger frame is refused, never buffered
            sock.setsockopt(zmq.RCVHWM, RCV_HWM)
            sock.setsockopt(zmq.SUBSCRIBE, self.topic.encode())
            if self.bind:
                sock.bind(self.endpoint)
            else:
                sock.connect(self.endpoint)
        except zmq.ZMQError as exc:
            self._error = exc
            sock.close(0)
            ctx.term()
            self._ready.set()
            return None
        return ctx, sock

    def _run(self) -> None:
        import zmq

        opened = self._open()
        if opened is None:
            return
        ctx, sock = opened
        self._ctx = ctx
        monitor = sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        poller = zmq.Poller()
        poller.register(sock, zmq.POLLIN)
        poller.register(monitor, zmq.POLLIN)
        self._ready.set()
        why, level = "the feed was stopped", logging.INFO
        try:
            while not self._stop.is_set():
                ready = dict(poller.poll(self.poll_ms))
                if monitor in ready:
                    self._disconnected(monitor, sock)
                if sock in ready:
                    self._handle(sock.recv_multipart())
        except Exception as exc:  # the thread ends: whoever follows the engine must know
            logger.exception("KV-event feed %s: the subscriber thread failed", self.endpoint)
            why, level = f"the feed thread failed ({type(exc).__name__})", logging.WARNING
        finally:
            sock.disable_monitor()
            monitor.close(0)
            sock.close(0)
            ctx.term()
        self._lost(why, level)

    def _lost(self, reason: str, level: int = logging.WARNING, kind: str | None = None) -> None:
        self._warnings.log(
            kind or reason,
            level,
            "KV-event feed %s: %s; the index falls back to its capacity model",
            self.endpoint,
            reason,
        )
        if self.on_lost is not None:
            try:
                self.on_lost(reason)
            except Exception:
                logger.exception("KV-event feed %s: on_lost failed", self.endpoint)

    def _disconnected(self, monitor: Any, sock: Any) -> None:
        import zmq
        from zmq.utils.monitor import recv_monitor_message

        if recv_monitor_message(monitor).get("event") == zmq.EVENT_DISCONNECTED:
            self.disconnects += 1
            if not self.bind:  # ZMQ does not reconnect after a protocol error (a message over MAXMSGSIZE)
                sock.disconnect(self.endpoint)
                sock.connect(self.endpoint)
            self._publisher_left = True
            self._lost("the publisher disconnected (the engine stopped or restarted)", kind="disconnected")

    def _handle(self, frames: list[bytes]) -> None:
        try:
            batch = decode_batch(frames, max_bytes=self.max_message_bytes, max_events=self.max_events)
        except Exception as exc:  # MalformedEvents, or any decoder fault: this message only, never the feed
            self.malformed += 1
            self.dropped += 1
            self._lost(f"malformed message ({str(exc)[:200]})", kind="malformed")
            return
        if batch.seq < 0:  # the replay end marker
            return
        for sequenced in self._sequenced(batch):
            self.batches += 1
            try:
                self.on_batch(sequenced)
            except Exception as exc:
                logger.exception("KV-event feed %s: the listener failed on batch %d", self.endpoint, sequenced.seq)
                self._lost(f"listener failed ({type(exc).__name__})", kind="listener")

    def _sequenced(self, batch: EventBatch) -> list[EventBatch]:
        """``batch`` in order — after the missing ones a replay brought back, or a restarted publisher's
        first one after a clear — or nothing: dropped."""
        recovered: list[EventBatch] = []
        last = self.last_seq
        if last is not None and batch.seq <= last:
            if self._publisher_left:  # the publisher went away and one starts again: a new engine process
                logger.info("KV-event feed %s: a new publisher from sequence %d", self.endpoint, batch.seq)
                batch = EventBatch(batch.seq, batch.ts, (AllBlocksCleared(), *batch.events), batch.rank)
                self._publisher_left = False
            else:
                self._stale += 1
                if self._stale < STALE_SEQUENCES:
                    self.replayed += 1
                    self.dropped += 1
                    self._warnings.log(
                        "replayed",
                        logging.WARNING,
                        "KV-event feed %s: sequence %d repeats or goes back (last %d) from the same publisher: "
                        "dropped (replayed or forged)",
                        self.endpoint,
                        batch.seq,
                        last,
                    )
                    return []
                self._lost(f"{self._stale} stale sequences in a row; following the publisher from {batch.seq}")
        elif last is not None and batch.seq > last + 1:
            recovered = self._replayed(last + 1, batch.seq)
            if recovered:
                self.recovered += len(recovered)
                logger.info("KV-event feed %s: %d lost message(s) recovered by replay", self.endpoint, len(recovered))
            else:
                self.gaps += 1
                self._lost(f"{batch.seq - last - 1} message(s) lost before sequence {batch.seq}", kind="gap")
        self._stale = 0
        self.last_seq = batch.seq
        return [*recovered, batch]

    def _replayed(self, start: int, stop: int) -> list[EventBatch]:
        """Messages ``start`` .. ``stop - 1`` from the publisher's replay endpoint, all of them in order, or
        none (no endpoint, a gap over :data:`MAX_REPLAY_MESSAGES`, a missing or malformed one, a timeout)."""
        if self.replay_endpoint is None or self._ctx is None or stop - start > MAX_REPLAY_MESSAGES:
            return []
        import zmq

        sock = self._ctx.socket(zmq.DEALER)
        try:
            sock.setsockopt(zmq.LINGER, 0)
            sock.setsockopt(zmq.MAXMSGSIZE, self.max_message_bytes)
            sock.connect(self.replay_endpoint)
            sock.send_multipart([b"", start.to_bytes(8, "big")])
            return self._read_replay(sock, start, stop)
        except Exception as exc:  # zmq errors, a hostile answer: that replay only
            logger.warning("KV-event feed %s: replay from %s failed: %s", self.endpoint, self.replay_endpoint, exc)
            return []
        finally:
            sock.close(0)

    def _read_replay(self, sock: Any, start: int, stop: int) -> list[EventBatch]:
        """Read a replay answer until ``stop - start`` messages in order, the end marker, or the timeout."""
        out: list[EventBatch] = []
        size = 0
        deadline = time.monotonic() + self.replay_timeout_s
        while len(out) < stop - start and size <= MAX_REPLAY_BYTES:
            left_ms = int((deadline - time.monotonic()) * 1000)
            if left_ms <= 0 or not sock.poll(left_ms):
                return []
            frames = sock.recv_multipart()
            frames = frames[1:] if frames and frames[0] == b"" else frames  # the ROUTER's empty delimiter
            if len(frames) == 3 and len(frames[1]) == 8 and int.from_bytes(frames[1], "big", signed=True) < 0:
                return []  # the end marker before every missing message came back
            batch = decode_batch(frames, max_bytes=self.max_message_bytes, max_events=self.max_events)
            if batch.seq < start + len(out):
                continue  # one we already have (an answer from an older request)
            if batch.seq != start + len(out):
                return []  # the publisher's buffer no longer holds the first missing one
            out.append(batch)
            size += len(frames[2])
        return out if len(out) == stop - start else []
