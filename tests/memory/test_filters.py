"""Superset/swap extras never bring back a memory the caller's filters exclude *now*.

An extra comes from a cached prefix of the same scope: mem0 returned it for these very filters once, but
its payload may have changed since with its text unchanged (tagged ``archived``, categorised). Two gates
decide before it reaches a prompt: the store itself (one Qdrant scroll over the candidate ids with mem0's
translation of the filters, :mod:`cp_memory.memory.admission`), then the three-valued evaluator
(:mod:`cp_memory.memory.filters`, Qdrant's semantics, unknown refused). Where the store cannot be asked
(hosted platform, other vector stores) only extras of entity-id-only scopes are read and checked.

The evaluator cases below are the leaks an adversarial review found (the previous evaluator admitted each,
mem0 excludes each); ``tests/memory/test_filters_differential.py`` compares both gates with real mem0 on
random filters.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from tests.mem0_fixtures import require_mem0

require_mem0()

import httpx  # noqa: E402
from mem0 import MemoryClient  # noqa: E402

from cp_memory.core.blocks import ContextBlock  # noqa: E402
from cp_memory.embedded import default_memory  # noqa: E402
from cp_memory.memory import AsyncContextPilotMemory, ContextPilotMemory, admission  # noqa: E402
from cp_memory.memory.filters import StoredCopy, Verdict, admits, evaluate  # noqa: E402

pytestmark = pytest.mark.mem0


def item(**metadata: Any) -> dict[str, Any]:
    """A memory as mem0's ``get`` returns it (payload keys other than the promoted ones under ``metadata``)."""
    return {"id": "m1", "memory": "Alice plays chess.", "user_id": "u", "role": "user", "metadata": metadata}


U = {"user_id": "u"}


# ---------------------------------------------------------------- the evaluator: each reported leak
@pytest.mark.parametrize(
    ("filters", "memory", "why"),
    [
        ({**U, "NOT": [{"tags": {"in": ["archived"]}}]}, item(tags=["work", "archived"]), "NOT over list metadata"),
        ({**U, "NOT": [{"tags": ["archived"]}]}, item(tags="archived"), "list shorthand (MatchAny) under NOT"),
        ({**U, "NOT": [{"tags": ["archived"]}]}, item(tags=["work", "archived"]), "list shorthand, list payload"),
        ({**U, "tags": {"ne": "archived"}}, item(tags=["archived"]), "ne on a list: no element outside"),
        ({**U, "tags": {"nin": ["archived", "work"]}}, item(tags=["work", "archived"]), "nin on a list"),
        ({**U, "n": 1}, item(n=True), "True is not 1 for Qdrant"),
        ({**U, "n": True}, item(n=1), "1 is not True for Qdrant"),
        ({**U, "n": {"eq": 1}}, item(n=1.0), "a float payload never matches an exact value"),
        ({**U, "n": {"in": [1, 2]}}, item(n=2.0), "nor one of a list"),
        ({**U, "when": {"gte": "2024-05-01"}}, item(when="2024-05-01T01:00:00+02:00"), "datetime, not text"),
        ({**U, "when": {"gte": "2024-01-01"}}, item(when="May 2024"), "not a datetime: no match"),
        ({**U, "when": {"lt": "2024-05-01T00:00:00Z"}}, item(when="2024-04-30 23:30:00-01:00"), "offsets count"),
        ({**U, "OR": [{"when": "*"}, {"n": 1}]}, item(n=2, when="soon"), "'*' adds no condition: the OR is n == 1"),
        ({**U, "note": {"icontains": "AB"}}, item(note="xaby"), "MatchText matches whole words"),
        ({**U, "memory": "Alice plays chess."}, item(), "'memory' is get's name for the payload key 'data'"),
    ],
)
def test_each_reported_leak_is_refused(filters, memory, why):
    assert admits(filters, memory) is False, why


def test_hosted_v2_not_categories_in_is_refused():
    """The hosted platform's shape: entity ids and a NOT inside a top-level AND; categories is a list."""
    filters = {"AND": [{"user_id": "u"}, {"NOT": [{"categories": {"in": ["archived"]}}]}]}
    hosted = {"id": "m1", "memory": "Alice plays chess.", "user_id": "u", "categories": ["hobby", "archived"]}
    assert evaluate(filters, StoredCopy.of_item(hosted)) is Verdict.NO_MATCH
    assert admits(filters, hosted) is False


