import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cp_memory.core.index import ContextIndex, Placement
from cp_memory.core.tree import prefix_of
from tests.core.oracles import best_reusable_prefix, live_orders

request = st.lists(st.integers(0, 30), min_size=0, max_size=12)
stream = st.lists(request, min_size=1, max_size=25)


@settings(max_examples=150, deadline=None)
@given(stream, st.sampled_from(["frequency", "retrieval"]))
def test_alignment_is_a_permutation_and_finds_the_longest_live_prefix(requests, tail):
    index = ContextIndex(tail_order=tail)
    for blocks in requests:
        expect = best_reusable_prefix(live_orders(index), blocks)
        p = index.insert(blocks)
        distinct = list(dict.fromkeys(blocks))
        assert sorted(p.order) == sorted(distinct)  # a permutation, nothing lost or doubled
        assert p.extra == ()
        assert p.prefix_len == expect  # no live context offers a longer prefix
        assert len(p.duplicates) == len(blocks) - len(distinct)
        assert index.order_of(p.request_id) == (p.order if p.order else None)  # empty: not indexed


@settings(max_examples=100, deadline=None)
@given(stream, st.sampled_from([0.1, 0.25, 0.5]))
def test_superset_alignment_keeps_every_block_and_never_does_worse(requests, budget):
    index = ContextIndex(extra_budget=budget)
    for blocks in requests:
        exact = best_reusable_prefix(live_orders(index), blocks)
        p = index.insert(blocks)
        distinct = list(dict.fromkeys(blocks))
        assert set(p.order) == set(distinct) | set(p.extra)
        assert len(p.order) == len(set(p.order))
        assert not set(p.extra) & set(distinct)
        assert len(p.extra) <= int(budget * len(distinct))
        reused_own = sum(1 for b in p.order[: p.prefix_len] if b in set(distinct))
        assert reused_own >= exact


def test_superset_adopts_a_longer_cached_prefix():
    index = ContextIndex(extra_budget=0.25)
    index.insert(list(range(10)), "warm")  # cached: 0 1 2 ... 9
    p = index.insert([1, 2, 3, 4, 5, 6, 7, 8])  # lacks block 0, which leads the cached prefix
    assert p.extra == (0,)
    assert p.order[:9] == tuple(range(9)) and p.prefix_len == 9
    exact = ContextIndex()
    exact.insert(list(range(10)))
    assert exact.insert([1, 2, 3, 4, 5, 6, 7, 8]).prefix_len == 0


def test_evict_prunes_and_unknown_is_noop():
    index = ContextIndex()
    a = index.insert([1, 2, 3], "a")
    index.insert([1, 2, 4], "b")
    assert index.evict("a") is True
    assert index.evict("a") is False
    assert index.evict("never") is False
    assert index.evict(["unhashable"]) is False
    assert len(index) == 1
    assert index.insert([1, 2, 3]).prefix_len == 2
    index.evict("b")
    assert a.order == (1, 2, 3)


def test_evicted_prefix_is_not_reused():
    index = ContextIndex()
    index.insert([1, 2, 3], "a")
    index.evict("a")
    assert len(index) == 0 and index.node_count == 1
    assert index.insert([3, 2, 1]).prefix_len == 0


def test_identical_contexts_share_a_leaf():
    index = ContextIndex()
    p1 = index.insert(["x", "y", "z"])
    p2 = index.insert(["z", "y", "x"])
    assert p2.order == p1.order and p2.prefix_len == 3 and p2.search_path == p1.search_path
    assert len(index) == 2


def test_capacity_model_evicts_lru_and_never_aligns_to_dropped_prefix():
    index = ContextIndex(capacity_tokens=100, token_len=lambda b: 10)
    index.insert([1, 2, 3, 4, 5], "old")  # 50 tokens
    index.insert([6, 7, 8, 9, 10], "mid")  # 100 tokens
    # reuses (1,2) and touches it; +10 tokens -> the least recently used radix leaf goes, as in SGLang:
    # old's unshared tail (3,4,5), last used before "mid"
    index.insert([1, 2, 11], "touch-old")
    assert "old" not in index and "mid" in index and "touch-old" in index
    assert index.cached_tokens <= 100 and index.evicted_by_capacity == 1
    assert index.insert([3, 4, 5]).prefix_len == 0  # dropped: never aligned to again
    assert index.insert([2, 1]).prefix_len == 2  # the shared prefix is still cached


def test_capacity_with_explicit_token_lens():
    index = ContextIndex(capacity_tokens=1000)
    index.insert(["a", "b"], "r1", token_lens=[400, 400])
    index.insert(["c"], "r2", token_lens=[300])
    assert "r1" not in index and index.cached_tokens == 300


def test_request_ids_and_duplicates():
    index = ContextIndex()
    p = index.insert([1, 1, 2, 1], request_id="req-1")
    assert p.order == (1, 2) and p.duplicates == (1, 1) and p.request_id == "req-1"
    with pytest.raises(ValueError, match="already live"):
        index.insert([3], request_id="req-1")
    q = index.insert([3])
    assert isinstance(q.request_id, str) and len(q.request_id) == 32


