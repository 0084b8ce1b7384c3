import threading

import pytest

from cp_memory.agents.routes import BalanceScope, PlacementPolicy, RouteReason, RoutingPolicy
from cp_memory.agents.routing import AgentRouter


def router(n=3, **kw):
    return AgentRouter([object() for _ in range(n)], **kw)


def test_recurring_segment_returns_to_its_worker():
    r = router(3)
    first = r.route(["a", "b"], [100, 100])
    assert first.reason == "least_loaded" and first.matched_tokens == 0
    r.release(first)
    other = r.route(["x", "y"], [100, 100])
    r.release(other)
    assert other.worker != first.worker  # new content spreads to a worker with an emptier cache
    again = r.route(["a", "b"], [100, 100])
    assert again.worker == first.worker and again.reason == "affinity"
    assert again.matched_blocks == 2 and again.matched_tokens == 200
    r.release(again)


def test_affinity_follows_the_longest_exact_prefix_in_tokens():
    r = router(3)
    # what the engines hold: worker 0 has [a], worker 1 has [a, b] (ids are (position, key))
    r.index(0).insert([(0, "a")], "seed0", token_lens=[10])
    r.index(1).insert([(0, "a"), (1, "b")], "seed1", token_lens=[10, 10])
    route = r.route(["a", "b", "c"], [10, 10, 10])
    assert (route.worker, route.reason, route.matched_tokens) == (1, "affinity", 20)
    r.release(route)
    # a tie on the matched prefix goes to the less loaded worker
    busy = r.route(["zzz"], [1])
    assert busy.worker == 2
    hold = r.route(["a", "b", "c"], [10, 10, 10])  # worker 1 now has it in flight
    tie = r.route(["a", "x"], [10, 10])
    assert tie.reason == "affinity" and tie.matched_tokens == 10 and tie.worker == 0
    for x in (busy, hold, tie):
        r.release(x)


def test_exact_order_matters_for_the_cache_model():
    r = router(1)
    r.release(r.route(["a", "b"], [5, 5]))
    swapped = r.route(["b", "a"], [5, 5])
    assert swapped.matched_blocks == 0


def test_load_safeguard_kicks_in_under_skew():
    r = router(3, balance_abs_threshold=2, balance_rel_threshold=1.5)
    home = r.route(["hot"], [100])
    held = [home]
    reasons = []
    for _ in range(6):  # a hot document keeps coming back while its worker is busy
        route = r.route(["hot"], [100])
        held.append(route)
        reasons.append((route.worker == home.worker, route.reason))
    assert reasons[0] == (True, "affinity") and reasons[1] == (True, "affinity")
    assert (False, "balance") in reasons, reasons
    loads = r.loads()
    assert max(loads) - min(loads) <= 3
    for route in held:
        r.release(route)
    assert r.loads() == (0, 0, 0)
    stats = r.stats()
    assert sum(w.balance for w in stats.workers) >= 1 and stats.routed == 7


@pytest.mark.parametrize("rel, first_override", [(3.0, 5), (5.0, 7)])
def test_load_safeguard_needs_both_the_absolute_and_the_relative_gap(rel, first_override):
    r = router(2, balance_abs_threshold=2, balance_rel_threshold=rel)
    other = r.route(["y"], [1])  # one request in flight elsewhere
    held, reasons = [other], []
    for _ in range(first_override):
        route = r.route(["x"], [1])
        held.append(route)
        reasons.append(route.reason)
    # x#1 is new, then affinity until max-min > 2 AND max > rel * min
    assert reasons == ["least_loaded"] + ["affinity"] * (first_override - 2) + ["balance"]
    assert held[-1].worker == other.worker
    for h in held:
        r.release(h)


def test_round_robin_baseline_ignores_caches():
    r = router(3, policy="round_robin")
    workers = []
    for _ in range(6):
        route = r.route(["same"], [10])
        workers.append(route.worker)
        assert route.reason == "round_robin"
        r.release(route)
    assert workers == [0, 1, 2, 0, 1, 2]
    assert r.policy is RoutingPolicy.ROUND_ROBIN


