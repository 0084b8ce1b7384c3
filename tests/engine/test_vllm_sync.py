"""The engine's evictions reach the context index: BlockMirror + KVCacheSync on hand-written event batches.

The events are the ones vLLM publishes (block size 4 here to keep token lists short): a prompt's full
blocks are stored as a chain of hashes; removing any block of a tracked request's chain evicts that
request from its ContextIndex — and only that request.
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

from cp_memory.core.index import ContextIndex
from cp_memory.engine.kv_events import AllBlocksCleared, BlockRemoved, BlockStored, EventBatch, KVEvent
from cp_memory.engine.kv_mirror import BlockMirror, Presence
from cp_memory.engine.kv_sync import EvictionCause, KVCacheSync

B = 4  # tokens per block


class Engine:
    """Writes the event batches an engine with ``B``-token blocks would publish (hash = position + tokens)."""

    def __init__(self, sync: KVCacheSync) -> None:
        self.sync = sync
        self.seq = 0

    def chain(self, tokens: Sequence[int]) -> list[tuple[int, ...]]:
        return [tuple(tokens[: (i + 1) * B]) for i in range(len(tokens) // B)]

    @staticmethod
    def h(prefix: tuple[int, ...]) -> int:
        return hash(("block", prefix))

    def stored(self, tokens: Sequence[int], start_block: int = 0) -> BlockStored:
        chain = self.chain(tokens)[start_block:]
        parent = self.h(self.chain(tokens)[start_block - 1]) if start_block else None
        toks = tuple(tokens[start_block * B : (start_block + len(chain)) * B])
        return BlockStored(tuple(self.h(c) for c in chain), parent, toks, B, "GPU")

    def removed(self, tokens: Sequence[int], *blocks: int) -> BlockRemoved:
        chain = self.chain(tokens)
        return BlockRemoved(tuple(self.h(chain[i]) for i in blocks), "GPU")

    def publish(self, *events: KVEvent) -> None:
        self.sync.apply(EventBatch(self.seq, 0.0, tuple(events)))
        self.seq += 1


SHARED = list(range(100, 108))  # two blocks both prompts start with (the aligned memories)
P1 = SHARED + [1, 2, 3, 4, 5, 6, 7, 8]
P2 = SHARED + [9, 9, 9, 9]


@pytest.fixture()
def setup() -> tuple[KVCacheSync, Engine, ContextIndex]:
    sync = KVCacheSync()
    engine = Engine(sync)
    index = ContextIndex(capacity_tokens=1000)
    sync.attach(index)
    return sync, engine, index


def test_a_removed_block_evicts_the_request_that_needs_it_and_no_other(setup) -> None:
    sync, engine, index = setup
    r1 = index.insert(["m1", "m2", "m3"], "r1")
    r2 = index.insert(["m1", "m2", "m4"], "r2")
    engine.publish(engine.stored(P1), engine.stored(P2, start_block=2))
    sync.track(index, r1.request_id, P1)
    sync.track(index, r2.request_id, P2)
    assert sync.live and len(sync.mirror) == 5

    engine.publish(engine.removed(P1, 3))  # the engine frees r1's last block (tail first)
    assert "r1" not in index and "r2" in index
    assert index.order_of("r2") == ("m1", "m2", "m4")

    engine.publish(engine.removed(P1, 1))  # a shared block: r2 can no longer hit its prefix either
    assert "r2" not in index
    assert sync.stats.evicted == 2 and sync.tracked == 0
    assert sync.stats.causes == {EvictionCause.REMOVED.value: 2}


def test_only_the_tracked_prefix_counts(setup) -> None:
    """The question after the memories is not the index's business: its blocks may go."""
    sync, engine, index = setup
    index.insert(["m1", "m2"], "r1")
    engine.publish(engine.stored(P1))
    sync.track(index, "r1", SHARED)  # the block section: the first 8 tokens
    engine.publish(engine.removed(P1, 3, 2))
    assert "r1" in index
    engine.publish(engine.removed(P1, 0))
    assert "r1" not in index


def test_events_after_the_request_resolve_it(setup) -> None:
    """The response can beat the engine's BlockStored to us: the request waits, then is watched."""
    sync, engine, index = setup
    index.insert(["m1"], "r1")
    sync.track(index, "r1", P1)
    assert sync.mirror.lookup(P1).presence is Presence.UNKNOWN
    engine.publish(engine.stored(P1))
    engine.publish(engine.removed(P1, 2))
    assert "r1" not in index


def test_blocks_stored_and_removed_before_tracking_evict_after_the_grace(setup) -> None:
    sync, engine, index = setup
    index.insert(["m1"], "r1")
    engine.publish(engine.stored(P1))
    engine.publish(engine.removed(P1, 3, 2, 1, 0))
    sync.track(index, "r1", P1)
    assert "r1" in index  # it might be stored again, in a batch still on its way
    for _ in range(sync.pending_batches):
        engine.publish()
    assert "r1" not in index
    assert sync.stats.causes == {EvictionCause.REMOVED_WHILE_PENDING.value: 1}


