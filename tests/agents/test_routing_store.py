"""AgentRouter(state_store="redis://..."): two routers over the same workers route as one router.

A chain of agents reads documents; each agent's segment has a home worker (the engine that cached it). With
one router every agent keeps returning to its home. Two routers behind a load balancer, each with its own
state, each place an agent on *their* idea of the emptiest cache: the same agent lands on two workers and
each engine prefills it again. With a shared store (a private redis-server on a free loopback port) they
agree on every home, see each other's intake and load, and follow each other's resets; when Redis dies or
stalls they route on their own state with one warning and return to the store when it is back.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import AsyncIterator

import pytest

from cp_memory.agents.routing import AgentRouter
from cp_memory.agents.shared_routing import (
    HOME_CHAINS,
    Placed,
    Pool,
    RouterStateConfig,
    SharedHome,
    decode_home,
    decode_pool,
    encode_home,
    encode_pool,
)
from cp_memory.state.keys import KEY_PREFIX, StateKeys
from cp_memory.state.ops import answer, run
from tests.redis_server import RedisServer, StallProxy

FAST = {"timeout_s": 0.2, "retry_s": 0.0}
DOC = 100  # tokens per block


@contextlib.asynccontextmanager
async def redis_stopped(server: RedisServer) -> AsyncIterator[list[int]]:
    """Redis stopped (it accepts bytes, never answers) while a task counts the event loop's turns in ``[0]``."""
    ticks = [0]

    async def ticker() -> None:
        while True:
            ticks[0] += 1
            await asyncio.sleep(0.01)

    task = asyncio.create_task(ticker())
    os.kill(server.proc.pid, signal.SIGSTOP)
    try:
        yield ticks
    finally:
        os.kill(server.proc.pid, signal.SIGCONT)
        task.cancel()


def routers(url: str | None, n: int = 2, workers: int = 3, **kw):  # type: ignore[no-untyped-def]
    store = None if url is None else RouterStateConfig(url, name=kw.pop("name", "coa"), **FAST)
    return [AgentRouter([f"engine-{i}" for i in range(workers)], state_store=store, **kw) for _ in range(n)]


def segment(agent: int, turn: int = 0) -> tuple[list[tuple[str, str]], list[int]]:
    """Agent ``agent``'s document, grown by one block per turn (its first block keeps its home)."""
    keys = [(f"agent{agent}-doc", "v1")] + [(f"agent{agent}-turn{t}", "v1") for t in range(1, turn + 1)]
    return keys, [DOC] * len(keys)


def send(r: AgentRouter, agent: int, turn: int = 0):  # type: ignore[no-untyped-def]
    keys, lens = segment(agent, turn)
    route = r.route(keys, lens, home_key=f"agent{agent}", tail_tokens=20, tail_key="worker")
    r.release(route)
    return route


def round_robin_run(rs: list[AgentRouter], agents: int = 6, turns: int = 4) -> dict[int, set[int]]:
    """Each agent's requests, turn after turn, alternately through each router: the workers each agent used."""
    used: dict[int, set[int]] = {a: set() for a in range(agents)}
    for t in range(turns):
        for a in range(agents):
            used[a].add(send(rs[(a + t) % len(rs)], a, t).worker)
    return used


def test_two_routers_with_redis_agree_on_every_home(redis_url):
    shared = routers(redis_url, capacity_tokens=10_000)
    used = round_robin_run(shared)
    assert all(len(w) == 1 for w in used.values()), used  # each agent stays on one worker, whichever router
    assert len({next(iter(w)) for w in used.values()}) == 3  # and new agents still spread over the pool
    # what one router wrote into a worker's cache, the other counts too (the home rule's clock)
    pool = run(shared[0]._shared.read_view(None), shared[0]._shared.store).pool
    assert sum(pool.intake) == 24 * (DOC + 20)  # 24 routes, each wrote its new block and its tail
    for r in shared:
        r.close()


def test_two_local_routers_split_an_agent_over_two_workers():
    """Today's behaviour (no store), reported: the same run sends agents to two workers."""
    used = round_robin_run(routers(None, capacity_tokens=10_000))
    assert any(len(w) > 1 for w in used.values()), used
    assert all(len(w) == 1 for w in round_robin_run(routers(None, n=1, capacity_tokens=10_000)).values())


def test_a_race_for_a_new_segment_gives_it_one_home(redis_url):
    """Router A has read the store and chosen a worker for a new agent; before A writes the home, router B
    places another agent there and this one on the other worker. A's compare-and-set fails, it reads B's
    home and goes there too."""
    a, b = routers(redis_url, workers=2)
    keys, lens = segment(0)
    req = a._request(keys, lens, None, 0, None, "agent0", None, None)
    op = a._shared_route(req, a._shared)
    request = next(op)
    while not (type(request).__name__ == "Write" and ":h:" in request.key):
        request = op.send(answer(a._shared.store, request))
    send(b, 9)  # the worker A chose (both empty: the first) takes agent 9 ...
    b_route = send(b, 0)  # ... so B places agent 0 on the other one, and claims its home first
    try:
        while True:
            request = op.send(answer(a._shared.store, request))
    except StopIteration as done:
        worker, reason, _ = done.value
    assert worker == b_route.worker and reason == "home"
    assert send(a, 0).worker == send(b, 0).worker == b_route.worker


