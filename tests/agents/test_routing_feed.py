"""AgentRouter(feeds=...): a worker's cache model follows its engine's KV-cache events, not the capacity guess.

Each worker's engine is a block cache publishing real KV events on a real ZMQ socket (tests/kv_publisher.py);
the router never calls it, the test sends each prompt to the routed worker's engine, as ChainOfAgents does.
"""

from __future__ import annotations

import logging
from collections.abc import Hashable, Iterator
from pathlib import Path

import pytest

from tests.support import require_kv_events

require_kv_events()

from cp_memory.agents.routes import RouteReason
from cp_memory.agents.routing import AgentRouter
from cp_memory.core.index import ContextIndex
from cp_memory.engine import EngineCacheFeed
from tests.kv_publisher import BlockEngine, eventually, following

DOCS = {
    "a": "[Doc 1] The lighthouse keeper logged every passing ship in a green ledger .",
    "b": "[Doc 2] Storms in March closed the harbour for eleven days in a row .",
    "c": "[Doc 3] The ferry to the island leaves twice a day from the north pier .",
}


def segment(*keys: str) -> tuple[list[str], list[int], str]:
    texts = [DOCS[k] for k in keys]
    return list(keys), [len(BlockEngine.tokenize(t)) for t in texts], "\n".join(texts)


def prompt_of(text: str) -> str:
    return f"{text}\n\nCommunication unit: none yet .\nQuestion: when does the ferry leave ?\nAnswer:"


@pytest.fixture()
def pool(tmp_path: Path) -> Iterator[tuple[list[BlockEngine], list[EngineCacheFeed]]]:
    for i in range(2):
        (tmp_path / f"w{i}").mkdir()
    engines = [BlockEngine(tmp_path / f"w{i}", block_size=4, num_blocks=256) for i in range(2)]
    feeds = [following(e) for e in engines]
    yield engines, feeds
    for f in feeds:
        f.stop()
    for e in engines:
        e.close()


def test_a_worker_model_follows_the_evictions_of_its_engine(pool) -> None:
    engines, feeds = pool
    r = AgentRouter([object(), object()], capacity_tokens=10**6, feeds=feeds)
    keys, lens, text = segment("a", "b")
    route = r.route(keys, lens, text=text)
    engine, feed = engines[route.worker], feeds[route.worker]
    engine.serve(prompt_of(text))
    r.release(route)  # answered: the engine holds the segment's blocks now
    eventually(lambda: feed.stats.tracked == 1 and feed.sync.pending == 0, "the segment to be watched")
    again = r.route(keys, lens, text=text)
    assert (again.worker, again.reason) == (route.worker, RouteReason.AFFINITY)
    r.release(again, ok=False)
    engine.drop(prompt_of(text), 3)  # the engine frees a block of the segment
    eventually(lambda: route.request_id not in r.index(route.worker), "the model to drop the segment")
    later = r.route(keys, lens)
    assert later.matched_tokens == 0  # the model no longer claims a cached prefix the engine dropped
    r.release(later)


def test_the_capacity_guess_is_paused_while_the_feed_is_live_and_back_when_garbage_comes(pool, caplog) -> None:
    engines, feeds = pool
    r = AgentRouter([object()], capacity_tokens=20, feeds=feeds[:1])
    for k in DOCS:
        keys, lens, text = segment(k)
        route = r.route(keys, lens, text=text)
        engines[0].serve(prompt_of(text))
        r.release(route)
    index = r.index(0)
    assert len(index) == 3 and index.cached_tokens > 20  # the engine holds all three: nothing evicted
    with caplog.at_level(logging.WARNING, logger="cp_memory.engine"):
        engines[0].garbage()
        eventually(lambda: not feeds[0].live, "the feed to be lost")
    assert index.cached_tokens <= 20 and "malformed message" in caplog.text
    r.release(r.route(*segment("a")[:2]))  # routing goes on


def test_a_dead_engine_puts_its_worker_back_on_the_capacity_guess(pool, caplog) -> None:
    engines, feeds = pool
    r = AgentRouter([object()], capacity_tokens=20, feeds=feeds[:1])
    for k in DOCS:
        keys, lens, text = segment(k)
        r.release(r.route(keys, lens, text=text))
    assert r.index(0).cached_tokens > 20
    with caplog.at_level(logging.WARNING, logger="cp_memory.engine"):
        engines[0].close()
        eventually(lambda: not feeds[0].live, "the disconnection to be noticed")
    assert r.index(0).cached_tokens <= 20 and "publisher disconnected" in caplog.text


