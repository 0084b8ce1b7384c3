"""EngineCacheFeed against an engine publishing real KV events on a real ZMQ socket (tests/kv_publisher.py).

What the mem0 wrapper and AgentRouter rely on: a tracked block section follows the engine's BlockRemoved
and AllBlocksCleared; while the feed is healthy the index's capacity model is paused, and garbage, a dead
engine or a stopped feed put it back at once, logged; a tokenizer that fails leaves one request untracked
and raises nothing. The real vLLM: tests/engine/test_vllm_server.py.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import require_kv_events

require_kv_events()

from cp_memory.core.engine_cache import EngineCache
from cp_memory.core.index import ContextIndex
from cp_memory.engine import EngineCacheFeed
from tests.kv_publisher import BlockEngine, eventually, following

SYSTEM = "You are a helpful assistant . Answer from the context ."
SECTION = "[Doc 1] Alice moved to Lisbon in 2023 .\n[Doc 2] Alice works as a nurse at the city hospital ."
PROMPT = f"{SYSTEM}\nContext:\n{SECTION}\n\nQuestion: Where does Alice live ?\nAnswer:"


@pytest.fixture()
def engine(tmp_path: Path) -> Iterator[BlockEngine]:
    with BlockEngine(tmp_path, block_size=4, num_blocks=64) as e:
        yield e


@pytest.fixture()
def feed(engine: BlockEngine) -> Iterator[EngineCacheFeed]:
    with following(engine) as f:
        yield f


def sent(engine: BlockEngine, feed: EngineCacheFeed, index: ContextIndex, rid: str, prompt: str = PROMPT) -> None:
    """The prompt is prefilled, then its block section tracked (as the wrapper does at commit)."""
    engine.serve(prompt)
    feed.track_text(index, rid, SECTION)
    eventually(lambda: feed.stats.tracked >= 1 and feed.sync.pending == 0, "the section to be watched")


def test_the_feed_is_what_index_owners_take(feed: EngineCacheFeed) -> None:
    assert isinstance(feed, EngineCache)


def test_a_tracked_section_follows_block_removed(engine: BlockEngine, feed: EngineCacheFeed) -> None:
    index = ContextIndex(capacity_tokens=10**6)
    feed.attach(index)
    index.insert(["m1", "m2"], "r1")
    sent(engine, feed, index, "r1")
    tail = engine.blocks_of(PROMPT) - 1
    engine.drop(PROMPT, tail)  # the question's last block: not the index's business
    engine.publish([])
    eventually(lambda: feed.sync.stats.batches >= 4, "the batches to arrive")
    assert "r1" in index
    engine.drop(PROMPT, 6)  # a block of the memories' lines
    eventually(lambda: "r1" not in index, "the request to leave its index")
    assert feed.sync.stats.evicted == 1 and feed.sync.stats.lost == 0


def test_other_prompts_evicting_the_section_evict_the_request(engine: BlockEngine, feed: EngineCacheFeed) -> None:
    """As on a real engine: the LRU cache makes room for other prompts and drops this one."""
    index = ContextIndex(capacity_tokens=10**6)
    feed.attach(index)
    index.insert(["m1", "m2"], "r1")
    sent(engine, feed, index, "r1")
    for i in range(6):
        engine.serve(" ".join(f"other{i}x{j}" for j in range(40)))
    eventually(lambda: "r1" not in index, "the request to leave its index")


def test_all_blocks_cleared_evicts_every_tracked_request(engine: BlockEngine, feed: EngineCacheFeed) -> None:
    index = ContextIndex(capacity_tokens=10**6)
    feed.attach(index)
    index.insert(["m1", "m2"], "r1")
    index.insert(["m3"], "untracked")
    sent(engine, feed, index, "r1")
    engine.flush()
    eventually(lambda: "r1" not in index, "the clear to evict the request")
    assert "untracked" in index and feed.live


def capacity_index(feed: EngineCacheFeed) -> ContextIndex:
    """An index whose capacity model alone would keep one request: while the feed is live it keeps three."""
    index = ContextIndex(capacity_tokens=2)
    feed.attach(index)
    for i in range(3):
        index.insert([f"m{i}"], f"r{i}", token_lens=[2])
    assert len(index) == 3
    return index


def test_garbage_puts_the_index_back_on_its_capacity_model(engine, feed, caplog) -> None:
    index = capacity_index(feed)
    with caplog.at_level(logging.WARNING, logger="cp_memory.engine"):
        engine.garbage()
        eventually(lambda: not feed.live, "the feed to be lost")
    assert index.request_ids() == ["r2"] and index.cached_tokens <= 2
    assert "malformed message" in caplog.text and "falls back to its capacity model" in caplog.text
    engine.flush()  # a known state again: the feed is followed again
    eventually(lambda: feed.live, "the feed to be live again")


def test_a_dead_engine_puts_the_index_back_on_its_capacity_model(engine, feed, caplog) -> None:
    index = capacity_index(feed)
    with caplog.at_level(logging.WARNING, logger="cp_memory.engine"):
        engine.close()  # the engine process dies: its socket goes away
        eventually(lambda: not feed.live, "the disconnection to be noticed")
    assert index.request_ids() == ["r2"]
    assert "publisher disconnected" in caplog.text and feed.feed.disconnects == 1


def test_a_restarted_engine_is_followed_again(tmp_path: Path, engine, feed) -> None:
    index = ContextIndex(capacity_tokens=10**6)
    feed.attach(index)
    index.insert(["m1"], "r1")
    sent(engine, feed, index, "r1")
    engine.close()
    eventually(lambda: not feed.live, "the disconnection to be noticed")
    again = BlockEngine(tmp_path)  # the same socket path, a new process: sequence 0
    try:
        again.wait_subscribed()
        again.publish([])
        eventually(lambda: feed.live, "the restarted engine to be followed")
        assert "r1" not in index  # its cache is empty: what the old process held is gone
    finally:
        again.close()


def test_stopping_the_feed_hands_the_index_back(engine: BlockEngine, tmp_path: Path) -> None:
    f = following(engine)
    index = capacity_index(f)
    f.stop()
    assert not f.live and index.request_ids() == ["r2"]
    f.track_text(index, "r2", SECTION)  # a stopped feed tracks nothing, raises nothing
    assert f.stats.dropped == 1


def test_a_failing_tokenizer_leaves_the_request_untracked(engine: BlockEngine, caplog) -> None:
    def tokenize(text: str) -> list[int]:
        raise ConnectionError("engine gone")

    with EngineCacheFeed(engine.endpoint, tokenize=tokenize) as f:
        engine.wait_subscribed()
        index = ContextIndex()
        index.insert(["m1"], "r1")
        with caplog.at_level(logging.WARNING, logger="cp_memory.engine"):
            f.track_text(index, "r1", SECTION)
            f.track_text(index, "r1", SECTION)
            eventually(lambda: f.stats.untokenized == 2, "the tokenizer to be tried")
        assert f.sync.tracked == 0 and "r1" in index
        assert caplog.text.count("cannot tokenize") == 1  # a warning for the first failure in a row


def test_bad_arguments_are_refused(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="tokenize"):
        EngineCacheFeed(f"ipc://{tmp_path}/kv", tokenize="not callable")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="edge_tokens"):
        EngineCacheFeed(f"ipc://{tmp_path}/kv", tokenize=len, edge_tokens=-1)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_queue must be an int >= 1, got True"):
        EngineCacheFeed(f"ipc://{tmp_path}/kv", tokenize=len, max_queue=True)


def test_one_flush_empties_the_engine_and_every_index_following_it(engine: BlockEngine, feed) -> None:
    """``feed.flush(client.flush_cache)``: the engine is flushed and every attached index emptied — a tracked
    request and one never tracked alike — with their subscribers told; the engine's own clear report that
    follows evicts nothing more."""
    index, other = ContextIndex(capacity_tokens=10**6), ContextIndex()
    feed.attach(index)
    feed.attach(other)
    heard: list[object] = []
    index.subscribe(heard.append)
    index.insert(["m-tracked"], "r1")
    sent(engine, feed, index, "r1")
    index.insert(["m-untracked"], "r2")
    other.insert(["m-other"], "r3")
    assert not feed.flush(lambda: False) and len(index) == 2  # the engine refused: nothing changes
    assert feed.flush(lambda: (engine.blocks.clear(), True)[1])  # vLLM reports the clear with its next step
    assert len(index) == 0 and len(other) == 0 and sorted(map(str, heard)) == ["r1", "r2"]
    batches = feed.sync.stats.batches
    engine.publish([{"type": "AllBlocksCleared"}])  # the next step: the engine's report of that clear
    eventually(lambda: feed.sync.stats.batches > batches, "the engine's clear report")
    assert feed.live and feed.sync.stats.lost == 0 and feed.sync.stats.evicted == 1


def test_untracking_what_was_never_queued_never_crowds_the_tokenizer_queue(engine: BlockEngine) -> None:
    """An index tells the feed of every request that leaves it (``ContextIndex.subscribe``), many at a time
    (a clear, a trimmed scope): untracking a request with no section queued goes straight to the sync, so a
    burst of them never fills the queue that sections to track wait in."""
    with EngineCacheFeed(engine.endpoint, tokenize=engine.tokenize, max_queue=1) as f:
        index = ContextIndex()
        for i in range(100):
            f.untrack(index, f"r{i}")
        assert f.stats.dropped == 0
