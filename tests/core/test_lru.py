"""LRUMap: the one bounded LRU map of the project, used wherever state is kept per key."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from cp_memory.core.lru import LRUMap

ops = st.lists(st.tuples(st.sampled_from(["set", "get", "peek", "pop", "create"]), st.integers(0, 6)), max_size=60)


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 4), ops)
def test_matches_a_list_model_of_recency(capacity, stream):
    evicted: list[tuple[int, str]] = []
    m: LRUMap[int, str] = LRUMap(capacity, on_evict=lambda k, v: evicted.append((k, v)))
    model: list[tuple[int, str]] = []  # least recently used first
    expect_evicted: list[tuple[int, str]] = []

    def touch(k: int, v: str) -> None:
        model[:] = [(a, b) for a, b in model if a != k] + [(k, v)]
        while len(model) > capacity:
            expect_evicted.append(model.pop(0))

    for i, (op, k) in enumerate(stream):
        have = dict(model)
        if op == "set":
            m.set(k, f"v{i}")
            touch(k, f"v{i}")
        elif op == "get":
            assert m.get(k) == have.get(k)
            if k in have:
                touch(k, have[k])
        elif op == "peek":
            assert m.peek(k, "none") == have.get(k, "none")
        elif op == "pop":
            assert m.pop(k) == have.get(k)
            model[:] = [(a, b) for a, b in model if a != k]
        else:
            assert m.get_or_create(k, lambda i=i: f"c{i}") == have.get(k, f"c{i}")
            touch(k, have.get(k, f"c{i}"))
        assert m.items() == model and len(m) == len(model)
        assert evicted == expect_evicted
    assert m.clear() == model and len(m) == 0 and evicted == expect_evicted


def test_on_evict_runs_outside_the_lock():
    seen = []
    m: LRUMap[str, int] = LRUMap(1, on_evict=lambda k, v: seen.append((k, v, len(m), "b" in m)))
    m.set("a", 1)
    m.set("b", 2)  # the callback reads the map: would deadlock under the lock
    assert seen == [("a", 1, 1, True)]


def test_factory_runs_outside_the_lock_and_the_first_stored_value_wins():
    m: LRUMap[str, str] = LRUMap(4)

    def factory() -> str:
        m.set("k", "stored meanwhile")  # another thread got there first
        return "late"

    assert m.get_or_create("k", factory) == "stored meanwhile"
    assert m.get_or_create("k", lambda: "unused") == "stored meanwhile"


def test_factory_errors_store_nothing():
    m: LRUMap[str, int] = LRUMap(2)
    with pytest.raises(RuntimeError):
        m.get_or_create("x", lambda: (_ for _ in ()).throw(RuntimeError("boom")))
    assert "x" not in m and len(m) == 0


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, None])
def test_bad_capacity(bad):
    with pytest.raises(ValueError, match="capacity"):
        LRUMap(bad)
    with pytest.raises(TypeError, match="on_evict"):
        LRUMap(1, on_evict=3)  # type: ignore[arg-type]


def test_concurrent_use_keeps_the_bound_and_evicts_each_entry_once():
    evicted: list[int] = []
    lock = threading.Lock()

    def on_evict(k: int, v: int) -> None:
        with lock:
            evicted.append(k)

    m: LRUMap[int, int] = LRUMap(8, on_evict=on_evict)

    def work(t: int) -> None:
        for i in range(500):
            m.get_or_create(t * 1000 + i, lambda i=i: i)
            m.get(t * 1000 + i // 2)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    left = [k for k, _ in m.items()]
    assert len(left) == 8
    assert len(evicted) == len(set(evicted)) == 8 * 500 - 8
    assert set(evicted).isdisjoint(left)