def test_a_document_on_two_workers_sends_each_segment_to_the_one_holding_more_of_it(redis_url):
    """Session d opens two segments: [d, s1] on one worker, then (that worker busy) [d, s2] on the other. A
    third router routes [d, s1, s3]: the store's record of d names both placements, so it goes where
    [d, s1] is cached, not to d's latest home."""
    a, b, c = routers(redis_url, n=3, workers=2, balance_abs_threshold=0, balance_rel_threshold=1)
    first = a.route([("d", "v1"), ("s1", "v1")], [DOC, DOC])  # in flight: that worker is the busier one
    second = b.route([("d", "v1"), ("s2", "v1")], [DOC, DOC])
    assert second.worker != first.worker and second.reason == "least_loaded"
    a.release(first)
    b.release(second)
    third = c.route([("d", "v1"), ("s1", "v1"), ("s3", "v1")], [DOC, DOC, DOC])
    assert third.worker == first.worker and third.reason == "affinity"
    assert third.matched_tokens == 2 * DOC  # what the record says that worker holds counts as cached
    assert c.route([("d", "v1"), ("s2", "v1")], [DOC, DOC]).worker == second.worker


def test_load_in_flight_on_one_router_steers_the_other(redis_url):
    a, b = routers(redis_url, workers=2, placement="load")
    busy = a.route(*segment(0))  # in flight on router A
    assert b.route(*segment(1)).worker != busy.worker  # B sees A's request: its least-loaded worker is the other
    a.release(busy)
    alone = routers(None, workers=2, placement="load")
    first = alone[0].route(*segment(0))
    assert alone[1].route(*segment(1)).worker == first.worker  # without the store B cannot know


def test_a_reset_on_one_router_is_followed_by_the_other(redis_url):
    a, b = routers(redis_url, workers=2)
    home = send(a, 0).worker
    assert send(b, 0).worker == home
    a.reset(home)  # the engine flushed its cache: the agent has no home any more, in either router
    again = send(b, 0)
    assert again.reason == "least_loaded" and again.matched_tokens == 0  # B's model of that cache is gone too
    assert again.worker != home  # the flushed cache took in more tokens so far: new content goes elsewhere
    assert len(b.index(home)) == 0 and send(a, 0).worker == again.worker  # the new home, for both


def test_a_failed_request_drops_the_home_for_every_router(redis_url):
    a, b = routers(redis_url, workers=2)
    route = a.route(*segment(0), home_key="agent0")
    a.release(route, ok=False)  # the engine failed it: its cache may not hold the document
    again = b.route(*segment(0), home_key="agent0")
    assert again.reason == "least_loaded" and again.matched_tokens == 0
    b.release(again)
    assert a.route(*segment(0), home_key="agent0").worker == again.worker  # the new home, for both


def test_keys_are_namespaced_by_tenant_router_and_pool(redis_url, redis_server):
    cfg = {"timeout_s": 0.2, "retry_s": 0.0}
    names = ["engine-0", "engine-1"]
    r1 = AgentRouter(names, names=names, state_store=RouterStateConfig(redis_url, name="coa", tenant="t1", **cfg))
    r2 = AgentRouter(names, names=names, state_store=RouterStateConfig(redis_url, name="coa", tenant="t2", **cfg))
    r3 = AgentRouter(names, names=names, state_store=RouterStateConfig(redis_url, name="other", tenant="t1", **cfg))
    for r in (r1, r2, r3):
        send(r, 0)
    keys = sorted(k.decode() for k in redis_server.client().keys("*"))
    assert len(keys) == 6 and all(k.startswith(f"{KEY_PREFIX}:") for k in keys)
    t1, t2 = StateKeys("t1"), StateKeys("t2")
    assert t1.router_pool("coa", names) in keys and t2.router_pool("coa", names) in keys
    assert t1.router_pool("other", names) in keys
    assert t1.router_pool("coa", names) != t1.router_pool("coa", ["engine-0", "engine-2"])  # another pool
    assert all(redis_server.client().pttl(k) > 0 for k in keys)  # every key carries its TTL
    # a value planted under a home key (another router's, or garbage) is replaced, with no exception
    home = r1._shared.home_key("agent1")
    redis_server.client().hset(home, mapping={"t": "x", "d": b'{"v":1,"owner":"someone else"}'})
    assert send(r1, 1).worker in (0, 1)


def test_redis_killed_mid_run_falls_back_and_recovers(tmp_path, caplog):
    caplog.set_level(logging.WARNING, logger="cp_memory")
    server = RedisServer(tmp_path)
    server.start()
    try:
        a, b = routers(server.url, capacity_tokens=10_000)
        assert all(len(w) == 1 for w in round_robin_run([a, b], turns=2).values())
        server.kill()
        for t in range(2, 4):  # the store is down: each router routes on its own state, no exception
            for agent in range(6):
                send((a, b)[agent % 2], agent, t)
        server.start()  # the same port, every key gone
        fresh = round_robin_run([a, b], agents=4, turns=3)
        assert all(len(w) == 1 for w in fresh.values()), fresh
    finally:
        server.kill()
    down = [r for r in caplog.records if "cannot answer" in r.getMessage()]
    assert 1 <= len(down) <= 2  # one warning per router and outage, not one per route