def test_unknown_blocks_expire_without_evicting(setup) -> None:
    sync, engine, index = setup
    index.insert(["m1"], "r1")
    sync.track(index, "r1", P1)
    for _ in range(sync.pending_batches):
        engine.publish()
    assert "r1" in index and sync.stats.expired == 1 and sync.tracked == 0


def test_an_engine_cache_reset_evicts_every_tracked_request(setup) -> None:
    sync, engine, index = setup
    index.insert(["m1"], "r1")
    index.insert(["m5"], "untracked")
    engine.publish(engine.stored(P1))
    sync.track(index, "r1", P1)
    engine.publish(AllBlocksCleared())
    assert "r1" not in index
    assert "untracked" in index  # the sync only answers for requests it was told about
    assert len(sync.mirror) == 0
    assert sync.stats.causes == {EvictionCause.CLEARED.value: 1}


def test_our_flush_is_not_applied_twice(setup) -> None:
    """vLLM reports a reset with its next step: by then requests sent after the flush are tracked."""
    sync, engine, index = setup
    index.insert(["m1"], "before")
    engine.publish(engine.stored(P1))
    sync.track(index, "before", P1)
    sync.flushed()  # POST /reset_prefix_cache answered 200
    assert "before" not in index
    index.insert(["m1"], "after")
    sync.track(index, "after", P1)
    engine.publish(AllBlocksCleared(), engine.stored(P1))  # the next step: the clear, then the new blocks
    assert "after" in index
    engine.publish(engine.removed(P1, 0))
    assert "after" not in index
    assert sync.stats.causes == {EvictionCause.FLUSHED.value: 1, EvictionCause.REMOVED.value: 1}  # one cause each


def test_the_capacity_model_is_paused_while_the_feed_is_live_and_back_when_it_is_lost() -> None:
    sync = KVCacheSync()
    engine = Engine(sync)
    index = ContextIndex(capacity_tokens=3)
    sync.attach(index)
    index.insert(["a"], "r1", token_lens=[2])
    index.insert(["b"], "r2", token_lens=[2])
    assert "r1" not in index  # not live yet (no event seen): the model evicts
    engine.publish()  # sequence 0: the engine's first batch, we have seen everything
    assert sync.live
    index.insert(["c"], "r3", token_lens=[2])
    index.insert(["d"], "r4", token_lens=[2])
    assert {"r2", "r3", "r4"} <= set(index.request_ids())  # 6 tokens > 3: the engine decides now

    sync.lost("1 message(s) lost before sequence 7")
    assert not sync.live
    assert index.request_ids() == ["r4"]  # the fallback evicts down to capacity at once
    assert index.cached_tokens <= 3

    engine.publish(AllBlocksCleared())  # a known state again
    assert sync.live


def test_a_feed_joined_late_keeps_the_capacity_model_until_a_clear() -> None:
    sync = KVCacheSync()
    index = ContextIndex(capacity_tokens=2)
    sync.attach(index)
    sync.apply(EventBatch(41, 0.0, ()))  # blocks stored before we listened are unknown
    assert not sync.live
    index.insert(["a"], "r1", token_lens=[2])
    index.insert(["b"], "r2", token_lens=[2])
    assert "r1" not in index


def test_removals_are_applied_while_the_feed_is_lost(setup) -> None:
    sync, engine, index = setup
    index.insert(["m1"], "r1")
    engine.publish(engine.stored(P1))
    sync.track(index, "r1", P1)
    sync.lost("malformed message")
    engine.publish(engine.removed(P1, 0))
    assert "r1" not in index


def test_use_capacity_model_without_capacity_is_a_no_op() -> None:
    index = ContextIndex()
    index.use_capacity_model(False)
    index.insert(["a"], "r1")
    index.use_capacity_model(True)
    assert "r1" in index


def test_the_mirror_follows_chains_and_ignores_other_media() -> None:
    mirror = BlockMirror()
    engine = Engine(KVCacheSync())
    mirror.apply(engine.stored(P1))
    assert mirror.block_size == B and mirror.medium == "GPU"
    assert mirror.lookup(P1).presence is Presence.HELD
    assert mirror.lookup(P1[:6]).blocks == 1  # one full block in 6 tokens
    assert mirror.lookup(P2).presence is Presence.UNKNOWN
    offload = BlockRemoved(engine.removed(P1, 0).block_hashes, "CPU")
    assert mirror.apply(offload) == []  # an offload tier's event
    assert mirror.lookup(P1).presence is Presence.HELD
    assert mirror.apply(engine.removed(P1, 1)) == [engine.h(tuple(P1[:8]))]
    assert mirror.lookup(P1).presence is Presence.REMOVED
    assert mirror.cached_tokens == B * 3