def test_capacity_evicts_least_recently_used_so_affinity_stops_claiming_it():
    r = router(1, capacity_tokens=250)
    r.release(r.route(["a"], [100]))
    r.release(r.route(["b"], [100]))
    r.release(r.route(["c"], [100]))  # over capacity: 'a' (LRU) leaves the model
    assert r.route(["a"], [100]).matched_tokens == 0
    assert r.stats().workers[0].modelled_cache_tokens <= 250


def test_failed_request_leaves_the_cache_model():
    r = router(2)
    route = r.route(["a"], [10])
    r.release(route, ok=False)
    again = r.route(["a"], [10])
    assert again.reason == "least_loaded" and again.matched_tokens == 0
    r.release(again)
    assert r.stats().workers[route.worker].failed == 1
    with pytest.raises(ValueError, match="released twice"):
        r.release(again)


def test_dispatch_context_manager_releases_on_error():
    r = router(2)
    with pytest.raises(RuntimeError), r.dispatch(["a"], [10]):
        raise RuntimeError("boom")
    assert r.loads() == (0, 0)
    with r.dispatch(["a"], [10]) as route:
        assert route.reason == "least_loaded"  # the failed attempt was not kept as cached
    assert r.loads() == (0, 0)


def test_empty_request_goes_to_least_loaded_and_eviction_sync():
    r = router(2)
    busy = r.route(["a"], [10])
    idle = r.route([], [])
    assert idle.worker != busy.worker and idle.reason == "least_loaded"
    r.release(busy)
    r.release(idle)
    assert r.evict(busy.worker, busy.request_id) is True
    assert r.evict(busy.worker, "unknown") is False
    r.release(r.route(["b"], [5]))
    r.reset()
    assert all(w.live_requests == 0 for w in r.stats().workers)


