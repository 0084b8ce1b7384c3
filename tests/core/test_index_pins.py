"""In-flight requests are pinned: the capacity model never evicts one until it is released.

An engine never drops the KV cache of a request it is still running (SGLang's ``inc_lock_ref`` /
``dec_lock_ref`` on the radix tree); the index's capacity model must not either, or it would align the next
request against a cache that lost the wrong entry. A caller that unpins before its next request sees
exactly the index it would have seen without pins.
"""

from __future__ import annotations

import random

from cp_memory.core.index import ContextIndex


def model() -> ContextIndex:
    """Room for 4 blocks of 2 tokens."""
    return ContextIndex(capacity_tokens=8, token_len=lambda b: 2)


def test_capacity_pressure_would_evict_an_in_flight_request_and_the_pin_prevents_it() -> None:
    unpinned, pinned = model(), model()
    for index, pin in ((unpinned, False), (pinned, True)):
        index.insert(["alice-1", "alice-2"], "alice", pin=pin)  # Alice's call is still running
        index.insert(["bob-1", "bob-2"], "bob")
        index.insert(["carol-1", "carol-2"], "carol")  # over capacity: the least recently used must go
    assert "alice" not in unpinned and {"bob", "carol"} <= set(unpinned.request_ids())
    assert "alice" in pinned and "bob" not in pinned and pinned.pinned == 1
    assert pinned.cached_tokens == 8


def test_a_released_request_is_evictable_again_from_the_next_insert_on() -> None:
    index = model()
    index.insert(["a1", "a2"], "alice", pin=True)
    index.insert(["b1", "b2"], "bob", pin=True)
    index.insert(["c1", "c2"], "carol")  # only carol's own path is unpinned: over capacity for now
    assert set(index.request_ids()) == {"alice", "bob", "carol"} and index.cached_tokens == 12
    assert index.unpin("alice") and index.unpin("bob") and index.pinned == 0
    assert len(index) == 3  # unpinning evicts nothing by itself
    index.insert(["d1"], "dave")
    assert set(index.request_ids()) == {"carol", "dave"} and index.cached_tokens <= 8


def test_a_pin_keeps_the_path_its_request_shares_with_others() -> None:
    index = model()
    index.insert(["system", "doc"], "alice", pin=True)
    index.insert(["system", "other"], "bob")
    index.insert(["x", "y"], "carol")  # over: bob's leaf goes, the shared "system" stays with alice
    assert index.order_of("alice") == ("system", "doc") and "bob" not in index
    assert index.match(["system", "doc"]).prefix_len == 2


def test_pins_count_and_go_with_their_request() -> None:
    index = model()
    index.insert(["a"], "alice")
    assert index.pin("alice") and index.pin("alice") and index.pinned == 1
    assert index.unpin("alice") and index.pinned == 1 and index.unpin("alice") and index.pinned == 0
    assert not index.unpin("alice") and not index.pin("nobody") and not index.pin(["unhashable"])
    index.pin("alice")
    assert index.evict("alice") and index.pinned == 0  # the engine's own eviction still applies
    index.insert(["b"], "bob", pin=True)
    index.clear()
    assert index.pinned == 0 and not index.unpin("bob")


def test_the_engines_feed_still_rules_while_a_request_is_pinned() -> None:
    index = model()
    index.use_capacity_model(False)  # the engine reports its evictions
    index.insert(["a1", "a2"], "alice", pin=True)
    for rid in ("bob", "carol"):
        index.insert([f"{rid}-1", f"{rid}-2"], rid)
    assert len(index) == 3  # the model does not evict while the feed is live
    index.use_capacity_model(True)  # the feed is lost: back to the model, which spares the pinned request
    assert "alice" in index and "bob" not in index and index.cached_tokens == 8


def test_pinning_each_request_until_the_next_one_changes_nothing() -> None:
    """Sequential calls (each released before the next request): the same placements and evictions."""
    rng = random.Random(7)
    plain = ContextIndex(capacity_tokens=30, token_len=lambda b: 2)
    pinning = ContextIndex(capacity_tokens=30, token_len=lambda b: 2)
    for step in range(2000):
        blocks = rng.sample(range(20), rng.randint(1, 6))
        a = plain.insert(blocks, step)
        b = pinning.insert(blocks, step, pin=True)
        assert (a.order, a.prefix_len, a.extra) == (b.order, b.prefix_len, b.extra), f"diverged at step {step}"
        assert pinning.unpin(step) or step not in pinning
        if rng.random() < 0.2:
            gone = rng.choice(plain.request_ids())
            assert plain.evict(gone) and pinning.evict(gone)
        assert plain.request_ids() == pinning.request_ids() and pinning.pinned == 0
