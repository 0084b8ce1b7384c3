"""``follow_engine``: every scope's index follows the engine's KV-cache events; the capacity guess is the fallback.

A real mem0 (embedded Qdrant, bundled MiniLM) under ContextPilotMemory and AsyncContextPilotMemory, and an
engine that publishes real KV events on a real ZMQ socket (tests/kv_publisher.py: a block cache, no model).
The prompt is ``build_prompt``'s; the engine prefills it, so its events carry the prompt's blocks. The real
vLLM with the wrapper: tests/engine/test_vllm_server.py::test_the_mem0_wrapper_follows_vllm.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Hashable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.mem0_fixtures import aingest, ingest, require_mem0
from tests.support import require_kv_events

require_mem0()
require_kv_events()

from cp_memory.core.index import ContextIndex  # noqa: E402
from cp_memory.core.render import build_prompt  # noqa: E402
from cp_memory.embedded import default_memory  # noqa: E402
from cp_memory.engine import EngineCacheFeed  # noqa: E402
from cp_memory.memory import AsyncContextPilotMemory, ContextPilotMemory  # noqa: E402
from tests.kv_publisher import BlockEngine, eventually, following  # noqa: E402

pytestmark = pytest.mark.mem0

USER = "kv-feed-dana"
F = {"user_id": USER}
FACTS = [
    "Dana moved to Porto in 2021 and lives near the river.",
    "Dana works as a marine biologist studying octopus behaviour.",
    "Dana plays the cello in a community orchestra on Thursdays.",
    "Dana's sister Mia runs a bakery that sells sourdough bread.",
    "Dana is training for a half marathon in the autumn.",
    "Dana adopted a grey cat called Pixel last spring.",
]
QUESTIONS = ["Where does Dana live?", "What is Dana's job?", "Which instrument does Dana play?"]


@pytest.fixture(scope="module")
def dana(mem: Any) -> Iterator[Any]:
    ingest(mem, USER, FACTS)
    yield mem
    mem.delete_all(user_id=USER)


@pytest.fixture()
def engine(tmp_path: Path) -> Iterator[BlockEngine]:
    with BlockEngine(tmp_path, block_size=4, num_blocks=256) as e:
        yield e


@pytest.fixture()
def feed(engine: BlockEngine) -> Iterator[EngineCacheFeed]:
    with following(engine) as f:
        yield f


def watched(feed: EngineCacheFeed, n: int) -> None:
    eventually(lambda: feed.stats.tracked >= n and feed.sync.pending == 0, f"{n} request(s) to be watched")


def newest(index: ContextIndex) -> Hashable:
    return index.request_ids()[-1]


def first_memory_block(engine: BlockEngine, prompt: str, found: dict[str, Any]) -> int:
    """A block of the prompt that lies inside its first memory's line."""
    line = found["context_pilot"]["context"].split("\n")[0]
    start = len(engine.tokenize(prompt[: prompt.index(line)]))
    return start // engine.block_size + 2


def test_a_search_follows_the_engine_that_served_its_prompt(dana: Any, engine: BlockEngine, feed) -> None:
    cp = ContextPilotMemory(dana, capacity_tokens=10**6)
    cp.follow_engine(feed)
    found = cp.search(QUESTIONS[0], filters=F, top_k=4)  # no conversation: nothing to commit, tracked now
    prompt = build_prompt(QUESTIONS[0], found)
    engine.serve(prompt)
    watched(feed, 1)
    index = cp.index_for(F)
    rid = newest(index)
    assert str(rid) == found["context_pilot"]["request_id"]
    batches = feed.sync.stats.batches
    engine.drop(prompt, engine.blocks_of(prompt) - 1)  # the question's block: the index does not count on it
    eventually(lambda: feed.sync.stats.batches > batches, "the removal to arrive")
    assert rid in index
    engine.drop(prompt, first_memory_block(engine, prompt, found))
    eventually(lambda: rid not in index, "the request to leave the scope's index")
    assert feed.sync.stats.evicted == 1


def test_a_turn_is_tracked_once_committed_and_a_clear_evicts_it(dana: Any, engine: BlockEngine, feed) -> None:
    cp = ContextPilotMemory(dana)
    cp.follow_engine(feed)
    found = cp.search(QUESTIONS[1], filters=F, top_k=4, conversation_id="kv-1")
    assert feed.stats.queued == 0  # pending turn: its prompt may never be sent
    with cp.sending(found):
        engine.serve(build_prompt(QUESTIONS[1], found))
    watched(feed, 1)
    index = cp.index_for(F)
    rid = newest(index)
    engine.flush()  # /reset_prefix_cache
    eventually(lambda: rid not in index, "the clear to evict the request")