@pytest.mark.parametrize(
    ("filters", "memory"),
    [
        ({**U, "tags": "archived"}, item(tags=["work", "archived"])),  # any element matches
        ({**U, "tags": {"ne": "archived"}}, item(tags=["work", "archived"])),  # "work" is outside
        ({**U, "NOT": [{"tags": {"in": ["archived"]}}]}, item(tags=["work"])),
        ({**U, "NOT": [{"tags": {"in": ["archived"]}}]}, item()),  # absent: no condition matches, NOT admits
        ({**U, "n": {"gte": 1}}, item(n=1.5)),  # ranges compare int and float
        ({**U, "when": {"gte": "2024-04-30T22:00:00Z"}}, item(when="2024-05-01T01:00:00+02:00")),
        ({**U, "t": "*"}, item()),  # mem0's Qdrant store adds no condition for "*"
        ({**U, "note": {"contains": "call"}}, item(note="Urgent call mom")),
    ],
)
def test_what_qdrant_matches_is_admitted(filters, memory):
    assert admits(filters, memory) is True


@pytest.mark.parametrize(
    "filters",
    [
        {**U, "n": {"ne": 1}},  # MatchExcept on a bool payload: Qdrant versions differ
        {**U, "n": {"gt": "0"}},  # mem0 lets pydantic parse "0" as a number
        {**U, "n": {"eq": 1, "ne": 2}},  # mem0 keeps only the first operator
        {**U, "n": {"regex": "1"}},  # mem0 refuses it
        {**U, "note": {"icontains": "URGENT"}},  # words match, substring does not: versions differ
        {**U, "id": "m1"},  # mem0's get does not show this payload key
        {**U, "obj.a[0]": 1},  # array paths: not modelled
    ],
)
def test_unknown_stays_unknown_through_not(filters):
    memory = StoredCopy.of_item(item(n=True, note="Urgent call mom", obj={"a": [1]}))
    assert evaluate(filters, memory) is Verdict.UNKNOWN
    rest = {k: v for k, v in filters.items() if k != "user_id"}
    assert evaluate({**U, "NOT": [rest]}, memory) is Verdict.UNKNOWN
    assert not admits(filters, memory) and not admits({**U, "NOT": [rest]}, memory)


def test_expired_and_empty_memories_are_refused():
    assert admits(U, {**item(), "expiration_date": "2001-01-01"}) is False
    assert admits(U, {**item(), "expiration_date": "2001-01-01"}, show_expired=True) is True
    assert admits(U, {**item(), "memory": ""}) is False  # mem0's search skips memories without text


# ---------------------------------------------------------------- the four real-mem0 scenarios
FACTS = [
    "Alice plays tennis on Saturdays.",
    "Alice plays chess with her father.",
    "Alice plays the piano at night.",
    "Alice plays football at school.",
    "Alice reads novels on the train.",
    "Alice cooks curry on Fridays.",
]
QUERY = "What does Alice play?"
HOBBY = {"tags": ["hobby"]}
NOT_ARCHIVED = {"user_id": "alice", "NOT": [{"tags": {"in": ["archived"]}}]}
NOT_PRIVATE = {"user_id": "alice", "NOT": [{"category": ["private"]}]}
CHANGES = [
    (NOT_ARCHIVED, {"tags": ["hobby", "archived"]}, {"tags": ["hobby"]}),  # tagged
    (NOT_PRIVATE, {"category": "private"}, {"category": None}),  # categorised
]
MODES = [  # (options, top_k of the first search, top_k of the second)
    ({"extra_budget": 1.0}, 3, 2),  # superset: the second search retrieves the cached prefix but its middle
    ({"swap_budget": 0.25}, 4, 4),  # swap: the lowest-ranked retrieved memory would make room for it
]


@pytest.fixture(scope="module")
def store() -> Any:
    memory = default_memory()
    memory.add([{"role": "user", "content": f} for f in FACTS], user_id="alice", infer=False, metadata=HOBBY)
    yield memory
    memory.close()


