"""The KV-event feed under hostile input, against a real ZMQ publisher (tests/kv_publisher.py).

Every hostile message is generated here: a value nested 1,000 deep, a forged or repeated sequence
number, a first event with ``block_size=2**62``, removals that never arrive, an oversized message, a
200,000-event batch, the same memory lines after two preambles. Each costs at most the message that
carries it — the feed thread keeps reading, the index keeps its requests — and the feed's memory stays
within its stated bounds (docs/reliability.md, "The KV-event feed under hostile input").
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support import require_kv_events

require_kv_events()
import msgspec  # noqa: E402

from cp_memory.core.index import ContextIndex  # noqa: E402
from cp_memory.engine import EngineCacheFeed  # noqa: E402
from cp_memory.engine.kv_events import (  # noqa: E402
    MAX_BLOCK_SIZE,
    MAX_EVENTS_PER_BATCH,
    STALE_SEQUENCES,
    KVEventFeed,
    MalformedEvents,
    decode_batch,
)
from cp_memory.engine.kv_mirror import Presence  # noqa: E402
from tests.kv_publisher import BlockEngine, eventually, following  # noqa: E402

SYSTEM = "You are a helpful assistant . Answer from the context ."
SECTION = "[Doc 1] Alice moved to Lisbon in 2023 .\n[Doc 2] Alice works as a nurse at the city hospital ."
PROMPT = f"{SYSTEM}\nContext:\n{SECTION}\n\nQuestion: Where does Alice live ?\nAnswer:"


def deep(levels: int) -> bytes:
    """A msgpack value nested ``levels`` arrays deep: one byte a level."""
    return b"\x91" * levels + b"\x00"


def batch_with(value: bytes) -> bytes:
    """``[ts, [value], 0]`` with ``value`` already encoded (so it can be any hostile bytes)."""
    return b"\x93" + msgspec.msgpack.encode(1.5) + b"\x91" + value + b"\x00"


@pytest.fixture()
def engine(tmp_path: Path) -> Iterator[BlockEngine]:
    with BlockEngine(tmp_path, block_size=4, num_blocks=64) as e:
        yield e


@pytest.fixture()
def feed(engine: BlockEngine) -> Iterator[EngineCacheFeed]:
    with following(engine) as f:
        yield f


def tracked(
    engine: BlockEngine,
    feed: EngineCacheFeed,
    index: ContextIndex,
    rid: str,
    prompt: str = PROMPT,
    preamble: str | None = None,
) -> None:
    """``prompt`` is prefilled, then its block section tracked (as the wrapper does at commit), after
    ``preamble`` when given (the prompt's text before the section)."""
    before = feed.stats.tracked
    index.insert([f"m-{rid}"], rid)
    engine.serve(prompt)
    feed.track_text(index, rid, SECTION, preamble=preamble)
    eventually(lambda: feed.stats.tracked > before and feed.sync.pending == 0, "the section to be watched")


# ---------------------------------------------------------------------------------------------
# item 1: bounded decoding — a bad message costs that message, never the feed
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "payload, match",
    [
        (batch_with(deep(1_000)), "nested deeper"),  # ~1 KB: RecursionError inside msgspec before
        (batch_with(deep(100_000)), "nested deeper"),
        (
            b"\x93"
            + msgspec.msgpack.encode(1.5)
            + b"\xdd"
            + (MAX_EVENTS_PER_BATCH + 1).to_bytes(4, "big")
            + b"\x91\xc0" * (MAX_EVENTS_PER_BATCH + 1)
            + b"\x00",
            "events in one message",
        ),
        (
            msgspec.msgpack.encode(
                [
                    1.5,
                    [
                        {
                            "type": "BlockStored",
                            "block_hashes": [],
                            "parent_block_hash": None,
                            "token_ids": [],
                            "block_size": 2**62,
                        }
                    ],
                    0,
                ]
            ),
            "block_size",
        ),
        (msgspec.msgpack.encode([1.5, [{"type": "BlockRemoved", "block_hashes": [b"h" * 257]}], 0]), "257 bytes"),
        (b"\x00" * (4 * 2**20 + 1), "at most"),
    ],
    ids=["depth-1000", "depth-100000", "too-many-events", "block-size-2**62", "long-hash", "too-big"],
)
def test_hostile_payloads_are_refused_as_malformed(payload: bytes, match: str) -> None:
    with pytest.raises(MalformedEvents, match=match):
        decode_batch([b"", (0).to_bytes(8, "big"), payload])
    assert len(batch_with(deep(1_000))) < 1_100


def test_a_value_nested_1000_deep_costs_one_message_not_the_feed(engine, feed, caplog) -> None:
    index = ContextIndex(capacity_tokens=10**6)
    feed.attach(index)
    with caplog.at_level(logging.WARNING, logger="cp_memory.engine"):
        for _ in range(3):
            engine.raw(batch_with(deep(1_000)))
        eventually(lambda: feed.feed.malformed == 3, "the messages to be refused")
    assert feed.running and feed.feed.dropped == 3
    assert caplog.text.count("malformed message") == 1  # once per kind, then rate-limited
    engine.flush()  # the next batch is applied: the feed is followed again
    eventually(lambda: feed.live, "the feed to be live again")
    tracked(engine, feed, index, "r1")
    engine.drop(PROMPT, 6)
    eventually(lambda: "r1" not in index, "the request to leave its index")