def test_a_turn_committed_with_its_preamble_binds_to_its_own_prompts_chain(
    dana: Any, engine: BlockEngine, feed
) -> None:
    """Two assistants send the same memory lines after different system prompts; each turn is committed
    with its preamble (the prompt's text before the lines), so each follows its own chain: the other
    prompt's blocks going evicts nothing, its own system prompt's first block going evicts it."""
    cp = ContextPilotMemory(dana, capacity_tokens=10**6)
    cp.follow_engine(feed)
    index, rids, prompts = cp.index_for(F), [], []
    for n, head in enumerate(["Nurse bot : be kind .\n", "Coach bot : be brief .\n"]):
        found = cp.search(QUESTIONS[0], filters=F, top_k=4, conversation_id=f"kv-pre-{n}")
        prompt = head + build_prompt(QUESTIONS[0], found)
        preamble = prompt[: prompt.index(found["context_pilot"]["context"])]
        engine.serve(prompt)
        cp.commit(found, preamble=preamble)
        watched(feed, n + 1)
        rids.append(newest(index))
        prompts.append(prompt)
    engine.drop(prompts[1], 0)  # the second system prompt's first block
    eventually(lambda: rids[1] not in index, "the second turn to leave")
    assert rids[0] in index
    engine.drop(prompts[0], 0)
    eventually(lambda: rids[0] not in index, "the first turn to leave")


def test_a_request_the_index_drops_for_its_bound_is_untracked(dana: Any, engine: BlockEngine, feed) -> None:
    """One way out: the index owns its bound (``max_requests_per_scope``, :meth:`ContextIndex.trim`) and
    tells its subscribers, so the feed stops watching the request it dropped — no shadow list in between."""
    cp = ContextPilotMemory(dana, capacity_tokens=10**6, max_requests_per_scope=1)
    cp.follow_engine(feed)
    for n, q in enumerate(QUESTIONS[:2]):
        found = cp.search(q, filters=F, top_k=4)  # no conversation: tracked now
        engine.serve(build_prompt(q, found))
        watched(feed, n + 1)
    index = cp.index_for(F)
    assert len(index) == 1
    eventually(lambda: feed.sync.tracked == 1, "the dropped request to be untracked")


def test_a_rolled_back_turn_is_never_tracked(dana: Any, feed) -> None:
    cp = ContextPilotMemory(dana)
    cp.follow_engine(feed)
    found = cp.search(QUESTIONS[2], filters=F, top_k=4, conversation_id="kv-2")
    cp.rollback(found)
    eventually(lambda: feed._jobs.empty(), "the feed's queue to drain")
    assert feed.stats.queued == 0 and feed.sync.tracked == 0


def searches(cp: ContextPilotMemory, engine: BlockEngine) -> ContextIndex:
    for q in QUESTIONS:
        found = cp.search(q, filters=F, top_k=4)
        engine.serve(build_prompt(q, found))
    return cp.index_for(F)


def test_the_capacity_guess_is_paused_while_the_feed_is_healthy_and_back_when_garbage_comes(
    dana: Any, engine: BlockEngine, feed, caplog
) -> None:
    cp = ContextPilotMemory(dana, capacity_tokens=40)  # one search's memories alone are ~40 tokens
    cp.follow_engine(feed)
    index = searches(cp, engine)
    watched(feed, 3)
    assert len(index) == 3 and index.cached_tokens > 40  # the engine holds them all: nothing evicted
    with caplog.at_level(logging.WARNING, logger="cp_memory.engine"):
        engine.garbage()
        eventually(lambda: not feed.live, "the feed to be lost")
    assert index.cached_tokens <= 40 and len(index) < 3  # the capacity model, at once
    assert "malformed message" in caplog.text
    found = cp.search(QUESTIONS[0], filters=F, top_k=4)  # still served, still aligned
    assert found["context_pilot"]["fallback"] is False and len(found["results"]) == 4


