"""The capacity model evicts exactly like an LRU cache, also after its heap of leaves is compacted.

A brute-force model keeps, per distinct cached context, its last access tick and the requests ending
there; on overflow it drops the least recently used context other than the one just inserted — what
SGLang's RadixCache does for contexts that share no prefix. The index must agree after every operation
of a long random stream that mixes long-lived requests, transient insert/evict pairs (which leave stale
heap entries behind) and repeats of cached contexts.
"""

from __future__ import annotations

import random

import pytest

from cp_memory.core.index import ContextIndex
from cp_memory.core.live_trie import LiveTrie
from cp_memory.core.tree import Node

CAP, TOK = 400, 4


class BruteForceLRU:
    def __init__(self, capacity: int, tok: int) -> None:
        self.capacity, self.tok = capacity, tok
        self.entries: dict[tuple, list] = {}  # context -> [last access tick, set of request ids]
        self.tick = 0

    def insert(self, key: tuple, rid: int) -> None:
        self.tick += 1
        entry = self.entries.setdefault(key, [0, set()])
        entry[0] = self.tick
        entry[1].add(rid)
        while self.tok * sum(len(k) for k in self.entries) > self.capacity:
            oldest = min((k for k in self.entries if k != key), key=lambda k: self.entries[k][0])
            del self.entries[oldest]

    def evict(self, rid: int) -> None:
        for key, (_, rids) in list(self.entries.items()):
            rids.discard(rid)
            if not rids:
                del self.entries[key]

    def live(self) -> set[int]:
        return {r for _, rids in self.entries.values() for r in rids}


@pytest.mark.parametrize("seed", range(4))
def test_capacity_evictions_match_a_brute_force_lru_over_a_long_stream(seed):
    rng = random.Random(seed)
    index = ContextIndex(capacity_tokens=CAP, token_len=lambda b: TOK)
    model = BruteForceLRU(CAP, TOK)
    fresh = 0
    for step in range(5000):
        quiet = step % 2500 >= 500  # quiet phases: mostly transient requests, few long-lived
        p_evict, p_long = (0.0, 0.01) if quiet else (0.05, 0.5)
        r = rng.random()
        live = sorted(model.live())
        if live and r < p_evict:
            rid = rng.choice(live)
            assert index.evict(rid)
            model.evict(rid)
            continue
        if model.entries and rng.random() < 0.1:
            key = rng.choice(sorted(model.entries))  # a repeat: refreshes that context
        else:
            key = tuple(range(fresh, fresh + rng.randint(1, 4)))
            fresh += 10
        index.insert(list(key), step)
        model.insert(key, step)
        if r >= p_evict + p_long:  # transient: the engine finished it
            assert index.evict(step)
            model.evict(step)
        assert set(index.request_ids()) == model.live(), f"diverged at step {step}"
        assert index.cached_tokens == TOK * sum(len(k) for k in model.entries) <= CAP
    assert len(index._live.lru) <= 4 * len(index) + 1024 + 1  # stale heap entries stay bounded


class ScanLiveTrie(LiveTrie):
    """Reference capacity model: scan every leaf for the least recently used one (no heap)."""

    def enforce_capacity(self, protect: Node | None) -> None:
        assert self.capacity_tokens is not None
        path = set()
        n: Node | None = protect
        while n is not None:
            path.add(id(n))
            n = n.parent
        while self.tokens > self.capacity_tokens:
            leaves = [x for x in _nodes(self.root) if x.parent is not None and not x.children and id(x) not in path]
            if not leaves:
                return
            self.drop_leaf(min(leaves, key=lambda x: x.last_access))
            self.evicted_by_capacity += 1


def _nodes(root: Node):
    stack = [root]
    while stack:
        n = stack.pop()
        yield n
        stack.extend(n.children.values())


@pytest.mark.parametrize("seed", range(3))
def test_capacity_evictions_with_shared_prefixes_match_a_leaf_scan(seed):
    rng = random.Random(100 + seed)
    index = ContextIndex(capacity_tokens=30, token_len=lambda b: 2)
    scan = ContextIndex(capacity_tokens=30, token_len=lambda b: 2)
    scan._live = ScanLiveTrie(30)
    for step in range(3000):
        live = index.request_ids()
        if live and rng.random() < 0.3:
            rid = rng.choice(sorted(live))
            assert index.evict(rid) and scan.evict(rid)
            continue
        blocks = rng.sample(range(20), rng.randint(1, 6))  # a small universe: prefixes are shared
        a, b = index.insert(blocks, step), scan.insert(blocks, step)
        assert (a.order, a.prefix_len) == (b.order, b.prefix_len), f"diverged at step {step}"
        assert sorted(index.request_ids()) == sorted(scan.request_ids())
        assert index.cached_tokens == scan.cached_tokens <= 30
        if rng.random() < 0.6:
            assert index.evict(step) and scan.evict(step)
    assert index.evicted_by_capacity == scan.evicted_by_capacity > 0