def shown(out: Any) -> set[str]:
    info = out["context_pilot"]
    return {r["id"] for r in out["results"]} | set(info["order"]) | {b["id"] for b in info["blocks"]}


def allowed(store: Any, filters: dict[str, Any]) -> set[str]:
    return {r["id"] for r in store.search(QUERY, filters=filters, top_k=50, threshold=0.0)["results"]}


@pytest.mark.parametrize(("options", "first_k", "second_k"), MODES, ids=["superset", "swap"])
@pytest.mark.parametrize(("filters", "change", "undo"), CHANGES, ids=["tagged-archived", "categorised-private"])
def test_a_memory_changed_since_it_was_cached_never_comes_back(
    store, caplog, filters, change, undo, options, first_k, second_k
):
    cp = ContextPilotMemory(store, **options)
    first = cp.search(QUERY, filters=filters, top_k=first_k, threshold=0.0)
    moved = first["context_pilot"]["order"][1]  # inside the cached prefix, so alignment proposes it
    store.update(moved, metadata=change)  # text unchanged: the cached block still hits
    try:
        assert moved not in allowed(store, filters)
        with caplog.at_level(logging.WARNING, logger="cp_memory.memory"):
            out = cp.search(QUERY, filters=filters, top_k=second_k, threshold=0.0)
        assert moved not in shown(out)
        assert shown(out) <= allowed(store, filters)
        assert len(out["results"]) == second_k  # swap put back what it would have dropped
        assert any(moved in r.getMessage() and "outside the caller's filters" in r.getMessage() for r in caplog.records)
    finally:
        store.update(moved, metadata=undo)


async def test_the_async_wrapper_asks_the_store_too(caplog):
    memory = default_memory(async_=True)
    try:
        await memory.add([{"role": "user", "content": f} for f in FACTS], user_id="alice", infer=False, metadata=HOBBY)
        cp = AsyncContextPilotMemory(memory, extra_budget=1.0)
        first = await cp.search(QUERY, filters=NOT_ARCHIVED, top_k=3, threshold=0.0)
        moved = first["context_pilot"]["order"][1]
        await memory.update(moved, metadata={"tags": ["archived"]})
        with caplog.at_level(logging.WARNING, logger="cp_memory.memory"):
            again = await cp.search(QUERY, filters=NOT_ARCHIVED, top_k=2, threshold=0.0)
        assert moved not in shown(again)
        assert any(moved in r.getMessage() for r in caplog.records)
    finally:
        memory.close()


def test_one_store_call_per_search_and_no_reads(store, monkeypatch):
    """Extras the store admits come with their current payload: no ``get`` per extra."""
    checks: list[tuple[str, ...]] = []
    gets: list[Any] = []
    real_check, real_get = admission.admitted_payloads, store.get
    monkeypatch.setattr(
        admission, "admitted_payloads", lambda m, ids, f: checks.append(tuple(ids)) or real_check(m, ids, f)
    )
    monkeypatch.setattr(store, "get", lambda *a, **k: gets.append(a) or real_get(*a, **k))
    ranked = [(r["id"], r["memory"]) for r in store.search(QUERY, filters=NOT_ARCHIVED)["results"]]
    cp = ContextPilotMemory(store, extra_budget=1.0)
    path = [ranked[0], ranked[-1], ranked[1]]  # a cached prefix with a memory this search does not retrieve inside
    cp.index_for(NOT_ARCHIVED).insert([ContextBlock(id=i, text=t).key for i, t in path])
    out = cp.search(QUERY, filters=NOT_ARCHIVED, top_k=2, threshold=0.0)
    assert out["context_pilot"]["extra"] == [ranked[-1][0]]  # still allowed: admitted, with its payload
    assert checks == [(ranked[-1][0],)] and gets == []


