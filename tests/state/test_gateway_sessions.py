"""Gateway sessions in a real Redis: two replicas behind round-robin replay the same prefix as one gateway
does, and book into the same savings; without the store each replica knows only its own half of a session.
Redis killed mid-session: every request still goes out (the replica's own state serves, one warning).
"""

from __future__ import annotations

import json
import logging
import threading
from typing import Any

import pytest

pytest.importorskip("starlette", reason="the gateway extra is not installed")
redis = pytest.importorskip("redis", reason="the redis extra is not installed")

from cp_memory.gateway import GatewayConfig, UpstreamKind  # noqa: E402
from cp_memory.gateway.flow import Gateway  # noqa: E402
from cp_memory.gateway.protocols import Api, segments  # noqa: E402
from cp_memory.gateway.replay import strip_marks  # noqa: E402
from cp_memory.gateway.shared_sessions import SharedSessionStore  # noqa: E402
from cp_memory.providers.usage import CacheUsage  # noqa: E402
from cp_memory.state.keys import StateKeys  # noqa: E402
from tests.gateway.recordings import anthropic_session, chat_session, responses_session  # noqa: E402
from tests.redis_server import RedisServer  # noqa: E402

SESSIONS = {Api.MESSAGES: anthropic_session, Api.CHAT: chat_session, Api.RESPONSES: responses_session}
HEADERS = {"authorization": "Bearer sk-client-key"}
SECRET = "one secret for every replica"


def replicas(n: int, url: str | None, *, content: bool = False) -> list[Gateway]:
    """``n`` gateways (``content``: with the content rules' default steps, else without them)."""
    settings: dict[str, Any] = {"secret": SECRET, "state_retry_s": 0.0}
    if not content:
        settings["content_steps"] = frozenset()
    if url is not None:
        settings["state_store"] = url
    config = GatewayConfig(upstream="http://127.0.0.1:1", upstream_kind=UpstreamKind.COMPATIBLE, **settings)
    return [Gateway(config, UpstreamKind.COMPATIBLE) for _ in range(n)]


def round_robin(gws: list[Gateway], api: Api, bodies: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int]:
    """Each body through the next replica, as a load balancer sends them (plan, commit on a 2xx)."""
    sent, replayed = [], 0
    for i, body in enumerate(bodies):
        gw = gws[i % len(gws)]
        plan = gw.plan(api, HEADERS, json.dumps(body).encode())
        assert not plan.failed_open
        gw.commit(plan)
        sent.append(json.loads(plan.content))
        replayed += plan.replayed
    return sent, replayed


def stable_prefixes(api: Api, sent: list[dict[str, Any]]) -> bool:
    """Every segment request n-1 had goes out in request n with n-1's bytes (marks aside)."""
    for before, after in zip(sent, sent[1:]):
        n = len(segments(api, before)[0])
        old = [json.dumps(strip_marks(s)) for s in segments(api, before)[0][:n]]
        new = [json.dumps(strip_marks(s)) for s in segments(api, after)[0][:n]]
        if old != new:
            return False
    return True


@pytest.mark.parametrize("api", list(SESSIONS))
def test_two_replicas_with_redis_replay_as_one_gateway(api: Api, redis_url: str) -> None:
    bodies = SESSIONS[api](rerender=True)
    one, one_replayed = round_robin(replicas(1, None), api, bodies)
    two, two_replayed = round_robin(replicas(2, redis_url), api, bodies)
    assert two == one and two_replayed == one_replayed  # the same bytes as one gateway sends
    assert stable_prefixes(api, two)
    # without the store, each replica replays only what it sent itself: a re-rendering client breaks the prefix
    local, local_replayed = round_robin(replicas(2, None), api, bodies)
    assert not stable_prefixes(api, local) and local_replayed < one_replayed