def test_a_stalled_link_falls_back_within_the_timeout(redis_server, redis_url, caplog):
    caplog.set_level(logging.WARNING, logger="cp_memory")
    proxy = StallProxy(redis_server.port)
    try:
        a, b = routers(proxy.url)
        home = send(a, 0).worker
        proxy.stall()
        assert send(a, 0).worker == home  # its own model still holds the agent
        send(b, 1)  # no exception: B routes alone
        proxy.resume()
        assert send(b, 0).worker == home  # back on the store: B finds A's home
    finally:
        proxy.close()
    assert any("cannot answer" in r.getMessage() for r in caplog.records)


async def test_async_routers_agree_and_leave_the_loop_running(redis_server, redis_url):
    a, b = routers(redis_url, capacity_tokens=10_000)
    seen: dict[int, set[int]] = {}
    for t in range(3):
        for agent in range(4):
            r = (a, b)[(t + agent) % 2]
            route = await r.aroute(*segment(agent, t), home_key=f"agent{agent}")
            await r.arelease(route)
            seen.setdefault(agent, set()).add(route.worker)
    assert all(len(w) == 1 for w in seen.values()), seen
    async with redis_stopped(redis_server) as ticks:
        route = await a.aroute(*segment(0, 3), home_key="agent0")  # waits up to the timeout, then alone
        await a.arelease(route)
    assert route.worker == next(iter(seen[0])) and ticks[0] >= 5
    for r in (a, b):
        await r.aclose()
        r.close()


def test_records_another_writer_planted_are_refused():
    """What a router reads is checked: its key's owner, the pool's size, every field (no Redis needed)."""
    key = StateKeys("t").router_pool("coa", ["w0", "w1"])
    owner = StateKeys.owner(key)
    pool = Pool((3, 4), (0, 1), {"me": (1.0, (1, 0))})
    assert decode_pool(encode_pool(pool, owner), owner, 2) == pool
    home = SharedHome((Placed(1, 5, 0, ("a", "b")), Placed(0, 2, 1, ("a",))))
    assert decode_home(encode_home(home, owner), owner, 2) == home
    for bad in (
        lambda: decode_pool(encode_pool(pool, owner), StateKeys.owner("another key"), 2),  # another key's
        lambda: decode_pool(encode_pool(pool, owner), owner, 3),  # another pool
        lambda: decode_home(encode_home(home, owner), owner, 1),  # a worker the pool does not have
        lambda: decode_home(b'{"v":1,"owner":"%s","placed":[[0,-1,0,[]]]}' % owner.encode(), owner, 2),
        lambda: decode_pool(b"\xff", owner, 2),
    ):
        with pytest.raises(ValueError):
            bad()
    for p in range(HOME_CHAINS + 2):  # a document keeps its latest placements only
        home = home.with_placed(Placed(p % 2, p, 0, (f"s{p}",)))
    assert len(home.placed) == HOME_CHAINS and home.placed[0].chain == (f"s{HOME_CHAINS + 1}",)


def test_a_bad_state_store_is_a_clear_error():
    with pytest.raises(ValueError, match="redis://"):
        AgentRouter([object()], state_store="http://localhost:6379")
    with pytest.raises(ValueError, match="timeout_s"):
        RouterStateConfig("redis://localhost:6379/0", timeout_s=0)
    with pytest.raises(TypeError, match="RouterStateConfig"):
        AgentRouter([object()], state_store=6379)  # type: ignore[arg-type]


async def test_an_async_chain_awaits_its_router_so_a_stalled_store_never_blocks_the_loop(redis_server, redis_url):
    """ChainOfAgents.aanswer routes and releases through aroute/arelease: with Redis stopped mid-chain a
    concurrent task keeps running while each route waits out the store's timeout, and the chain answers."""
    from cp_memory.agents import ChainConfig, ChainOfAgents, Segmenter
    from cp_memory.core.blocks import ContextBlock

    from .conftest import AsyncFakeEngine

    engines = [AsyncFakeEngine(f"w{i}") for i in range(2)]
    store = RouterStateConfig(redis_url, name="coa-async", **FAST)
    router = AgentRouter(engines, state_store=store)
    coa = ChainOfAgents(router, config=ChainConfig(), segmenter=Segmenter(60, token_len=lambda t: len(t.split())))
    docs = [ContextBlock(f"d{i}", " ".join(f"fact{i}" for _ in range(30))) for i in range(3)]
    first = await coa.aanswer("q1 where?", docs)
    async with redis_stopped(redis_server) as ticks:
        again = await coa.aanswer("q2 where?", docs)
    assert again.answer and [c.worker for c in again.calls[:2]] == [c.worker for c in first.calls[:2]]
    assert ticks[0] >= 5  # the loop ran while the store was silent
    assert router.loads() == (0, 0)
    await router.aclose()
    router.close()
