"""A gap in the KV-event sequence is asked of the publisher's replay socket before the feed gives up.

The engine (tests/kv_publisher.py) publishes real events on a real ZMQ socket and answers replay requests
on a ``ROUTER`` socket exactly as vLLM's ``ZmqEventPublisher`` does (``[b"", start]`` -> the buffered
messages from there, then an end marker). A message the subscriber never got — the publisher's high-water
mark dropped it — is recovered: the removal it carried still evicts the request, and the feed stays live.
The real vLLM publisher: ``tests/engine/test_vllm_server.py::test_a_dropped_event_is_recovered_by_vllms_replay``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import require_kv_events

require_kv_events()
import msgspec  # noqa: E402

from cp_memory.core.index import ContextIndex  # noqa: E402
from cp_memory.engine import EngineCacheFeed  # noqa: E402
from cp_memory.engine.kv_events import MAX_REPLAY_MESSAGES  # noqa: E402
from tests.kv_publisher import BlockEngine, eventually, following  # noqa: E402

SECTION = "[Doc 1] Alice moved to Lisbon in 2023 .\n[Doc 2] Alice works as a nurse at the city hospital ."
PROMPT = f"You are a helpful assistant .\nContext:\n{SECTION}\n\nQuestion: Where does Alice live ?\nAnswer:"


@pytest.fixture()
def engine(tmp_path: Path) -> Iterator[BlockEngine]:
    with BlockEngine(tmp_path, block_size=4, num_blocks=64, replay=True) as e:
        yield e


def served_and_tracked(engine: BlockEngine, feed: EngineCacheFeed) -> ContextIndex:
    index = ContextIndex(capacity_tokens=10**6)
    feed.attach(index)
    index.insert(["m1"], "alice-1")
    engine.serve(PROMPT)
    feed.track_text(index, "alice-1", SECTION)
    eventually(lambda: feed.stats.tracked == 1 and feed.sync.pending == 0, "the section to be watched")
    return index


def test_a_dropped_removal_is_recovered_by_replay_and_still_evicts(engine: BlockEngine) -> None:
    feed = following(engine, replay_endpoint=engine.replay_endpoint)
    try:
        index = served_and_tracked(engine, feed)
        engine.losing = 1
        engine.drop(PROMPT, 3)  # the engine drops a block of Alice's lines: that message never arrives
        assert "alice-1" in index
        engine.publish([])  # the next step shows the gap; the feed asks the replay socket for the lost one
        eventually(lambda: "alice-1" not in index, "the recovered removal to evict the request")
        assert feed.feed.recovered == 1 and feed.feed.gaps == 0 and feed.live
        assert feed.sync.stats.lost == 0
    finally:
        feed.stop()


def test_without_a_replay_socket_a_gap_puts_the_index_back_on_its_capacity_model(engine: BlockEngine) -> None:
    feed = following(engine)
    try:
        index = served_and_tracked(engine, feed)
        engine.losing = 1
        engine.drop(PROMPT, 3)
        engine.publish([])
        eventually(lambda: not feed.live, "the gap to be reported")
        assert feed.feed.gaps == 1 and feed.feed.recovered == 0 and "alice-1" in index
    finally:
        feed.stop()


def test_a_replay_that_no_longer_holds_the_lost_message_gives_up(engine: BlockEngine) -> None:
    feed = following(engine, replay_endpoint=engine.replay_endpoint)
    try:
        served_and_tracked(engine, feed)
        engine.losing = 1
        engine.drop(PROMPT, 3)
        engine.buffer.clear()  # the publisher's buffer moved on (vLLM keeps buffer_steps messages)
        engine.publish([])
        eventually(lambda: not feed.live, "the gap to be reported")
        assert feed.feed.gaps == 1 and feed.feed.recovered == 0
    finally:
        feed.stop()


def test_a_forged_jump_ahead_is_not_asked_of_the_replay_socket(engine: BlockEngine) -> None:
    feed = following(engine, replay_endpoint=engine.replay_endpoint)
    try:
        engine.raw(msgspec.msgpack.encode([1.5, [], 0]), seq=MAX_REPLAY_MESSAGES + 5)
        eventually(lambda: not feed.live, "the jump to be reported")
        assert feed.feed.recovered == 0 and engine.replay_requests == 0
    finally:
        feed.stop()