# ---------------------------------------------------------------------------------------------
# item 7: the socket is not trusted
# ---------------------------------------------------------------------------------------------


def test_a_repeated_or_forged_sequence_evicts_nothing(engine, feed) -> None:
    index = ContextIndex(capacity_tokens=10**6)
    feed.attach(index)
    tracked(engine, feed, index, "r1")
    replay = msgspec.msgpack.encode([1.5, [], 0])
    engine.raw(replay, seq=engine.seq - 1)  # the last message again
    engine.raw(replay, seq=0)  # a forged restart, the publisher still connected
    eventually(lambda: feed.feed.replayed == 2, "the stale messages to be dropped")
    engine.publish([])
    eventually(lambda: feed.sync.stats.batches >= 3, "the next batch")
    assert "r1" in index and feed.live and feed.sync.stats.evicted == 0
    engine.drop(PROMPT, 6)  # the engine's own removals still count
    eventually(lambda: "r1" not in index, "the request to leave its index")


def test_a_forged_jump_ahead_does_not_blind_the_feed(engine, feed) -> None:
    """Sequence 10**15 forged: the engine's next messages look stale; after STALE_SEQUENCES of them the
    feed follows the engine's sequence again (reported lost) and applies its batches."""
    index = ContextIndex(capacity_tokens=10**6)
    feed.attach(index)
    engine.raw(msgspec.msgpack.encode([1.5, [], 0]), seq=10**15)
    for _ in range(STALE_SEQUENCES - 1):
        engine.publish([])
    eventually(lambda: feed.feed.replayed == STALE_SEQUENCES - 1, "the engine's messages to look stale")
    engine.flush()  # the 16th: the feed follows the engine again, and the clear makes it live
    eventually(lambda: feed.live and feed.feed.last_seq == engine.seq - 1, "the feed to follow the engine")
    tracked(engine, feed, index, "r1")
    engine.drop(PROMPT, 6)
    eventually(lambda: "r1" not in index, "the request to leave its index")


def test_a_first_event_with_a_huge_block_size_does_not_blind_the_mirror(engine: BlockEngine) -> None:
    feed = EngineCacheFeed(engine.endpoint, tokenize=engine.tokenize).start()
    try:
        engine.wait_subscribed()
        empty = {"type": "BlockStored", "block_hashes": [], "parent_block_hash": None, "token_ids": []}
        engine.raw(msgspec.msgpack.encode([1.5, [{**empty, "block_size": 2**62}], 0]))  # out of range
        engine.raw(msgspec.msgpack.encode([1.5, [{**empty, "block_size": 999}], 0]))  # in range, no block
        eventually(lambda: feed.feed.malformed == 1 and feed.sync.stats.batches == 1, "the forged events")
        assert feed.sync.mirror.block_size is None
        index = ContextIndex(capacity_tokens=10**6)
        feed.attach(index)
        tracked(engine, feed, index, "r1")
        assert feed.sync.mirror.block_size == engine.block_size <= MAX_BLOCK_SIZE
        engine.drop(PROMPT, 6)
        eventually(lambda: "r1" not in index, "the request to leave its index")
    finally:
        feed.stop()


def test_endpoints_others_can_publish_on_are_warned_about(tmp_path: Path, caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="cp_memory.engine"):
        KVEventFeed("tcp://127.0.0.1:5557", lambda b: None)
        KVEventFeed(f"ipc://{tmp_path}/kv", lambda b: None)
        assert caplog.text == ""
        KVEventFeed("tcp://10.1.2.3:5557", lambda b: None)
        assert "non-loopback tcp endpoint" in caplog.text
        shared = tmp_path / "shared"
        shared.mkdir()
        os.chmod(shared, 0o777)
        KVEventFeed(f"ipc://{shared}/kv", lambda b: None)
        assert "open to other users" in caplog.text


# ---------------------------------------------------------------------------------------------
# item 8: the feed's own memory bound
# ---------------------------------------------------------------------------------------------


class LosingEngine(BlockEngine):
    """An engine whose BlockRemoved events never reach the feed (lost removals)."""

    def publish(self, events: list[Any]) -> None:
        super().publish([e for e in events if e.get("type") != "BlockRemoved"])


def test_lost_removals_do_not_pile_up_stale_blocks(tmp_path: Path) -> None:
    engine = LosingEngine(tmp_path, block_size=4, num_blocks=40)
    feed = following(engine, engine_blocks=40)
    try:
        for i in range(50):  # 50 prompts of 10 blocks: 12.5x the engine's cache
            engine.serve(" ".join(f"w{i}x{j}" for j in range(40)))
        eventually(lambda: feed.sync.stats.batches == 51, "the batches")
        assert len(feed.sync.mirror) <= 2 * 40 and feed.sync.mirror.forgotten >= 500 - 80
        assert feed.sync.mirror.lookup(engine.tokenize(" ".join(f"w49x{j}" for j in range(40)))).presence is (
            Presence.HELD
        )  # the newest blocks are the ones kept
    finally:
        feed.stop()
        engine.close()