def test_a_dead_engine_puts_every_index_back_on_the_capacity_guess(dana: Any, engine: BlockEngine, feed, caplog):
    cp = ContextPilotMemory(dana, capacity_tokens=40)
    cp.follow_engine(feed)
    index = searches(cp, engine)
    with caplog.at_level(logging.WARNING, logger="cp_memory.engine"):
        engine.close()
        eventually(lambda: not feed.live, "the disconnection to be noticed")
    assert index.cached_tokens <= 40 and "publisher disconnected" in caplog.text
    found = cp.search(QUESTIONS[1], filters=F, top_k=4, conversation_id="kv-dead")
    with cp.sending(found):  # the commit tracks into a dead feed: nothing raised
        pass
    assert found["context_pilot"]["fallback"] is False


class Recorder:
    """Records which indexes are attached (the protocol alone)."""

    def __init__(self) -> None:
        self.attached: list[ContextIndex] = []
        self.detached: list[ContextIndex] = []

    def attach(self, index: ContextIndex) -> None:
        self.attached.append(index)

    def detach(self, index: ContextIndex) -> None:
        self.detached.append(index)

    def track_text(self, index: ContextIndex, request_id: Hashable, text: str) -> None:
        pass

    def untrack(self, index: ContextIndex, request_id: Hashable) -> None:
        pass


def test_indexes_in_memory_new_and_restored_are_all_attached(dana: Any, tmp_path: Path) -> None:
    first = ContextPilotMemory(dana, index_dir=tmp_path)
    before = first.index_for({"user_id": "kv-other"})
    first.search(QUESTIONS[0], filters=F, top_k=4)
    first.save()
    rec = Recorder()
    first.follow_engine(rec)
    assert set(map(id, rec.attached)) == {id(before), id(first.index_for(F))}  # in memory
    second = ContextPilotMemory(dana, index_dir=tmp_path)
    second.follow_engine(rec)
    restored = second.index_for(F)  # from its snapshot
    assert len(restored) == 1 and rec.attached[-1] is restored
    second.follow_engine(None)
    assert rec.detached[-1] is restored


class Broken(Recorder):
    def attach(self, index: ContextIndex) -> None:
        raise RuntimeError("feed bug")

    def track_text(self, index: ContextIndex, request_id: Hashable, text: str) -> None:
        raise RuntimeError("feed bug")


def test_a_feed_that_raises_never_fails_a_search(dana: Any, caplog) -> None:
    cp = ContextPilotMemory(dana)
    with caplog.at_level(logging.WARNING, logger="cp_memory.memory"):
        cp.follow_engine(Broken())
        found = cp.search(QUESTIONS[0], filters=F, top_k=4)
        again = cp.search(QUESTIONS[1], filters=F, top_k=4)
    assert found["context_pilot"]["fallback"] is False and len(again["results"]) == 4
    assert caplog.text.count("KV-cache feed failed in track_text") == 1  # once, then debug


def test_follow_engine_takes_a_feed_or_none(dana: Any) -> None:
    cp = ContextPilotMemory(dana)
    with pytest.raises(TypeError, match="EngineCacheFeed"):
        cp.follow_engine("ipc:///tmp/kv")  # type: ignore[arg-type]
    cp.follow_engine(None)


# ---------------------------------------------------------------------------------------------
# the async wrapper: the same flow, the same feed
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def adana() -> Iterator[Any]:
    memory = default_memory(async_=True)
    asyncio.run(aingest(memory, USER, FACTS))
    yield memory
    memory.close()


def test_the_async_wrapper_follows_the_engine(adana: Any, engine: BlockEngine, feed) -> None:
    cp = AsyncContextPilotMemory(adana, capacity_tokens=40)
    cp.follow_engine(feed)

    async def turn(q: str, conversation: str | None) -> dict[str, Any]:
        found = await cp.search(q, filters=F, top_k=4, conversation_id=conversation)
        with cp.sending(found):
            engine.serve(build_prompt(q, found))
        return found

    first = asyncio.run(turn(QUESTIONS[0], None))
    asyncio.run(turn(QUESTIONS[1], "kv-async"))
    asyncio.run(turn(QUESTIONS[2], None))
    watched(feed, 3)
    index = cp.index_for(F)
    assert len(index) == 3 and index.cached_tokens > 40  # the capacity guess is paused
    engine.flush()
    eventually(lambda: len(index) == 0, "the clear to evict every request")
    engine.close()
    eventually(lambda: not feed.live, "the disconnection to be noticed")
    again = asyncio.run(cp.search(QUESTIONS[0], filters=F, top_k=4))  # the engine is gone: still served
    assert again["context_pilot"]["fallback"] is False and first["results"]