def test_a_request_without_token_ids_is_left_to_the_capacity_model(setup, caplog) -> None:
    """tokenize() answered nothing: the request is not tracked, and nothing is raised into its flow."""
    sync, engine, index = setup
    index.insert(["m1"], "r1")
    assert sync.track(index, "r1", None) is False
    assert sync.track(index, "r1", ["not", "ids"]) is False
    assert sync.tracked == 0 and "not tracked" in caplog.text
    assert sync.track(index, "r1", P1) is True


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="pending_batches"):
        KVCacheSync(pending_batches=0)
    with pytest.raises(ValueError, match="block_size"):
        BlockMirror(block_size=0)
    # a count is an int and never a bool (cp_memory.core.checks): True was taken as 1 before
    for bad in ({"pending_batches": True}, {"max_tracked": True}, {"engine_blocks": False}):
        with pytest.raises(ValueError, match=f"{next(iter(bad))} must be an int >= 1, got"):
            KVCacheSync(**bad)
    with pytest.raises(ValueError, match="block_size must be an int >= 1, got True"):
        BlockMirror(block_size=True)


# ---------------------------------------------------------------------------------------------
# sections: the block lines of a prompt, tokenised alone, wherever they sit in it
# ---------------------------------------------------------------------------------------------

PREAMBLE = [7, 7, 7, 7, 7, 7]  # a system prompt / chat template / history: 6 tokens, not a block multiple
SECTION = list(range(200, 212))  # the memories' lines: 12 tokens, starting 2 tokens into block 1
QUESTION = [1, 2, 3, 4, 5]
PROMPT = PREAMBLE + SECTION + QUESTION  # 23 tokens: blocks 0 (preamble), 1 (mixed), 2, 3, 4 (mixed)


def test_a_section_is_found_after_a_preamble_it_does_not_know(setup) -> None:
    """Blocks 2 and 3 lie inside the section; the engine reuses them only after blocks 0 and 1."""
    sync, engine, index = setup
    engine.publish(engine.stored(PROMPT))
    found = sync.mirror.find_section(SECTION)
    chain = [engine.h(tuple(PROMPT[: (i + 1) * B])) for i in range(5)]
    assert found.presence is Presence.HELD and found.hashes == tuple(chain[:4])
    assert sync.mirror.find_section(list(range(300, 312))).presence is Presence.UNKNOWN
    assert sync.mirror.find_section(SECTION[:3]).presence is Presence.UNKNOWN  # shorter than a block


def test_a_tracked_section_goes_with_its_blocks_or_its_preamble_but_not_the_question(setup) -> None:
    sync, engine, index = setup
    index.insert(["m1", "m2", "m3"], "r1")
    engine.publish(engine.stored(PROMPT))
    assert sync.track_section(index, "r1", SECTION) and sync.pending == 0
    engine.publish(engine.removed(PROMPT, 4))  # the question's block
    assert "r1" in index
    engine.publish(engine.removed(PROMPT, 0))  # the preamble: nothing after it can hit any more
    assert "r1" not in index and sync.stats.evicted == 1


def test_a_section_tracked_before_its_blocks_is_resolved_by_them(setup) -> None:
    sync, engine, index = setup
    index.insert(["m1"], "r1")
    sync.track_section(index, "r1", SECTION)
    assert sync.pending == 1
    engine.publish(engine.stored(PROMPT))
    assert sync.pending == 0 and sync.tracked == 1
    engine.publish(engine.removed(PROMPT, 2))
    assert "r1" not in index


def test_the_same_section_after_two_preambles_watches_the_newest_chain(setup) -> None:
    sync, engine, index = setup
    index.insert(["m1"], "r1")
    older = [8, 8, 8, 8, 8, 8] + SECTION + QUESTION
    engine.publish(engine.stored(older))
    engine.publish(engine.stored(PROMPT))
    sync.track_section(index, "r1", SECTION)
    engine.publish(engine.removed(older, 2, 3))  # the same lines after another history: not this prompt's
    assert "r1" in index
    engine.publish(engine.removed(PROMPT, 3))
    assert "r1" not in index


def test_a_section_whose_blocks_were_dropped_before_tracking_is_evicted_after_the_grace(setup) -> None:
    sync, engine, index = setup
    index.insert(["m1"], "r1")
    engine.publish(engine.stored(PROMPT))
    engine.publish(engine.removed(PROMPT, 4, 3, 2))
    sync.track_section(index, "r1", SECTION)
    for _ in range(sync.pending_batches):
        engine.publish()
    assert "r1" not in index


def test_detach_hands_the_index_back_to_its_capacity_model(setup) -> None:
    sync, engine, index = setup
    small = ContextIndex(capacity_tokens=2)
    sync.attach(small)
    engine.publish(engine.stored(PROMPT))  # the engine's first batch: live
    small.insert(["a"], "r1", token_lens=[2])
    small.insert(["b"], "r2", token_lens=[2])
    assert {"r1", "r2"} <= set(small.request_ids())  # live: the engine decides
    sync.track_section(small, "r2", SECTION)
    sync.detach(small)
    assert small.request_ids() == ["r2"] and sync.tracked == 0
    engine.publish(AllBlocksCleared())  # no longer followed: the engine's clear is not this index's
    assert "r2" in small
