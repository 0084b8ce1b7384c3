"""The index owns what leaves it: every eviction, whatever its cause, goes to its subscribers, once, in order.

The paper's example cache: three requests of blocks that cost 2 tokens each. The capacity model, the engine's
own eviction (``evict``), the owner's bound (``trim``) and a flush (``clear``) all reach a subscriber — the mem0
wrapper's per-scope bookkeeping and the engine feed's watches are such subscribers.
"""

from __future__ import annotations

from collections.abc import Hashable

import pytest

from cp_memory.core.index import ContextIndex


def test_every_way_out_of_the_index_is_heard_by_its_subscribers() -> None:
    index = ContextIndex(capacity_tokens=8)
    heard: list[Hashable] = []
    index.subscribe(heard.append)
    lens = [2, 2]
    index.insert(["m1", "m2"], "r1", token_lens=lens)
    index.insert(["m3", "m4"], "r2", token_lens=lens)
    index.insert(["m5", "m6"], "r3", token_lens=lens)  # 12 tokens > 8: the least recently used goes
    assert heard == ["r1"] and index.request_ids() == ["r2", "r3"]
    assert index.evict("r2") and heard == ["r1", "r2"]  # the engine dropped it
    assert not index.evict("r2") and heard == ["r1", "r2"]  # once
    index.insert(["m7"], "r4", token_lens=[1])
    assert index.trim(1) == ["r3"] and heard[-1] == "r3"  # the owner's bound: the earliest inserted first
    index.clear()
    assert heard == ["r1", "r2", "r3", "r4"] and len(index) == 0


def test_a_paused_capacity_model_evicts_on_resume_and_says_so() -> None:
    index = ContextIndex(capacity_tokens=4)
    heard: list[Hashable] = []
    index.subscribe(heard.append)
    index.use_capacity_model(False)  # an engine feed is live: the engine reports evictions
    for i in range(3):
        index.insert([f"m{i}"], f"r{i}", token_lens=[2])
    assert heard == []
    index.use_capacity_model(True)  # the feed is lost: back down to capacity at once
    assert heard == ["r0"]


def test_a_subscriber_may_call_back_into_the_index_and_one_that_raises_is_only_logged(caplog) -> None:
    index = ContextIndex()
    seen: list[int] = []
    index.subscribe(lambda rid: seen.append(len(index)))  # the lock is released: no deadlock
    index.subscribe(lambda rid: 1 / 0)
    index.insert(["m1"], "r1")
    assert index.evict("r1") and seen == [0]
    assert "subscriber of this index's evictions failed" in caplog.text


def test_unsubscribe_and_bad_arguments() -> None:
    index = ContextIndex()
    heard: list[Hashable] = []
    stop = index.subscribe(heard.append)
    stop()
    index.insert(["m1"], "r1")
    index.evict("r1")
    assert heard == []
    with pytest.raises(TypeError, match="on_evict must be callable"):
        index.subscribe("nope")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_requests"):
        index.trim(True)