@pytest.mark.parametrize("api", list(SESSIONS))
def test_two_replicas_with_the_content_rules_point_where_one_gateway_points(api: Api, redis_url: str) -> None:
    """The content records are in the session's record too: a file read on one replica and read again on the
    other becomes the same location annotation one gateway sends, byte for byte; replicas without the store
    send other bytes (each rebuilds the records from the history it is sent, after its own rewrites)."""
    from tests.gateway.content_sessions import numbered_file, pointers_in, tool_session

    files = {name: numbered_file(f"{name}.conf", 40) for name in "abcd"}
    bodies = tool_session(api, [files[name] for name in "cbaabdb"])
    one, _ = round_robin(replicas(1, None, content=True), api, bodies)
    two, _ = round_robin(replicas(2, redis_url, content=True), api, bodies)
    assert two == one and pointers_in(json.dumps(one[-1]).encode()) >= 3
    local, _ = round_robin(replicas(2, None, content=True), api, bodies)
    assert local != one


class _Counted:
    """A replica's store calls, by kind, and whether each read carried the record's bytes."""

    def __init__(self, gw: Gateway) -> None:
        assert isinstance(gw.store, SharedSessionStore)
        self.calls: list[str] = []
        store = gw.store.client.store
        read, write, count = store.read, store.write, store.count  # type: ignore[attr-defined]

        def counted_read(key: str, **kw: Any) -> Any:
            got = read(key, **kw)
            self.calls.append("read, absent" if got.absent else "read" if got.data is not None else "read, unchanged")
            return got

        store.read = counted_read  # type: ignore[method-assign]
        store.write = lambda *a, **kw: self.calls.append("write") or write(*a, **kw)  # type: ignore[method-assign]
        store.count = lambda r: self.calls.append("count") or count(r)  # type: ignore[attr-defined]


def test_a_request_loads_its_session_once_and_stores_it_once(redis_url: str) -> None:
    """As the app drives it (the mem0 query's read, then the plan; a 2xx commit; the booking): one load, one
    compare-and-set and one booking a request; a replica whose copy is the stored record gets no bytes back."""
    (gw,) = replicas(1, redis_url, content=True)
    counted = _Counted(gw)
    usage = CacheUsage(provider="openai", model="gpt-4o", input_tokens=1000, cache_read_tokens=600, output_tokens=5)
    per_request = []
    for body in chat_session(rerender=True):
        raw = json.dumps(body).encode()
        counted.calls.clear()
        incoming = gw.read(Api.CHAT, HEADERS, raw)
        gw.memory_query(Api.CHAT, HEADERS, raw, incoming)
        plan = gw.plan(Api.CHAT, HEADERS, raw, None, incoming)
        gw.commit(plan)
        gw.record(plan, usage)
        per_request.append(list(counted.calls))
    assert per_request[0] == ["read, absent", "write", "count"]  # a new session: its record written
    assert all(calls == ["read, unchanged", "write", "count"] for calls in per_request[1:])


def test_two_replicas_committing_one_session_at_once_lose_neither_change(redis_url: str) -> None:
    """Both load the session before either commits: the second compare-and-set loses, reads again and applies
    its change to what the first wrote (its log is the last one; both content registrations are kept)."""
    from cp_memory.gateway.content.records import PendingContent, Where
    from cp_memory.gateway.replay import SentLog
    from cp_memory.gateway.sessions import SessionChange
    from cp_memory.gateway.shared_sessions import SharedSessionStore

    config = replicas(1, redis_url)[0].config
    one, two = SharedSessionStore(config), SharedSessionStore(config)
    first, second = one.load("t", "s"), two.load("t", "s")
    log1, log2 = SentLog(("a",), ("d1",)), SentLog(("a", "b"), ("d1", "d2"), frozenset({1}))
    where = Where(0, ("content",), 0, 1, "#1")
    one.commit(first, SessionChange(Api.CHAT, log1, PendingContent(blocks=(("k1", where),)), epoch="e1"))
    two.commit(second, SessionChange(Api.CHAT, log2, PendingContent(blocks=(("k2", where),)), cached=True))
    seen = SharedSessionStore(config).load("t", "s")
    assert seen.logs == {Api.CHAT: log2} and second.logs == {Api.CHAT: log2}
    assert seen.content.block(Api.CHAT, "k1") == where and seen.content.block(Api.CHAT, "k2") == where
    assert (seen.memories.epoch(), seen.memories.cached()) == ("e1", True)
    assert second.synced == seen.synced  # the loser's copy is the stored record again


