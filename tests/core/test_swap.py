"""Swap alignment: adopt cached blocks the request did not retrieve, drop as many of its own
lowest-ranked unprotected blocks, keep the prompt length."""

from __future__ import annotations

import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cp_memory.core.annotations import doc_label, order_annotation
from cp_memory.core.index import ContextIndex
from tests.core.oracles import best_reusable_prefix, live_orders

request = st.lists(st.integers(0, 30), min_size=0, max_size=14)
stream = st.lists(request, min_size=1, max_size=25)


def is_cached_prefix(orders, prefix) -> bool:
    return any(tuple(o[: len(prefix)]) == tuple(prefix) for o in orders) or not prefix


@settings(max_examples=200, deadline=None)
@given(stream, st.sampled_from([0.1, 0.25, 0.5, 1.0]), st.sampled_from([0.0, 0.3, 0.5, 0.9]))
def test_swap_keeps_the_length_and_never_drops_a_protected_block(requests, budget, protect):
    index = ContextIndex(swap_budget=budget, protect=protect)
    for blocks in requests:
        before = live_orders(index)
        exact = best_reusable_prefix(before, blocks)
        distinct = list(dict.fromkeys(blocks))
        n = len(distinct)
        dry = index.match(blocks)
        p = index.insert(blocks)
        assert (dry.order, dry.prefix_len, dry.extra, dry.dropped) == (p.order, p.prefix_len, p.extra, p.dropped)
        assert set(p.order) == (set(distinct) - set(p.dropped)) | set(p.extra)
        assert len(p.order) == len(set(p.order)) == n
        assert len(p.extra) == len(p.dropped) <= int(budget * n)
        top = set(distinct[: math.ceil(protect * n - 1e-9)])
        assert not set(p.dropped) & top
        assert set(p.extra) <= set(p.order[: p.prefix_len]) and not set(p.extra) & set(distinct)
        assert set(p.dropped) <= set(distinct) and not set(p.dropped) & set(p.order)
        assert list(p.dropped) == sorted(p.dropped, key=distinct.index)  # rank order
        # the dropped ones are the lowest-ranked unprotected blocks that are not on the prefix
        spare = [b for b in distinct if b not in top and b not in p.order[: p.prefix_len]]
        assert list(p.dropped) == spare[len(spare) - len(p.dropped) :] if p.dropped else True
        assert p.prefix_len >= exact and is_cached_prefix(before, p.order[: p.prefix_len])


def test_swap_adopts_the_whole_cached_context_at_constant_length():
    index = ContextIndex(swap_budget=0.2, protect=0.5)
    index.insert(list(range(10)), "warm")  # cached: 0 1 ... 9
    request = [1, 2, 3, 4, 5, 6, 7, 8, 50, 51]  # lacks 0 and 9; 50, 51 ranked last
    p = index.insert(request)
    assert p.order == tuple(range(10)) and p.prefix_len == 10
    assert p.extra == (0, 9) and p.dropped == (50, 51)
    # superset on the same state adds instead: the prompt grows, ends on a request block
    sup = ContextIndex(extra_budget=0.2)
    sup.insert(list(range(10)), "warm")
    q = sup.insert(request)
    assert q.extra == (0,) and q.dropped == () and len(q.order) == 11 and q.prefix_len == 9
    # exact alignment reuses nothing: the cached context starts with a block the request lacks
    exact = ContextIndex()
    exact.insert(list(range(10)), "warm")
    assert exact.insert(request).prefix_len == 0


def test_protect_bounds_what_may_be_dropped():
    index = ContextIndex(swap_budget=0.5, protect=0.8)
    index.insert(list(range(10)), "warm")
    p = index.insert([1, 2, 3, 4, 5, 6, 7, 8, 50, 51])  # top 8 protected: only 50 and 51 may go
    assert set(p.dropped) <= {50, 51} and p.prefix_len == 10
    full = ContextIndex(swap_budget=1.0, protect=1.0)
    full.insert(list(range(10)), "warm")
    q = full.insert([1, 2, 3, 50])
    assert q.dropped == () and q.extra == () and q.prefix_len == 0


def test_swap_never_drops_blocks_it_needs_to_reach_its_prefix():
    # the cached prefix holds the request's low-ranked blocks: they are reused, not droppable
    index = ContextIndex(swap_budget=0.5, protect=0.0)
    index.insert(["x", "d", "c"], "warm")
    p = index.insert(["a", "b", "c", "d"])  # droppable: all; c, d are on the prefix
    assert p.order[:3] == ("x", "d", "c") and p.extra == ("x",) and p.dropped == ("b",)
    assert p.order == ("x", "d", "c", "a")


def test_order_annotation_ranks_only_what_is_shown():
    index = ContextIndex(swap_budget=0.2, protect=0.5)
    index.insert(list(range(10)), "warm")
    request = [1, 2, 3, 4, 5, 6, 7, 8, 50, 51]
    p = index.insert(request)
    labels = {b: doc_label(i + 1) for i, b in enumerate(p.order)}
    text = order_annotation(request, p.order, label=labels, dropped=p.dropped)
    assert text.count("[Doc") == 8 and "[Doc 1]" not in text and "[Doc 10]" not in text
    with pytest.raises(ValueError, match="lost"):
        order_annotation(request, p.order, label=labels)


@pytest.mark.parametrize(
    "kwargs",
    [
        {"swap_budget": 0.1, "extra_budget": 0.1},
        {"swap_budget": 1.5},
        {"protect": -0.1},
        {"protect": float("nan")},
        {"swap_budget": True},
    ],
)
def test_bad_swap_options(kwargs):
    with pytest.raises(ValueError):
        ContextIndex(**kwargs)


def test_swap_options_survive_a_snapshot_and_can_be_overridden():
    index = ContextIndex(swap_budget=0.2, protect=0.7)
    index.insert(list(range(10)), "warm")
    data = index.snapshot()
    again = ContextIndex.restore(data)
    assert (again.swap_budget, again.protect) == (0.2, 0.7)
    off = ContextIndex.restore(data, swap_budget=0.0)
    assert off.insert([1, 2, 3, 4, 5, 6, 7, 8, 50, 51]).dropped == ()
    superset = ContextIndex.restore(data, extra_budget=0.1)  # choosing superset turns swap off
    assert (superset.extra_budget, superset.swap_budget) == (0.1, 0.0)
    with pytest.raises(ValueError, match="exclusive"):
        ContextIndex.restore(data, extra_budget=0.1, swap_budget=0.1)
