"""The store seam's contract, the same for the in-process store and a real Redis: tokens, compare-and-set,
TTL, a value this store did not write, and the owner tags on what it holds."""

from __future__ import annotations

import pytest

from cp_memory.core.dedup_records import Conversation, Location
from cp_memory.core.scope import Scope
from cp_memory.state import MemoryStateStore, StateKeys, StateStore, StoreUnavailable, open_state_store
from cp_memory.state.records import (
    ForeignRecord,
    decode_conversation,
    decode_index,
    encode_conversation,
    encode_index,
)
from cp_memory.state.store import MALFORMED

TTL = 60


@pytest.fixture(params=["memory", "redis"])
def store(request: pytest.FixtureRequest) -> StateStore:
    if request.param == "memory":
        return MemoryStateStore()
    url = request.getfixturevalue("redis_url")
    return open_state_store(url, timeout_s=1.0)


def test_a_write_needs_the_token_it_read(store: StateStore) -> None:
    assert store.read("k", ttl_s=TTL).absent
    first = store.write("k", b"one", expected="", ttl_s=TTL)
    assert first
    assert store.write("k", b"lost", expected="", ttl_s=TTL) is None  # another writer got there first
    second = store.write("k", b"two", expected=first, ttl_s=TTL)
    assert second and second != first
    got = store.read("k", ttl_s=TTL)
    assert (got.token, got.data) == (second, b"two")
    assert store.read("k", have=second, ttl_s=TTL).data is None  # unchanged: no bytes sent again
    store.delete("k")
    assert store.read("k", ttl_s=TTL).absent


def test_several_reads_in_one_go_answer_as_the_reads_one_by_one(store: StateStore) -> None:
    token = store.write("a", b"one", expected="", ttl_s=TTL)
    assert token
    many = store.read_many([("a", "", TTL), ("b", "", TTL), ("a", token, TTL)])  # type: ignore[attr-defined]
    assert [(v.token, v.data) for v in many] == [(token, b"one"), ("", None), (token, None)]


def test_counters_add_up_expire_and_list_the_recently_used(store: StateStore) -> None:
    from cp_memory.state.ops import Count, ReadCounts, ReadRecent, answer

    for i in range(3):
        deltas = (("calls", 1), ("cost", 0.25))
        answer(store, Count(("s", "t"), deltas, TTL, recent="z", member=f"m{i}", score=100.0 + i))
    answer(store, Count(("t",), (("calls", 2),), TTL, recent="z", member="m0", score=104.0))  # m0 used again
    s, t, none = answer(store, ReadCounts(("s", "t", "absent")))
    assert s == {"calls": 3, "cost": 0.75} and t == {"calls": 5, "cost": 0.75} and none == {}
    assert answer(store, ReadRecent("z", since=0.0, limit=10)) == ("m0", "m2", "m1")  # most recent first
    assert answer(store, ReadRecent("z", since=101.5, limit=1)) == ("m0",)
    answer(store, Count(("t",), (("calls", 1),), TTL, recent="z", member="late", score=104.0 + TTL + 1))
    assert "m1" not in answer(store, ReadRecent("z", since=0.0, limit=10))  # older than the TTL: dropped


def test_a_pipelined_read_is_one_round_trip_and_survives_a_flushed_script_cache(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import redis

    from cp_memory.state.redis_store import RedisStateStore

    store = RedisStateStore(redis_url, timeout_s=1.0)
    token = store.write("a", b"one", expected="", ttl_s=TTL)
    admin = redis.Redis.from_url(redis_url)
    admin.script_flush()  # a restarted server: the read script is gone
    assert [v.data for v in store.read_many([("a", "", TTL), ("b", "", TTL)])] == [b"one", None]
    sends = []
    real = redis.connection.AbstractConnection.send_packed_command

    def counted(self, command, check_health=True):  # type: ignore[no-untyped-def]
        sends.append(command)
        return real(self, command, check_health)

    monkeypatch.setattr(redis.connection.AbstractConnection, "send_packed_command", counted)
    assert [v.token for v in store.read_many([("a", "", TTL), ("b", "", TTL)])] == [token, ""]
    assert len(sends) == 1  # both reads went out together, with no SCRIPT EXISTS before them


def test_keys_carry_a_ttl_in_redis(redis_url: str) -> None:
    store = open_state_store(redis_url, timeout_s=1.0)
    store.write("k", b"x", expected="", ttl_s=TTL)
    import redis

    assert 0 < redis.Redis.from_url(redis_url).ttl("k") <= TTL


def test_a_value_this_store_did_not_write_reads_as_malformed_and_can_be_replaced(redis_url: str) -> None:
    import redis

    redis.Redis.from_url(redis_url).set("k", b"someone else's string")
    store = open_state_store(redis_url, timeout_s=1.0)
    got = store.read("k", ttl_s=TTL)
    assert got.token == MALFORMED
    assert store.write("k", b"mine", expected="", ttl_s=TTL) is None
    assert store.write("k", b"mine", expected=MALFORMED, ttl_s=TTL)
    assert store.read("k", ttl_s=TTL).data == b"mine"


def test_a_server_that_is_not_there_is_unavailable() -> None:
    from tests.redis_server import free_port, redis_binary

    redis_binary()
    store = open_state_store(f"redis://127.0.0.1:{free_port()}/0", timeout_s=0.2)
    with pytest.raises(StoreUnavailable):
        store.read("k", ttl_s=TTL)


def test_keys_are_namespaced_by_tenant_full_scope_and_conversation() -> None:
    a, b = StateKeys("app-a"), StateKeys("app-b")
    alice = Scope("alice")
    narrowed = Scope("alice", conditions="0123456789abcdef")
    assert a.index(alice) != b.index(alice) != a.index(narrowed)
    assert a.conversation(alice, "c1") != a.conversation(alice, "c2") != b.conversation(alice, "c1")
    assert a.conversation(narrowed, "c1") == a.conversation(alice, "c1")  # dedup records: entity ids
    assert a.conversation(Scope("alice", "bot"), "c1") != a.conversation(alice, "c1")
    assert ":" not in a.index(Scope("x:y")).split(":idx:")[1]  # no id can inject a separator


def test_records_name_their_owner() -> None:
    keys = StateKeys()
    mine, other = keys.index(Scope("alice")), keys.index(Scope("bob"))
    value = encode_index(b"snapshot", keys.owner(mine))
    assert decode_index(value, keys.owner(mine)) == b"snapshot"
    with pytest.raises(ForeignRecord):
        decode_index(value, keys.owner(other))
    conv = Conversation(turns=2)
    conv.by_id["m1"] = ("d1", Location("m1", 1, 3))
    conv.by_digest["d1"] = Location("m1", 1, 3)
    k1 = keys.conversation(Scope("alice"), "c1")
    data = encode_conversation(conv, keys.owner(k1))
    assert decode_conversation(data, keys.owner(k1), max_bytes=1 << 20) == (conv, "")
    with pytest.raises(ForeignRecord):
        decode_conversation(data, keys.owner(keys.conversation(Scope("alice"), "c2")), max_bytes=1 << 20)
    for bad in (b"", b"{}", b"[1]", data[:-3], data.replace(b'"turns":2', b'"turns":0')):
        with pytest.raises(ValueError):
            decode_conversation(bad, keys.owner(k1), max_bytes=1 << 20)