def test_empty_request_gives_empty_placement():
    index = ContextIndex()
    p = index.insert([])
    assert isinstance(p, Placement) and p.order == () and p.prefix_len == 0 and p.search_path == ()
    assert len(index) == 0


@pytest.mark.parametrize("bad", [None, "abc", {1: 2}, {1, 2}, 5, [[1], 2], [None], [{"a": 1}]])
def test_bad_input_is_rejected_with_a_clear_type_error(bad):
    with pytest.raises(TypeError, match="block|blocks"):
        ContextIndex().insert(bad)


@pytest.mark.parametrize(
    "kwargs",
    [{"alpha": -1}, {"extra_budget": 2}, {"capacity_tokens": 0}, {"tail_order": "random"}, {"linkage": "ward"}],
)
def test_bad_options(kwargs):
    with pytest.raises(ValueError):
        ContextIndex(**kwargs)


def test_token_counts_are_ints_never_bools():
    """The index's token counts share cp_memory.core.checks: the entry and the argument are named."""
    with pytest.raises(ValueError, match="capacity_tokens must be an int >= 1, got True"):
        ContextIndex(capacity_tokens=True)
    with pytest.raises(ValueError, match=r"token_lens\[1\] must be an int >= 0, got -3"):
        ContextIndex().insert(["a", "b"], token_lens=[2, -3])
    with pytest.raises(ValueError, match=r"token_len\('a'\) must be an int >= 0, got 1.5"):
        ContextIndex(capacity_tokens=10, token_len=lambda b: 1.5).insert(["a"])


def test_any_hashable_ids_and_snapshot_round_trip():
    index = ContextIndex(capacity_tokens=10_000, extra_budget=0.1)
    ids = ["m1", 7, ("m2", "abc"), b"raw", 2.5, True]
    index.build([ids[:3], ids[1:4]], request_ids=["b1", ("b", 2)])
    index.insert(ids, "r")
    data = index.snapshot()
    restored = ContextIndex.restore(data)
    assert sorted(map(repr, restored.request_ids())) == sorted(map(repr, index.request_ids()))
    for rid in index.request_ids():
        assert restored.order_of(rid) == index.order_of(rid)
    assert restored.cached_tokens == index.cached_tokens and restored.node_count == index.node_count
    assert restored.extra_budget == 0.1 and restored.capacity_tokens == 10_000
    assert restored.insert(["m1", 7, "new"]).prefix_len == index.insert(["m1", 7, "new"]).prefix_len
    with pytest.raises(ValueError, match="corrupt"):
        ContextIndex.restore(b"not a snapshot")


def test_snapshot_rejects_ids_it_cannot_encode():
    index = ContextIndex()
    index.insert([frozenset({1})])
    with pytest.raises(TypeError, match="cannot snapshot"):
        index.snapshot()


def test_concurrent_inserts_from_8_threads_keep_the_index_consistent():
    index = ContextIndex(capacity_tokens=400)
    errors = []

    def worker(t: int) -> None:
        try:
            for i in range(300):
                blocks = [(t * 7 + i * 3 + j) % 40 for j in range(8)]
                p = index.insert(blocks, request_id=(t, i))
                assert sorted(p.order) == sorted(set(blocks))
                if i % 5 == 0:
                    index.evict((t, i))
        except Exception as exc:  # pragma: no cover - surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    # every live request still resolves to its order, the modelled cache respects its capacity
    for rid in index.request_ids():
        assert len(index.order_of(rid)) == 8
    assert index.cached_tokens <= 400
    # token accounting matches the tree
    total = 0
    stack = [index._live.root]
    while stack:
        n = stack.pop()
        total += n.tokens
        stack.extend(n.children.values())
    assert total == index.cached_tokens


def test_build_then_insert_continues_from_the_built_tree():
    index = ContextIndex()
    plan = index.build([["a", "b", "c"], ["b", "a", "d"], ["e"]])
    assert len(index) == 3 and len(plan.schedule) == 3
    p = index.insert(["b", "a", "z"])
    assert p.prefix_len == 2
    assert prefix_of(index._live.requests[p.request_id]) == p.order


def test_build_bad_input():
    with pytest.raises(TypeError):
        ContextIndex().build(None)
    with pytest.raises(ValueError, match="request_ids"):
        ContextIndex().build([[1], [2]], request_ids=["x"])
    assert ContextIndex().build([]).orders == ()
    assert ContextIndex().build([[1, 2], []]).orders[1] == ()


def test_match_is_a_dry_run_of_insert():
    index = ContextIndex(capacity_tokens=100)
    index.insert([1, 2, 3], "a")
    before = (len(index), index.node_count, index.cached_tokens, index.frequency(1))
    dry = index.match([2, 1, 9])
    assert dry.request_id is None and dry.order == (1, 2, 9) and dry.prefix_len == 2
    assert dry.search_path == (0,)
    assert (len(index), index.node_count, index.cached_tokens, index.frequency(1)) == before
    real = index.insert([2, 1, 9])
    assert (real.order, real.prefix_len) == (dry.order, dry.prefix_len)
    assert index.match([]).order == ()