# ---------------------------------------------------------------- where the store cannot be asked
class FakeMemoryOnAnotherStore:
    """A mem0-like Memory whose vector store is not Qdrant: search over a list, get by id."""

    def __init__(self) -> None:
        self.vector_store = object()
        self.memories = {
            f"m{i}": {"id": f"m{i}", "memory": f"Alice fact {i}.", "user_id": "alice", "metadata": {"tags": ["x"]}}
            for i in range(4)
        }
        self.gets: list[str] = []

    def search(self, query: str, *, top_k: int = 20, filters: Any = None, **kwargs: Any) -> dict[str, Any]:
        hits = [dict(m, score=1.0 - i / 10) for i, m in enumerate(self.memories.values()) if m["id"] != "m1"]
        return {"results": hits[:top_k]}

    def get(self, memory_id: str) -> dict[str, Any]:
        self.gets.append(memory_id)
        return self.memories[memory_id]


@pytest.mark.parametrize(
    ("filters", "expect_extra"),
    [({"user_id": "alice"}, True), ({"user_id": "alice", "NOT": [{"tags": "archived"}]}, False)],
)
def test_without_a_store_check_only_entity_scopes_get_extras(filters, expect_extra):
    fake = FakeMemoryOnAnotherStore()
    cp = ContextPilotMemory(fake, extra_budget=1.0)
    keys = [ContextBlock(id=i, text=fake.memories[i]["memory"]).key for i in ("m0", "m1", "m2")]
    cp.index_for(filters).insert(keys)  # a cached path with m1 (which this search does not retrieve) inside
    out = cp.search("Alice", filters=filters, top_k=2)
    assert ("m1" in out["context_pilot"]["extra"]) is expect_extra
    assert fake.gets == (["m1"] if expect_extra else [])


# ---------------------------------------------------------------- the hosted platform (a fake)
class FakeHostedPlatform:
    """A fake of api.mem0.ai's search and get implementing mem0's *documented* v2 filter semantics
    (docs.mem0.ai/platform/features/v2-memory-filters: AND/OR/NOT, entity ids, ``categories`` ``in``
    = any listed category). The platform itself cannot be reached from here."""

    def __init__(self) -> None:
        self.memories = {
            f"m{i}": {"id": f"m{i}", "memory": f, "user_id": "alice", "categories": ["hobby"]}
            for i, f in enumerate(FACTS)
        }

    def matches(self, filters: dict[str, Any], memory: dict[str, Any]) -> bool:
        for key, cond in filters.items():
            if key == "AND" and not all(self.matches(c, memory) for c in cond):
                return False
            if key == "OR" and not any(self.matches(c, memory) for c in cond):
                return False
            if key == "NOT" and any(self.matches(c, memory) for c in cond):
                return False
            if key == "categories" and not set(cond["in"]) & set(memory.get("categories") or []):
                return False
            if key == "user_id" and memory.get("user_id") != cond:
                return False
        return True

    def __call__(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/v1/ping/":
            return httpx.Response(200, json={"user_email": "test@example.com", "org_id": "org", "project_id": "proj"})
        if path == "/v3/memories/search/":
            body = json.loads(request.content)
            hits = [m for m in self.memories.values() if self.matches(body.get("filters") or {}, m)]
            return httpx.Response(200, json={"results": [dict(m, score=1.0) for m in hits[: body.get("top_k", 10)]]})
        if path.startswith("/v1/memories/") and request.method == "GET":
            return httpx.Response(200, json=self.memories[path.split("/")[3]])
        return httpx.Response(200, json={"ok": True})


@pytest.mark.parametrize(("options", "first_k", "second_k"), MODES, ids=["superset", "swap"])
def test_hosted_memory_categorised_archived_never_comes_back(options, first_k, second_k):
    fake = FakeHostedPlatform()
    cp = ContextPilotMemory(
        MemoryClient(api_key="test-key", client=httpx.Client(transport=httpx.MockTransport(fake))), **options
    )
    filters = {"AND": [{"user_id": "alice"}, {"NOT": [{"categories": {"in": ["archived"]}}]}]}
    first = cp.search(QUERY, filters=filters, top_k=first_k)
    moved = first["context_pilot"]["order"][1]
    fake.memories[moved]["categories"] = ["hobby", "archived"]
    out = cp.search(QUERY, filters=filters, top_k=second_k)
    assert moved not in shown(out)
    assert len(out["results"]) == second_k
