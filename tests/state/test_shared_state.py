"""Several wrappers, one Redis: the same conversation served round-robin keeps its pointers right, the
scope's index is one index, and no concurrent writer loses an update.

Each ``ContextPilotMemory`` here stands for one worker process behind a load balancer (its own indexes and
records in memory); ``state_store`` points them all at one private redis-server. The local store (the
default) is run the same way to show what the shared one fixes.
"""

from __future__ import annotations

import threading

import pytest

from benchmarks.common.pointers import History, turn
from tests.conftest import SPEAKER_A as A
from tests.mem0_fixtures import questions, require_mem0

require_mem0()

from cp_memory.memory import ContextPilotMemory  # noqa: E402
from cp_memory.state.keys import StateKeys  # noqa: E402

pytestmark = pytest.mark.mem0

F = {"user_id": A}


def workers(mem, n: int, **options):  # type: ignore[no-untyped-def]
    return [ContextPilotMemory(mem, **options) for _ in range(n)]


def round_robin(cps, conversation: str, n_turns: int = 8) -> History:  # type: ignore[no-untyped-def]
    history = History()
    for i, q in enumerate(questions(0)[:n_turns]):
        turn(cps[i % len(cps)], history, q, F, conversation)
    return history


def test_round_robin_with_the_local_store_points_at_the_wrong_turns(mem):
    history = round_robin(workers(mem, 2), "local")
    assert history.pointers and history.wrong  # what docs/scale.md warned about: each worker numbers its own turns


def test_round_robin_with_redis_keeps_every_pointer_right(mem, redis_url):
    cps = workers(mem, 2, state_store=redis_url)
    history = round_robin(cps, "shared")
    assert history.pointers > 0 and history.wrong == []
    assert sorted(history.turns) == list(range(1, 9))  # one numbering across both workers
    # a third worker that never served the conversation knows what it sent
    late = ContextPilotMemory(mem, state_store=redis_url)
    again = late.search(questions(0)[0], filters=F, top_k=6, conversation_id="shared")
    assert again["context_pilot"]["sent"] and again["context_pilot"]["turn"] == 9
    history.check(again)
    assert history.wrong == []


def test_a_rolled_back_turn_is_not_recorded_for_any_worker(mem, redis_url):
    a, b = workers(mem, 2, state_store=redis_url)
    first = a.search(questions(0)[0], filters=F, top_k=5, conversation_id="rb")
    a.rollback(first)
    retry = b.search(questions(0)[0], filters=F, top_k=5, conversation_id="rb")["context_pilot"]
    assert retry["turn"] == 1 and retry["sent"] == []


def test_the_scope_index_is_one_index_across_workers(mem, redis_url):
    a, b = workers(mem, 2, state_store=redis_url)
    q = questions(0)[3]
    a.search(q, filters=F, top_k=8)
    second = b.search(q, filters=F, top_k=8)["context_pilot"]
    assert second["prefix_len"] == 8  # b aligned with the request a inserted
    local_a, local_b = workers(mem, 2)
    local_a.search(q, filters=F, top_k=8)
    assert local_b.search(q, filters=F, top_k=8)["context_pilot"]["prefix_len"] == 0


def test_concurrent_writers_lose_no_update(mem, redis_url):
    cps = workers(mem, 2, state_store=redis_url)
    qs = questions(0)[:12]
    errors: list[BaseException] = []

    def serve(cp, mine):  # type: ignore[no-untyped-def]
        try:
            for q in mine:
                r = cp.search(q, filters=F, top_k=5, conversation_id="race")
                cp.commit(r)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=serve, args=(cp, qs[i::2])) for i, cp in enumerate(cps)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    import redis

    from cp_memory.core.index import ContextIndex
    from cp_memory.core.scope import Scope
    from cp_memory.state.records import decode_conversation, decode_index

    client, keys = redis.Redis.from_url(redis_url), StateKeys()
    idx_key = keys.index(Scope(A))
    index = ContextIndex.restore(decode_index(client.hget(idx_key, "d"), keys.owner(idx_key)))
    assert len(index.request_ids()) == 12  # every insert of both writers is in the shared index
    conv_key = keys.conversation(Scope(A), "race")
    conv, _ = decode_conversation(client.hget(conv_key, "d"), keys.owner(conv_key), max_bytes=1 << 22)
    assert conv.turns == 12  # every commit numbered once


def test_the_seam_with_the_in_process_store_gives_the_default_turns(mem):
    default, seam = ContextPilotMemory(mem), ContextPilotMemory(mem, state_store="memory://")
    for cp in (default, seam):
        assert round_robin([cp], "same", n_turns=5).wrong == []
    for q in questions(0)[:3]:
        a = default.search(q, filters=F, top_k=6, conversation_id="same")["context_pilot"]
        b = seam.search(q, filters=F, top_k=6, conversation_id="same")["context_pilot"]
        assert (a["turn"], a["order"], a["sent"]) == (b["turn"], b["order"], b["sent"])


class CountedStore:
    """The worker's store with its round trips counted (a pipelined read of several keys is one)."""

    def __init__(self, inner):  # type: ignore[no-untyped-def]
        self.inner, self.trips = inner, 0

    def __getattr__(self, name):  # type: ignore[no-untyped-def]
        method = getattr(self.inner, name)

        def counted(*args, **kwargs):  # type: ignore[no-untyped-def]
            self.trips += 1
            return method(*args, **kwargs)

        return counted


def test_a_turn_costs_two_round_trips_in_the_search_and_one_in_the_commit(mem, redis_url):
    a, b = workers(mem, 2, state_store=redis_url)
    stores = []
    for cp in (a, b):
        shared = cp._cp_pipeline.shared
        shared.state.store = CountedStore(shared.state.store)
        stores.append(shared.state.store)
    history = History()
    for i, q in enumerate(questions(0)[:6]):
        cp, store = (a, stores[0]) if i % 2 == 0 else (b, stores[1])
        before = store.trips
        response = cp.search(q, filters=F, top_k=6, conversation_id="trips")
        searched = store.trips - before
        history.check(response)
        history.sent(response, cp.commit(response))
        assert (searched, store.trips - before) == (2, 3)  # records and index read together; two writes
    assert history.pointers > 0 and history.wrong == []