def test_savings_of_every_replica_add_up(redis_url: str) -> None:
    gws = replicas(2, redis_url)
    bodies = chat_session(rerender=False)
    plans = [gws[i % 2].plan(Api.CHAT, HEADERS, json.dumps(b).encode()) for i, b in enumerate(bodies[:4])]
    usage = CacheUsage(provider="openai", model="gpt-4o", input_tokens=1000, cache_read_tokens=600, output_tokens=5)

    def book(i: int) -> None:
        for _ in range(25):
            gws[i % 2].record(plans[i], usage)

    threads = [threading.Thread(target=book, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert plans[0].identity is not None
    tenant = plans[0].identity.tenant
    for gw in gws:  # either replica reports the whole tenant: 4 x 25 bookings, none lost
        totals = gw.store.peek_tenant(tenant)
        assert totals is not None
        report = totals.report()
        assert report["calls"] == 100 and report["cache_read_tokens"] == 60_000 and report["input_tokens"] == 100_000
        sessions = gw.store.sessions_of(tenant, 10)
        assert sum(int(s.report()["calls"]) for s in sessions) == 100  # type: ignore[call-overload]


def test_keys_are_namespaced_and_expire_with_the_session(redis_url: str) -> None:
    (gw,) = replicas(1, redis_url)
    plan = gw.plan(Api.CHAT, HEADERS, json.dumps(chat_session(rerender=False)[0]).encode())
    gw.commit(plan)
    assert isinstance(gw.store, SharedSessionStore) and plan.identity is not None
    key = StateKeys("gateway").gateway_session(plan.identity.tenant, plan.identity.session)
    client = redis.Redis.from_url(redis_url)
    assert key.startswith("cpm:v1:") and plan.identity.session not in key
    assert 0 < client.pttl(key) <= gw.config.session_ttl_s * 1000
    assert all(k.decode().startswith("cpm:v1:") for k in client.keys("*"))


def test_a_log_of_another_session_is_never_replayed(redis_url: str) -> None:
    (gw,) = replicas(1, redis_url)
    bodies = chat_session(rerender=True)
    first = gw.plan(Api.CHAT, HEADERS, json.dumps(bodies[0]).encode())
    gw.commit(first)
    other = {"authorization": "Bearer another-tenant"}
    second = gw.plan(Api.CHAT, other, json.dumps(bodies[0]).encode())
    assert first.identity is not None and second.identity is not None
    keys, client = StateKeys("gateway"), redis.Redis.from_url(redis_url)
    src = keys.gateway_session(first.identity.tenant, first.identity.session)
    dst = keys.gateway_session(second.identity.tenant, second.identity.session)
    client.hset(dst, mapping=client.hgetall(src))  # the first tenant's log, byte for byte, under the other's key
    again = gw.plan(Api.CHAT, other, json.dumps(bodies[1]).encode())
    assert again.replayed == 0 and not again.failed_open


def test_redis_killed_mid_session_every_request_still_goes_out(tmp_path: Any, caplog: Any) -> None:
    caplog.set_level(logging.WARNING, logger="cp_memory")
    server = RedisServer(tmp_path)
    server.start()
    try:
        gws = replicas(2, server.url)
        bodies = anthropic_session(rerender=True)
        sent, _ = round_robin(gws, Api.MESSAGES, bodies[:3])
        server.kill()
        down, _ = round_robin(gws, Api.MESSAGES, bodies[3:6])  # each replica's own logs serve: nothing fails
        server.start()  # empty (no persistence): replay starts again from what each replica sends next
        after, replayed = round_robin(gws, Api.MESSAGES, bodies[6:])
    finally:
        server.kill()
    assert len(sent + down + after) == len(bodies) and replayed > 0
    assert stable_prefixes(Api.MESSAGES, after[1:])
    unavailable = [r for r in caplog.records if "cannot answer" in r.getMessage()]
    assert 1 <= len(unavailable) <= 2  # one per replica and outage


def test_two_served_replicas_round_robin_send_the_upstream_one_stable_prefix(redis_url: str) -> None:
    """The apps themselves (uvicorn, httpx) in front of the local provider rules server (modelled)."""
    import httpx

    from benchmarks.hosted.server import ProviderServer
    from tests.gateway.conftest import running_gateway

    seen: list[dict[str, Any]] = []
    bodies = anthropic_session(rerender=True)
    settings = {"secret": SECRET, "state_store": redis_url}
    with ProviderServer() as upstream:
        original = upstream.messages

        def spy(body: dict[str, Any], run: str) -> Any:
            seen.append(body)
            return original(body, run)

        upstream.messages = spy
        with (
            running_gateway(upstream.url, "anthropic", **settings) as a,
            running_gateway(upstream.url, "anthropic", **settings) as b,
        ):
            for i, body in enumerate(bodies):
                url = (a, b)[i % 2].url
                answer = httpx.post(url + "/v1/messages", json=body, headers={"x-api-key": "sk-rr"}, timeout=30)
                assert answer.status_code == 200, answer.text
            totals = httpx.get(a.url + "/cp/savings", headers={"x-api-key": "sk-rr"}).json()["totals"]
    assert stable_prefixes(Api.MESSAGES, seen)
    assert totals["calls"] == len(bodies) and totals["replayed_segments"] > 0


# ---------------------------------------------------------------------------------------------- with mem0


def _mem0_turns() -> list[tuple[dict[str, Any], dict[str, str]]]:
    """One user's chat: four turns, then a client that edits its history (a new dedup epoch), then two more."""
    system = {"role": "system", "content": "You are a helpful assistant."}
    asks = ["Where does Alice live?", "What is her job?", "Does she have pets?", "Where does she live now?"]
    history: list[Any] = [system]
    bodies = []
    for ask in asks:
        history = [*history, {"role": "user", "content": ask}]
        bodies.append({"model": "m", "messages": history, "user": "alice"})
        history = [*history, {"role": "assistant", "content": "Noted."}]
    edited: list[Any] = [system, {"role": "user", "content": "Start over: what do you know about Alice?"}]
    for ask in ["What is her job?", "Where does she live?"]:
        bodies.append({"model": "m", "messages": edited, "user": "alice"})
        edited = [*edited, {"role": "assistant", "content": "Noted."}, {"role": "user", "content": ask}]
    headers = {**HEADERS, "x-cp-session": "mem0-chat"}
    return [(b, headers) for b in bodies]


def _served(gws: list[Gateway], wrappers: list[Any], turns: list[tuple[dict[str, Any], dict[str, str]]]) -> list[bytes]:
    """Each request through the next replica as the app serves it: the memory query, its mem0 search (that
    replica's wrapper), the plan, a 2xx commit and the dedup turn settled (kept unless placed fresh)."""
    from cp_memory.core.prompt import contract_of
    from cp_memory.gateway.memories import Memories, PlacementMode

    sent = []
    for i, (body, headers) in enumerate(turns):
        gw, cp = gws[i % len(gws)], wrappers[i % len(wrappers)]
        raw = json.dumps(body).encode()
        query = gw.memory_query(Api.CHAT, headers, raw)
        found = None
        if query is not None:
            response = cp.search(query.query, filters=query.filters, top_k=3, conversation_id=query.conversation_id)
            contract = contract_of(response)
            found = Memories(query, response, contract) if contract is not None and contract.shows_memories else None
        plan = gw.plan(Api.CHAT, headers, raw, found)
        assert not plan.failed_open
        gw.commit(plan)
        if plan.memories is not None:
            if plan.placement is PlacementMode.FRESH:
                cp.rollback(plan.memories.response)
            else:
                cp.commit(plan.memories.response)
        sent.append(plan.content)
    return sent


def test_two_replicas_with_redis_and_mem0_forward_one_gateways_bytes(redis_url: str) -> None:
    """With ``--mem0`` and ``--state-store``, a session served round-robin by two replicas (each with its own
    mem0 wrapper over the one mem0 store, as the gateway opens it) goes out byte for byte as through one
    gateway: the sent logs, the mem0 epochs and placements (the session's record) and the dedup conversations
    (the wrapper's shared store) are the same for both replicas."""
    from tests.mem0_fixtures import require_mem0

    require_mem0()
    from cp_memory.core.chat_memories import CHAT_MEMORY_OPTIONS
    from cp_memory.embedded import default_memory
    from cp_memory.memory import ContextPilotMemory

    base = default_memory()
    one_gw = replicas(1, None)[0]
    user = f"{one_gw.identify(Api.CHAT, HEADERS, {}).tenant}:alice"
    facts = (
        "Alice lives in Lisbon",
        "Alice works as a nurse",
        "Alice has a dog named Rex",
        "Alice moved to Porto",
        "Alice plays the cello",
        "Alice was born in 1990",
        "Alice speaks three languages",
        "Alice's sister is called Beth",
    )
    for fact in facts:
        base.add(fact, user_id=user, infer=False)
    turns = _mem0_turns()
    wrappers: list[Any] = []
    try:
        wrappers = [ContextPilotMemory(base, **CHAT_MEMORY_OPTIONS)]
        one = _served([one_gw], wrappers, turns)
        redis.Redis.from_url(redis_url).flushdb()
        shared = [ContextPilotMemory(base, **CHAT_MEMORY_OPTIONS, state_store=redis_url) for _ in range(2)]
        wrappers += shared
        two = _served(replicas(2, redis_url), shared, turns)
        assert two == one
        assert sum(b"shown before" in c for c in one) >= 2  # pointers to memories sent before, in both runs
        local = [ContextPilotMemory(base, **CHAT_MEMORY_OPTIONS) for _ in range(2)]
        wrappers += local
        assert _served(replicas(2, None), local, turns) != one  # each replica alone: its own half of the session
    finally:
        for w in wrappers:
            w.close()


def test_the_gateways_mem0_wrapper_shares_its_dedup_state_through_the_gateways_store(redis_url: str) -> None:
    from tests.mem0_fixtures import require_mem0

    require_mem0()
    from cp_memory.gateway.mem0_store import open_memory

    config = GatewayConfig(upstream="http://127.0.0.1:1", secret=SECRET, mem0="embedded", state_store=redis_url)
    memory = open_memory(config)
    try:
        assert memory._cp_pipeline.shared is not None  # the dedup conversations and indexes live in the store
    finally:
        memory.close()
    alone = open_memory(GatewayConfig(upstream="http://127.0.0.1:1", secret=SECRET, mem0="embedded"))
    try:
        assert alone._cp_pipeline.shared is None
    finally:
        alone.close()


def test_a_booking_is_one_round_trip_for_the_session_and_its_tenant(redis_url: str) -> None:
    gw = replicas(1, redis_url)[0]
    plan = gw.plan(Api.CHAT, HEADERS, json.dumps(chat_session(rerender=False)[0]).encode())
    store = gw.store
    assert isinstance(store, SharedSessionStore)
    calls = []
    real = store.client.store.count  # type: ignore[attr-defined]
    store.client.store.count = lambda request: calls.append(request) or real(request)  # type: ignore[attr-defined]
    usage = CacheUsage(provider="openai", model="gpt-4o", input_tokens=1000, cache_read_tokens=600, output_tokens=5)
    gw.record(plan, usage)
    assert len(calls) == 1 and len(calls[0].keys) == 2 and calls[0].recent  # the session's and the tenant's
    assert plan.identity is not None
    tenant = store.peek_tenant(plan.identity.tenant)
    session = store.sessions_of(plan.identity.tenant, 5)
    assert tenant is not None and tenant.report()["cache_read_tokens"] == 600
    assert [s.report()["cache_read_tokens"] for s in session] == [600]
