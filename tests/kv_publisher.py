"""A block-cache engine that publishes real KV-cache events: for the feed tests of memory, agents and engine.

:class:`BlockEngine` does with a prompt what vLLM's automatic prefix caching does, as its events tell:
the prompt's full ``block_size``-token blocks are chained by hash (a block is reused only after the same
prefix), held in an LRU of ``num_blocks`` blocks whose tails go first, and every change goes out on a real
ZMQ socket in vLLM's wire format — ``[topic, 8-byte sequence, msgpack([ts, [events], rank])]`` with
``BlockStored`` / ``BlockRemoved`` / ``AllBlocksCleared`` maps. Its tokenizer splits words and punctuation
(one token each), so the text of a section tokenises the same alone and inside a prompt.

With ``replay=True`` it also answers replay requests as vLLM's ``ZmqEventPublisher`` does (a ``ROUTER`` on
``ipc://<folder>/replay``, served by its own thread: ``[b"", start sequence]`` -> every buffered message from
there, then an end marker of sequence -1), and ``publish(..., lose=True)`` buffers a message without sending
it: a message the subscriber never got (``losing = n``: the next ``n`` messages, whatever publishes them).

A mock only in the sense that no model runs: the events and the socket are the real ones, and a test can
send garbage or close the socket (a dead engine) at will. The real vLLM runs in
``tests/engine/test_vllm_server.py``.
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
import zlib
from collections import OrderedDict, deque
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import zmq

from cp_memory.engine import EngineCacheFeed

__all__ = ["BlockEngine", "eventually", "following"]

_TOKEN = re.compile(r"\w+|[^\w\s]|\n")


def following(engine: BlockEngine, **kwargs: Any) -> EngineCacheFeed:
    """An :class:`~cp_memory.engine.EngineCacheFeed` (``kwargs``: its options) started on ``engine`` and live:
    subscribed, and past the engine's first step (sequence 0), so it has seen everything. The caller stops it."""
    feed = EngineCacheFeed(engine.endpoint, tokenize=engine.tokenize, **kwargs).start()
    engine.wait_subscribed()
    engine.publish([])  # the engine's first step (sequence 0): the feed has seen everything
    eventually(lambda: feed.live, "the feed to go live")
    return feed