def test_concurrent_routing_keeps_load_counts_consistent():
    r = router(4)

    def go(i):
        for j in range(50):
            route = r.route([f"d{(i + j) % 7}"], [10])
            r.release(route)

    threads = [threading.Thread(target=go, args=(i,)) for i in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert r.loads() == (0, 0, 0, 0)
    assert r.stats().routed == 300


def test_bad_arguments():
    with pytest.raises(ValueError):
        AgentRouter([])
    with pytest.raises(ValueError):
        router(2, policy="random")
    with pytest.raises(ValueError):
        router(2, names=["a"])
    with pytest.raises(ValueError):
        router(2, balance_rel_threshold=0.5)
    with pytest.raises(ValueError):
        router(1).route(["a", "b"], [1])


def test_target_scoped_safeguard_keeps_affinity_when_the_imbalance_is_elsewhere():
    for scope, expected in (("target", ("affinity", 1)), ("global", ("balance", 2))):
        r = router(3, balance_abs_threshold=2, balance_rel_threshold=1.5, balance_scope=scope)
        r.index(0).insert([(0, "hot")], "seed0", token_lens=[100])  # worker 0 caches "hot"
        r.index(1).insert([(0, "doc")], "seed1", token_lens=[100])  # worker 1 caches "doc"
        hot = [r.route(["hot"], [100]) for _ in range(3)]
        assert [h.worker for h in hot] == [0, 0, 0] and r.loads() == (3, 0, 0)
        route = r.route(["doc"], [100])  # its home (worker 1) is idle; worker 0 is swamped
        assert (route.reason, route.worker) == expected, scope
        for h in hot + [route]:
            r.release(h)
    with pytest.raises(ValueError, match="balance_scope must be 'target' or 'global', got 'local'"):
        router(2, balance_scope="local")


def test_settings_take_the_vocabularies_or_their_strings():
    r = router(2, policy=RoutingPolicy.AFFINITY, balance_scope="global", placement=PlacementPolicy.LOAD)
    assert (r.policy, r.balance_scope, r.placement) == (
        RoutingPolicy.AFFINITY,
        BalanceScope.GLOBAL,
        PlacementPolicy.LOAD,
    )
    assert r.stats().policy == "affinity"
    for bad in ({"placement": "fifo"}, {"policy": "random"}):
        (name,) = bad
        with pytest.raises(ValueError, match=f"{name} must be"):
            router(2, **bad)


def test_each_worker_counts_its_routes_by_reason():
    r = router(2)
    first = r.route(["a"], [10])
    r.release(first)
    r.release(r.route(["a"], [10]))
    r.release(r.route(["b"], [10]))
    w = r.stats().workers[first.worker]
    assert w.reasons[RouteReason.LEAST_LOADED] == w.least_loaded >= 1
    assert w.reasons[RouteReason.AFFINITY] == w.affinity == 1
    assert sum(w.reasons.values()) == w.routed
    assert r.stats().routed == 3


# ---------------------------------------------------------------------------------------------- placement
def test_new_content_goes_to_the_worker_with_the_most_room_not_the_least_busy():
    """SGLang's cache_aware places unmatched requests on the smallest tree; so does placement="cache":
    an emptier cache keeps new documents from overflowing a full one (placement="load" spreads by load)."""
    r = router(2, placement="cache", balance_abs_threshold=8)
    big = r.route(["big"], [900])
    r.release(big)
    busy_small = r.route(["small"], [10])  # worker with less cached, now 1 in flight
    assert busy_small.worker != big.worker
    new = r.route(["new"], [100])  # load 1 vs 0, but the idle worker's cache is full
    assert new.worker == busy_small.worker and new.reason == "least_loaded"
    r.release(busy_small)
    r.release(new)
    by_load = router(2, placement="load")
    by_load.release(by_load.route(["big"], [900]))
    hold = by_load.route(["small"], [10])
    assert by_load.route(["new"], [100]).worker != hold.worker


def test_most_room_placement_still_respects_the_load_safeguard():
    r = router(2, placement="cache", balance_abs_threshold=2, balance_rel_threshold=1.5)
    r.release(r.route(["big"], [900]))
    held = [r.route([f"s{i}"], [1]) for i in range(3)]  # all land on the empty worker: load 3 vs 0
    assert len({h.worker for h in held}) == 1
    over = r.route(["new"], [1])
    assert over.worker != held[0].worker  # 3 - 0 > 2: the safeguard moves it


def test_tails_take_room_in_the_cache_model_but_never_match():
    r = router(1, capacity_tokens=1000)
    first = r.route(["doc"], [400], tail_tokens=300)
    r.release(first)
    assert r.index(0).cached_tokens == 700
    again = r.route(["doc"], [400], tail_tokens=300)
    assert again.matched_blocks == 1 and again.matched_tokens == 400  # the tail is not a match
    r.release(again)
    assert r.index(0).cached_tokens == 1000  # unique tails: two of them
    shared = router(1, capacity_tokens=1000)
    for _ in range(3):
        shared.release(shared.route(["doc"], [400], tail_tokens=300, tail_key="worker"))
    assert shared.index(0).cached_tokens == 700  # one tail per prefix
    with pytest.raises(ValueError, match="tail_tokens"):
        r.route(["doc"], [1], tail_tokens=-1)


def test_a_segment_the_model_evicted_returns_to_its_home_worker():
    """When the cache model has let a segment go, sending it back to the worker that held it keeps the
    pool's caches partitioned (a re-prefill there, not a second copy elsewhere) — the engine may even
    still hold it: misjudging an eviction then costs nothing, as with SGLang's never-forgetting tree."""
    r = router(2, capacity_tokens=100)
    a = r.route(["a"], [60])
    r.release(a)
    b = r.route(["b"], [60])  # most room: the other worker
    r.release(b)
    assert b.worker != a.worker
    r.release(r.route(["c"], [60]))  # lands on some worker and pushes its 60 tokens out
    evicted = [w for w in range(2) if len(r.index(w)) == 1 and r.index(w).match([(0, "c")]).prefix_len == 1]
    assert evicted  # the model let a or b go
    gone = "a" if r.index(a.worker).match([(0, "a")]).prefix_len == 0 else "b"
    home = a.worker if gone == "a" else b.worker
    back = r.route([gone], [60])
    assert (back.reason, back.worker) == ("home", home)
    r.release(back)
    assert r.stats().workers[home].home == 1


def test_a_failed_request_gives_up_its_home():
    r = router(2)
    first = r.route(["a"], [10])
    r.release(first, ok=False)
    assert r.route(["a"], [10]).reason == "least_loaded"


def test_new_content_goes_where_it_evicts_nothing_else_to_the_cache_that_turns_over_slowest():
    """Every token a worker prefills or generates is written into its cache. New content goes to a cache
    model with room for it (nothing is evicted); when none has room, to the worker whose cache was written
    the least so far — its least recently used entries are the oldest, the cheapest to lose — even when
    its model looks fuller: the pool's LRU caches then behave like one LRU cache of their summed size."""
    r = router(2, capacity_tokens=200)
    a = r.route(["a"], [150], request_id="a")
    r.release(a)
    r.evict(a.worker, "a")  # the engine reported it gone: that cache is empty again, though it took 150
    b = r.route(["b"], [100])
    r.release(b)
    assert b.worker != a.worker  # room on both, and the other took in less
    assert r.route(["new"], [150]).worker == a.worker  # only there it evicts nothing

    full = router(2, capacity_tokens=200)
    hot = full.route(["a"], [100], tail_tokens=50, tail_key="t")  # 150 in the model, 150 taken in
    full.release(hot)
    other = full.route(["b"], [200])  # no room next to "a": the empty worker
    full.release(other)
    assert other.worker != hot.worker
    for _ in range(2):  # "a" comes back twice: hits, but each writes a new 50-token tail
        again = full.route(["a"], [100], tail_tokens=50, tail_key="t")
        assert again.worker == hot.worker
        full.release(again)
    assert full.index(hot.worker).cached_tokens == 150 < full.index(other.worker).cached_tokens == 200
    # no room anywhere for 60 tokens; hot's model looks emptier but its cache took in 250 tokens, other's 200
    assert full.route(["new"], [60]).worker == other.worker


def test_home_lasts_only_while_the_engine_may_still_hold_the_segment():
    """Home is where a segment was last used, while fewer than capacity_tokens were written into that
    cache since: after that an LRU cache has dropped it, and it is new content again."""
    r = router(2, capacity_tokens=100)
    a = r.route(["a"], [60])
    r.release(a)
    r.release(r.route(["b"], [60]))  # the other worker
    r.release(r.route(["c"], [60], request_id="c"))  # evicts a or b from a model
    gone = "a" if r.index(a.worker).match([(0, "a")]).prefix_len == 0 else "b"
    back = r.route([gone], [60])
    assert back.reason == "home"  # 60 tokens written since: the engine may still hold it
    r.release(back)
    far = router(1, capacity_tokens=100)
    far.release(far.route(["a"], [60]))
    for i in range(2):  # 120 tokens written after "a": past the horizon
        far.release(far.route([f"x{i}"], [60]))
    assert far.index(0).match([(0, "a")]).prefix_len == 0
    assert far.route(["a"], [60]).reason == "least_loaded"


def test_a_flushed_cache_is_nobodys_home():
    r = router(2, capacity_tokens=100)
    a = r.route(["a"], [60])
    r.release(a)
    r.reset(a.worker)
    assert r.route(["a"], [60]).reason == "least_loaded"


def test_a_segment_in_flight_stays_in_its_workers_model_under_pressure():
    """The model pins a routed request until it is released (its engine is still running it)."""
    r = router(1, capacity_tokens=250)
    held = r.route(["a"], [100])  # its call is still running
    r.release(r.route(["b"], [100]))
    r.release(r.route(["c"], [100]))  # over capacity: 'b' leaves the model, not the in-flight 'a'
    assert r.index(0).match([(0, "a")]).prefix_len == 1 and r.index(0).match([(0, "b")]).prefix_len == 0
    r.release(held)
    assert r.index(0).pinned == 0
    r.release(r.route(["d"], [100]))  # released: 'a' is the least recently used now
    assert r.index(0).match([(0, "a")]).prefix_len == 0