def test_a_removal_of_a_forgotten_block_still_evicts_its_request(tmp_path: Path) -> None:
    engine = BlockEngine(tmp_path, block_size=4, num_blocks=1000)
    feed = following(engine, engine_blocks=10)  # the caller under-states the engine: the mirror forgets
    try:
        index = ContextIndex(capacity_tokens=10**6)
        feed.attach(index)
        tracked(engine, feed, index, "r1")
        engine.serve(" ".join(f"other{j}" for j in range(80)))  # 20 newer blocks: r1's are forgotten
        eventually(lambda: feed.sync.stats.batches == 3, "the batch")
        assert feed.sync.mirror.lookup(engine.tokenize(PROMPT)).presence is Presence.UNKNOWN
        engine.drop(PROMPT, 6)
        eventually(lambda: "r1" not in index, "the request to leave its index")
    finally:
        feed.stop()


def test_an_oversized_message_is_never_received(engine: BlockEngine) -> None:
    """ZMQ's MAXMSGSIZE: the feed drops the connection instead of buffering the message (a 256 MiB one
    measured +0 MiB; docs/reliability.md), reconnects, reports the gap and applies what follows."""
    got: list[int] = []
    lost: list[str] = []
    feed = KVEventFeed(engine.endpoint, lambda b: got.append(b.seq), on_lost=lost.append, max_message_bytes=2**20)
    feed.start()
    try:
        engine.wait_subscribed()
        engine.publish([])
        eventually(lambda: got == [0], "the first batch")
        engine.raw(msgspec.msgpack.encode([1.5, [{"type": "Padding", "x": b"\x00" * (8 * 2**20)}], 0]))  # 8 MiB
        eventually(lambda: feed.disconnects == 1, "the connection to be dropped")
        engine.wait_resubscribed()
        engine.publish([])
        eventually(lambda: got == [0, 2], "the next batch")
        assert feed.running and feed.gaps == 1 and "1 message(s) lost before sequence 2" in lost
    finally:
        feed.stop()


def test_a_200k_event_batch_lets_a_new_scope_in_between_chunks(engine, feed) -> None:
    """A new scope's first search attaches its index while a 200,000-event batch is applied: it waits
    for one chunk (APPLY_CHUNK events), not for the batch — whose last event is not applied yet."""
    last = engine.tokenize(PROMPT)[:4]
    events: list[Any] = [["BlockRemoved", [i]] for i in range(200_000)]
    events.append(["BlockStored", [7], None, last, 4, None, "GPU"])
    engine.raw(msgspec.msgpack.encode([1.5, events, 0]))
    eventually(lambda: feed.sync.stats.batches == 2, "the batch to be decoded", timeout=180.0)  # a loaded CI box
    feed.attach(ContextIndex(capacity_tokens=10**6))  # a new scope
    assert feed.sync.mirror.lookup(last).presence is Presence.UNKNOWN  # the batch is still being applied
    eventually(lambda: feed.sync.mirror.lookup(last).presence is Presence.HELD, "the batch to end", timeout=180.0)
    assert feed.running and feed.sync.stats.events == 200_001


# ---------------------------------------------------------------------------------------------
# item 9: the same memory lines after two preambles
# ---------------------------------------------------------------------------------------------


def test_a_section_after_two_preambles_follows_its_own_prompts_chain(engine, feed) -> None:
    """Alice's scope and Bob's send the same memory lines after different system prompts. Each request is
    tracked with its preamble (the prompt's text before the section), so it binds to its own chain by
    identity, whatever arrived last: Alice's second turn, tracked after Bob's, follows her chain — Bob's
    blocks going does not evict it, her own going does."""
    head_a, head_b = "Alice : you assist her .\nContext:\n", "Bob : you assist him .\nContext:\n"
    alice = f"{head_a}{SECTION}\n\nQuestion: Where does Alice live ?\nAnswer:"
    bob = f"{head_b}{SECTION}\n\nQuestion: What is Alice's job ?\nAnswer:"
    alice2 = f"{head_a}{SECTION}\n\nQuestion: Where does she work ?\nAnswer:"
    index = ContextIndex(capacity_tokens=10**6)
    feed.attach(index)
    tracked(engine, feed, index, "alice-1", alice, preamble=head_a)
    tracked(engine, feed, index, "bob-1", bob, preamble=head_b)
    tracked(engine, feed, index, "alice-2", alice2, preamble=head_a)
    engine.drop(bob, *range(engine.blocks_of(bob)))  # every block of Bob's chain
    eventually(lambda: "bob-1" not in index, "Bob's request to leave")
    assert {"alice-1", "alice-2"} <= set(index.request_ids())
    engine.drop(alice, 3)  # a block of Alice's memory lines
    eventually(lambda: "alice-2" not in index and "alice-1" not in index, "Alice's requests to leave")