def test_a_feed_is_followed_only_for_routes_given_text(pool) -> None:
    """A caller that never passes text= would have nothing tracked: its workers keep the capacity guess."""
    engines, feeds = pool
    r = AgentRouter([object(), object()], capacity_tokens=20, feeds=[feeds[0], None])
    for k in DOCS:
        keys, lens, _ = segment(k)
        r.release(r.route(keys, lens))
    assert all(r.index(w).cached_tokens <= 20 for w in (0, 1))
    assert sum(f.stats.queued for f in feeds) == 0


def test_a_failed_request_is_never_tracked(pool) -> None:
    engines, feeds = pool
    r = AgentRouter([object(), object()], feeds=feeds)
    keys, lens, text = segment("c")
    route = r.route(keys, lens, text=text)
    r.release(route, ok=False)
    eventually(lambda: all(f._jobs.empty() for f in feeds), "the feeds' queues to drain")
    assert sum(f.stats.queued for f in feeds) == 0  # never sent: no section to track
    assert sum(f.sync.tracked for f in feeds) == 0 and route.request_id not in r.index(route.worker)


class Broken:
    def attach(self, index: ContextIndex) -> None:
        raise RuntimeError("feed bug")

    def detach(self, index: ContextIndex) -> None:
        raise RuntimeError("feed bug")

    def track_text(self, index: ContextIndex, request_id: Hashable, text: str) -> None:
        raise RuntimeError("feed bug")

    def untrack(self, index: ContextIndex, request_id: Hashable) -> None:
        raise RuntimeError("feed bug")


def test_a_feed_that_raises_never_fails_routing(caplog) -> None:
    with caplog.at_level(logging.WARNING, logger="cp_memory.agents"):
        r = AgentRouter([object()], feeds=[Broken()])
        keys, lens, text = segment("a")
        r.release(r.route(keys, lens, text=text))
        r.release(r.route(keys, lens, text=text), ok=False)
    assert "failed in attach" in caplog.text and "failed in track_text" in caplog.text
    assert "failed in untrack" in caplog.text


def test_feeds_are_one_per_worker() -> None:
    with pytest.raises(ValueError, match="2 feeds for 1 workers"):
        AgentRouter([object()], feeds=[None, None])
    with pytest.raises(TypeError, match="EngineCacheFeed"):
        AgentRouter([object()], feeds=["ipc:///tmp/kv"])  # type: ignore[list-item]


def test_a_chain_of_agents_gives_each_worker_feed_the_segment_it_sent() -> None:
    """ChainOfAgents passes each worker segment to the router as text=: the routed worker's feed tracks it."""
    from cp_memory.agents import ChainOfAgents, Segmenter
    from cp_memory.core.blocks import ContextBlock

    from .conftest import FakeEngine

    class Recording(Broken):
        def __init__(self) -> None:
            self.texts: list[str] = []

        def attach(self, index: ContextIndex) -> None:
            pass

        def track_text(self, index: ContextIndex, request_id: Hashable, text: str) -> None:
            self.texts.append(text)

    feeds = [Recording(), Recording()]
    router = AgentRouter([FakeEngine("w0"), FakeEngine("w1")], feeds=feeds)
    coa = ChainOfAgents(router, segmenter=Segmenter(60, token_len=lambda t: len(t.split())), manager=FakeEngine("m"))
    docs = [ContextBlock(f"d{i}", " ".join(f"fact{i}" for _ in range(30))) for i in range(4)]
    res = coa.answer("what?", docs)
    tracked = sorted(t for f in feeds for t in f.texts)
    assert tracked == sorted(s.text for s in res.segments)  # every segment, on the worker that served it
    for call, seg in zip(res.worker_calls, res.segments):
        assert seg.text in feeds[call.worker].texts


def test_a_route_given_its_preamble_hands_it_to_the_feed_at_release() -> None:
    """``route(..., text=, preamble=)``: the worker's feed tracks the text after that preamble (its own chain)."""

    class Recording(Broken):
        def __init__(self) -> None:
            self.calls: list[tuple[str, str | None]] = []

        def attach(self, index: ContextIndex) -> None:
            pass

        def track_text(
            self, index: ContextIndex, request_id: Hashable, text: str, *, preamble: str | None = None
        ) -> None:
            self.calls.append((text, preamble))

    feed = Recording()
    r = AgentRouter([object()], feeds=[feed])
    keys, lens, text = segment("a")
    r.release(r.route(keys, lens, text=text, preamble="You are agent 1.\n"))
    r.release(r.route(keys, lens, text=text))
    assert feed.calls == [(text, "You are agent 1.\n"), (text, None)]