def eventually(condition: Callable[[], bool], what: str, timeout: float = 20.0) -> None:
    """Wait for the feed's threads to reach ``condition`` (events cross a socket and a thread)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


class BlockEngine:
    """A prefix cache of ``num_blocks`` blocks publishing its KV events on ``ipc://<folder>/kv``."""

    def __init__(self, folder: Path, *, block_size: int = 4, num_blocks: int = 64, replay: bool = False) -> None:
        self.endpoint = f"ipc://{folder}/kv"
        self.replay_endpoint: str | None = f"ipc://{folder}/replay" if replay else None
        self.buffer: deque[tuple[int, bytes]] = deque(maxlen=10_000)  # vLLM's buffer_steps default
        self._buffer_lock = threading.Lock()
        self._replaying = threading.Event()
        self._replayer: threading.Thread | None = None
        self.losing = 0  # the next messages published are buffered, never sent
        self.replay_requests = 0
        self.block_size = block_size
        self.num_blocks = num_blocks
        self.seq = 0
        self.blocks: OrderedDict[int, None] = OrderedDict()  # LRU: first = next to go
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.XPUB)  # XPUB: a test waits for the subscription, never sleeps
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.setsockopt(zmq.XPUB_VERBOSE, 1)  # every subscription, a feed's reconnection's too
        self.sock.bind(self.endpoint)
        if self.replay_endpoint is not None:
            bound = threading.Event()
            self._replayer = threading.Thread(target=self._serve_replay, args=(bound,), daemon=True)
            self._replaying.set()
            self._replayer.start()
            assert bound.wait(10), "the replay socket did not bind"

    # -- the engine ----------------------------------------------------------------------------------
    @staticmethod
    def tokenize(text: str) -> list[int]:
        return [zlib.crc32(t.encode()) % 50_000 for t in _TOKEN.findall(text)]

    def serve(self, prompt: str) -> int:
        """Prefill ``prompt``: reuse its cached leading blocks, store the rest (evicting LRU tails), publish.
        Returns the cached tokens."""
        tokens = self.tokenize(prompt)
        size = self.block_size
        chain = [tuple(tokens[: (i + 1) * size]) for i in range(len(tokens) // size)]
        hashes = [self.h(c) for c in chain]
        hit = 0
        while hit < len(hashes) and hashes[hit] in self.blocks:
            hit += 1
        for h in hashes[:hit]:  # in use: not evictable while the prompt is stored
            del self.blocks[h]
        removed = []
        while self.blocks and len(self.blocks) + len(hashes) > self.num_blocks:
            removed.append(self.blocks.popitem(last=False)[0])
        for h in reversed(hashes):  # the chain's tail is the least recently used of it: it goes first
            self.blocks[h] = None
        events: list[Any] = []
        if removed:
            events.append({"type": "BlockRemoved", "block_hashes": removed, "medium": "GPU"})
        if hashes[hit:]:
            events.append(
                {
                    "type": "BlockStored",
                    "block_hashes": hashes[hit:],
                    "parent_block_hash": hashes[hit - 1] if hit else None,
                    "token_ids": tokens[hit * size : len(hashes) * size],
                    "block_size": size,
                    "lora_id": None,
                    "medium": "GPU",
                }
            )
        self.publish(events)
        return hit * size

    def drop(self, prompt: str, *blocks: int) -> None:
        """The engine frees these blocks of ``prompt``'s chain (its block numbers, 0 first)."""
        size = self.block_size
        tokens = self.tokenize(prompt)
        hashes = [self.h(tuple(tokens[: (i + 1) * size])) for i in range(len(tokens) // size)]
        gone = [hashes[i] for i in blocks if hashes[i] in self.blocks]
        for h in gone:
            del self.blocks[h]
        self.publish([{"type": "BlockRemoved", "block_hashes": gone, "medium": "GPU"}])

    def flush(self) -> None:
        """``/reset_prefix_cache``: every block goes, one ``AllBlocksCleared``."""
        self.blocks.clear()
        self.publish([{"type": "AllBlocksCleared"}])

    def blocks_of(self, prompt: str) -> int:
        return len(self.tokenize(prompt)) // self.block_size

    # -- the wire ------------------------------------------------------------------------------------
    def wait_subscribed(self) -> None:
        assert self.sock.poll(10_000), "the feed never subscribed"
        assert self.sock.recv()[:1] == b"\x01"

    def publish(self, events: list[Any], *, lose: bool = False) -> None:
        """Publish ``events`` as the next message (buffered for replay); ``lose``: never sent (a dropped one)."""
        body = msgspec.msgpack.encode([time.time(), events, 0])
        with self._buffer_lock:
            self.buffer.append((self.seq, body))
        if self.losing > 0:
            self.losing, lose = self.losing - 1, True
        if not lose:
            self.sock.send_multipart([b"", self.seq.to_bytes(8, "big"), body])
        self.seq += 1

    def garbage(self) -> None:
        self.sock.send_multipart([b"", self.seq.to_bytes(8, "big"), b"\xc1 not msgpack"])
        self.seq += 1

    def raw(self, payload: bytes, seq: int | None = None) -> None:
        """A hostile message: ``payload`` as it is, at ``seq`` (default: the next sequence, then counted)."""
        if seq is None:
            seq, self.seq = self.seq, self.seq + 1
        self.sock.send_multipart([b"", seq.to_bytes(8, "big", signed=True), payload])

    def wait_resubscribed(self) -> None:
        """After the feed dropped its connection (an oversized message): wait until it subscribes again."""
        while True:
            assert self.sock.poll(10_000), "the feed never subscribed again"
            if self.sock.recv()[:1] == b"\x01":
                return

    def __enter__(self) -> BlockEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """The engine dies: its socket goes away (the subscriber sees the disconnection); again: nothing."""
        if self.sock.closed:
            return
        if self._replayer is not None:
            self._replaying.clear()
            self._replayer.join(10)
        self.sock.close(0)
        self.ctx.term()

    def _serve_replay(self, bound: threading.Event) -> None:
        """vLLM's ``ZmqEventPublisher._service_replay``, on this engine's buffer (its own thread and socket)."""
        router = self.ctx.socket(zmq.ROUTER)
        router.setsockopt(zmq.LINGER, 0)
        router.bind(self.replay_endpoint)
        bound.set()
        try:
            while self._replaying.is_set():
                if not router.poll(50):
                    continue
                frames = router.recv_multipart()
                if len(frames) != 3:
                    continue
                client, _, start = frames
                self.replay_requests += 1
                with self._buffer_lock:
                    held = [(s, b) for s, b in self.buffer if s >= int.from_bytes(start, "big")]
                for s, b in held:
                    router.send_multipart([client, b"", b"", s.to_bytes(8, "big"), b])
                router.send_multipart([client, b"", b"", (-1).to_bytes(8, "big", signed=True), b""])
        finally:
            router.close(0)

    # -- internals -----------------------------------------------------------------------------------
    @staticmethod
    def h(prefix: tuple[int, ...]) -> int:
        return int.from_bytes(hashlib.sha256(repr(prefix).encode()).digest()[:8], "big") >> 1
