"""The KV-event wire format and the ZMQ feed: both encodings decode, garbage and gaps are reported, never raised.

The publisher here is a real ZMQ socket (``XPUB``, so the test waits for the subscription instead of
sleeping) sending what vLLM sends: ``[topic, 8-byte sequence, msgpack([ts, [events], rank])]``.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import require_kv_events

require_kv_events()
import msgspec  # noqa: E402
import zmq  # noqa: E402

from cp_memory.engine.kv_events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    EventBatch,
    KVEventFeed,
    MalformedEvents,
    decode_batch,
    subscriber_binds,
)

STORED_MAP = {
    "type": "BlockStored",
    "block_hashes": [11, 12],
    "parent_block_hash": None,
    "token_ids": [1, 2, 3, 4],
    "block_size": 2,
    "lora_id": None,
    "medium": "GPU",
    "lora_name": None,
    "session_id": "s1",
}


def frames(seq: int, events: list[Any], *, ts: float = 1.5, rank: int | None = 0) -> list[bytes]:
    body: list[Any] = [ts, events] + ([rank] if rank is not None else [])
    return [b"", seq.to_bytes(8, "big"), msgspec.msgpack.encode(body)]


def test_vllm_map_events_decode() -> None:
    batch = decode_batch(
        frames(
            3,
            [{"type": "AllBlocksCleared"}, STORED_MAP, {"type": "BlockRemoved", "block_hashes": [12], "medium": "GPU"}],
        )
    )
    assert batch.seq == 3 and batch.ts == 1.5 and batch.rank == 0
    assert batch.events == (
        AllBlocksCleared(),
        BlockStored((11, 12), None, (1, 2, 3, 4), 2, "GPU"),
        BlockRemoved((12,), "GPU"),
    )


def test_sglang_array_events_decode() -> None:
    """SGLang (and vLLM before 0.11) tag arrays: the type name, then the fields in order."""
    stored = ["BlockStored", [b"\x01" * 32], b"\x00" * 32, [5, 6], 2, None, "GPU"]
    batch = decode_batch(frames(0, [stored, ["BlockRemoved", [b"\x01" * 32]], ["AllBlocksCleared"]], rank=None))
    assert batch.events == (
        BlockStored((b"\x01" * 32,), b"\x00" * 32, (5, 6), 2, "GPU"),
        BlockRemoved((b"\x01" * 32,)),
        AllBlocksCleared(),
    )


def test_unknown_event_types_are_skipped() -> None:
    assert decode_batch(frames(0, [{"type": "BlockUpdated", "x": 1}])).events == ()


@pytest.mark.parametrize(
    "bad, match",
    [
        ([b"", b"\x00" * 8], "3 frames"),
        ([b"", b"\x01", b""], "8"),
        ([b"", b"\x00" * 8, b"\xc1garbage"], "not msgpack"),
        ([b"", b"\x00" * 8, msgspec.msgpack.encode({"ts": 1})], r"\[timestamp"),
        (frames(0, [{**STORED_MAP, "token_ids": [1, 2, 3]}]), "3 token ids for 2 blocks"),
        (frames(0, [{**STORED_MAP, "block_hashes": [1.5]}]), "block hash"),
        (frames(0, [{**STORED_MAP, "block_size": 0}]), "block_size"),
        (frames(0, [42]), "map or a tagged array"),
    ],
)
def test_garbage_is_refused_with_the_reason(bad: list[bytes], match: str) -> None:
    with pytest.raises(MalformedEvents, match=match):
        decode_batch(bad)


def test_who_binds() -> None:
    """vLLM binds wildcard and ipc endpoints and connects to a named host: then the subscriber binds,
    on loopback only (no port open on every interface)."""
    assert subscriber_binds("tcp://127.0.0.1:5557")
    assert not subscriber_binds("tcp://*:5557")
    assert not subscriber_binds("ipc:///run/kv")


# ---------------------------------------------------------------------------------------------
# the feed against a real ZMQ publisher
# ---------------------------------------------------------------------------------------------


class Publisher:
    def __init__(self, endpoint: str) -> None:
        self.ctx = zmq.Context()
        self.sock = self.ctx.socket(zmq.XPUB)
        self.sock.setsockopt(zmq.LINGER, 0)
        self.sock.bind(endpoint)

    def wait_subscribed(self) -> None:
        assert self.sock.poll(10_000), "the feed never subscribed"
        assert self.sock.recv()[:1] == b"\x01"

    def send(self, parts: list[bytes]) -> None:
        self.sock.send_multipart(parts)

    def close(self) -> None:
        if not self.sock.closed:
            self.sock.close(0)
        if not self.ctx.closed:
            self.ctx.term()


@pytest.fixture()
def wired(tmp_path: Path) -> Iterator[tuple[Publisher, KVEventFeed, queue.Queue[Any]]]:
    endpoint = f"ipc://{tmp_path}/kv"
    got: queue.Queue[Any] = queue.Queue()
    pub = Publisher(endpoint)

    def on_batch(batch: EventBatch) -> None:
        if any(isinstance(e, BlockRemoved) and e.block_hashes == (666,) for e in batch.events):
            raise RuntimeError("listener bug")
        got.put(batch)

    feed = KVEventFeed(endpoint, on_batch, on_lost=lambda reason: got.put(reason)).start()
    pub.wait_subscribed()
    yield pub, feed, got
    feed.stop()
    pub.close()


def test_the_feed_delivers_batches_and_reports_garbage_gaps_and_restarts(wired) -> None:
    pub, feed, got = wired
    pub.send(frames(0, [STORED_MAP]))
    assert got.get(timeout=10).events[0].block_hashes == (11, 12)

    pub.send([b"", b"\x00" * 8, b"\xc1 not msgpack"])
    assert "malformed message" in got.get(timeout=10)

    pub.send(frames(1, []))  # the feed goes on after garbage
    assert got.get(timeout=10).seq == 1

    pub.send(frames(4, []))  # 2 and 3 were dropped by the publisher
    assert got.get(timeout=10) == "2 message(s) lost before sequence 4"
    assert got.get(timeout=10).seq == 4

    pub.close()  # the engine restarts: its socket goes away, a new process binds it again
    assert "publisher disconnected" in got.get(timeout=10)
    again = Publisher(feed.endpoint)
    try:
        again.wait_subscribed()
        again.send(frames(0, [STORED_MAP]))  # a new publisher: the engine restarted with an empty cache
        restarted = got.get(timeout=10)
        assert isinstance(restarted.events[0], AllBlocksCleared) and len(restarted.events) == 2

        again.send(frames(1, [{"type": "BlockRemoved", "block_hashes": [666]}]))
        assert got.get(timeout=10) == "listener failed (RuntimeError)"
        assert feed.running and feed.malformed == 1 and feed.gaps == 1
    finally:
        again.close()


def test_a_feed_that_cannot_open_its_endpoint_says_so(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="cannot open"):
        KVEventFeed(f"ipc://{tmp_path}/missing-dir/kv", lambda b: None, bind=True).start()
    with pytest.raises(ValueError, match="ZMQ address"):
        KVEventFeed("localhost:5557", lambda b: None)


def test_stop_ends_the_thread(tmp_path: Path) -> None:
    feed = KVEventFeed(f"ipc://{tmp_path}/kv", lambda b: None).start()
    thread = feed._thread
    feed.stop()
    assert thread is not None and not thread.is_alive()
    assert threading.active_count() >= 1


def test_a_publisher_that_goes_away_is_reported(wired) -> None:
    """The engine died (its socket closed): whoever follows it must fall back, not trust a silent feed."""
    pub, feed, got = wired
    pub.send(frames(0, []))
    assert got.get(timeout=10).seq == 0
    pub.sock.close(0)
    assert "publisher disconnected" in got.get(timeout=10)
    assert feed.running and feed.disconnects == 1


def test_stop_is_reported(tmp_path: Path) -> None:
    reasons: list[str] = []
    KVEventFeed(f"ipc://{tmp_path}/kv", lambda b: None, on_lost=reasons.append).start().stop()
    assert reasons == ["the feed was stopped"]
