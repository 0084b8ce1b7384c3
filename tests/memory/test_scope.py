"""Nothing outside the caller's full scope ever reaches a prompt (no other user, agent, run or filter), on real mem0.

Superset alignment (``extra_budget``) shows memories the query did not retrieve, taken from cached
prefixes. Each case below first caches prefixes that hold memories *outside* a narrower scope, then
searches the narrower scope with a large superset budget, and checks that every memory shown is one mem0
itself returns for those very filters. The second line of defence (every extra checked by the store and
against the caller's whole filter set, tests/memory/test_filters.py) is tested here by planting foreign
blocks in a scope's own index.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest

from tests.mem0_fixtures import require_mem0

require_mem0()

from cp_memory.core.blocks import ContextBlock  # noqa: E402
from cp_memory.embedded import default_memory  # noqa: E402
from cp_memory.memory import ContextPilotMemory  # noqa: E402
from cp_memory.memory.filters import admits  # noqa: E402

pytestmark = pytest.mark.mem0

FOOD = [
    "{n} likes spicy ramen.",
    "{n} cooks pasta on Sundays.",
    "{n} eats sushi with friends.",
    "{n} bakes sourdough bread.",
    "{n} drinks green tea every morning.",
    "{n} hates olives.",
]


@pytest.fixture(scope="module")
def store() -> Any:
    """One store: alice under two agents and two runs, eve sharing alice's agent/run names, metadata."""
    memory = default_memory()
    ids: dict[str, list[str]] = {}

    def add(key: str, texts: list[str], **scope: Any) -> None:
        out = memory.add([{"role": "user", "content": t} for t in texts], infer=False, **scope)
        ids[key] = [r["id"] for r in out["results"]]

    add("alice/bot1", [t.format(n="Alice") for t in FOOD[:3]], user_id="alice", agent_id="bot1")
    add("alice/bot2", [t.format(n="Alice") for t in FOOD[3:]], user_id="alice", agent_id="bot2")
    add(
        "alice/r1", ["Alice ordered ramen in run one.", "Alice asked for tea in run one."], user_id="alice", run_id="r1"
    )
    add(
        "alice/r2",
        ["Alice ordered sushi in run two.", "Alice asked for bread in run two."],
        user_id="alice",
        run_id="r2",
    )
    add(
        "eve/bot1/r1",
        ["Eve likes spicy ramen too.", "Eve drinks green tea."],
        user_id="eve",
        agent_id="bot1",
        run_id="r1",
    )
    add(
        "eve/bot1/r9",
        ["Eve cooks pasta at night.", "Eve bakes sourdough bread."],
        user_id="eve",
        agent_id="bot1",
        run_id="r9",
    )
    add(
        "alice/work",
        ["Alice eats lunch at her desk.", "Alice drinks coffee at work."],
        user_id="alice",
        metadata={"category": "work"},
    )
    add(
        "alice/home",
        ["Alice eats dinner at home.", "Alice drinks tea at home."],
        user_id="alice",
        metadata={"category": "home"},
    )
    memory.cp_ids = ids
    yield memory
    memory.close()


QUERIES = [
    "What food does Alice like?",
    "What does Alice drink?",
    "What does Alice cook?",
    "spicy food",
    "bread and tea",
    "What does Alice eat?",
]


def shown_ids(out: dict) -> set[str]:
    info = out["context_pilot"]
    return {r["id"] for r in out["results"]} | set(info["order"]) | {b["id"] for b in info["blocks"]}


def allowed(store: Any, filters: dict) -> set[str]:
    """What mem0 itself returns for these filters (all of it)."""
    return {r["id"] for r in store.get_all(filters=filters, top_k=1000)["results"]}


def warm_then_check(store: Any, wide: dict, narrow: dict) -> tuple[int, int]:
    """Cache prefixes under ``wide``, then search ``narrow`` with a superset budget of 100%."""
    cp = ContextPilotMemory(store, extra_budget=1.0)
    ok = allowed(store, narrow)
    assert ok, "the narrow scope must hold memories"
    extras = 0
    for _ in range(2):
        for q in QUERIES:
            cp.search(q, filters=wide, top_k=8, threshold=0.0)
            out = cp.search(q, filters=narrow, top_k=2, threshold=0.0)
            assert shown_ids(out) <= ok, f"{narrow} rendered memories outside its scope"
            extras += len(out["context_pilot"]["extra"])
    return extras, len(ok)


def test_agent_filter_never_shows_another_agents_memory(store):
    warm_then_check(store, {"user_id": "alice"}, {"user_id": "alice", "agent_id": "bot1"})


def test_run_filter_never_shows_another_runs_memory(store):
    warm_then_check(store, {"user_id": "alice"}, {"user_id": "alice", "run_id": "r1"})


def test_agent_and_run_without_user_never_shows_another_users_other_run(store):
    narrow = {"agent_id": "bot1", "run_id": "r1"}
    warm_then_check(store, {"agent_id": "bot1"}, narrow)
    assert allowed(store, narrow) == set(store.cp_ids["eve/bot1/r1"])  # eve's bot1/r9 memories never qualify


def test_metadata_filter_never_shows_other_categories(store):
    warm_then_check(store, {"user_id": "alice"}, {"user_id": "alice", "category": "work"})
    warm_then_check(store, {"user_id": "alice"}, {"user_id": "alice", "AND": [{"category": {"eq": "work"}}]})


def test_extras_still_come_where_the_scope_allows_them(store):
    extras, _ = warm_then_check(
        store, {"user_id": "alice", "agent_id": "bot1"}, {"user_id": "alice", "agent_id": "bot1"}
    )
    assert extras > 0, "superset alignment still reuses prefixes within one scope"


def test_a_planted_foreign_block_in_a_scopes_own_index_is_refused(store, caplog):
    """Second line of defence: the store checks every extra against the caller's whole filter set."""
    cp = ContextPilotMemory(store, extra_budget=1.0)
    narrow = {"user_id": "alice", "agent_id": "bot1"}
    foreign = store.cp_ids["alice/bot2"][:1] + store.cp_ids["eve/bot1/r1"][:1]  # within the budget of 3
    mine = store.cp_ids["alice/bot1"]
    keys = [ContextBlock(id=i, text=store.get(i)["memory"]).key for i in foreign + mine]
    cp.index_for(narrow).insert(keys[: len(foreign)] + keys[len(foreign) :])  # a cached path starting foreign
    with caplog.at_level(logging.WARNING, logger="cp_memory.memory"):
        out = cp.search("What food does Alice like?", filters=narrow, top_k=3, threshold=0.0)
    assert shown_ids(out) <= allowed(store, narrow)
    assert not set(foreign) & shown_ids(out)
    assert any("outside the caller's filters" in r.getMessage() for r in caplog.records)


def test_a_memory_whose_metadata_changed_since_it_was_cached_is_refused(store):
    cp = ContextPilotMemory(store, extra_budget=1.0)
    work = {"user_id": "alice", "category": "work"}
    first = cp.search("Alice at work", filters=work, top_k=2, threshold=0.0)
    moved = first["context_pilot"]["order"][0]
    store.update(moved, metadata={"category": "home"})
    try:
        for q in QUERIES:
            out = cp.search(q, filters=work, top_k=1, threshold=0.0)
            assert moved not in shown_ids(out) or moved in {r["id"] for r in out["results"]}
            assert shown_ids(out) <= allowed(store, work)
    finally:
        store.update(moved, metadata={"category": "work"})


def test_dedup_records_are_per_agent_and_run(store):
    """Two agents of one user with the same conversation id never share a dedup record."""
    cp = ContextPilotMemory(store)
    bot2 = cp.search("food", filters={"user_id": "alice", "agent_id": "bot2"}, top_k=3, conversation_id="c")
    cp.commit(bot2)
    bot1 = cp.search("food", filters={"user_id": "alice", "agent_id": "bot1"}, top_k=3, conversation_id="c")
    info = bot1["context_pilot"]
    assert info["turn"] == 1 and info["sent"] == [] and len(bot1["results"]) == 3
    r1 = cp.search("food", filters={"user_id": "alice", "run_id": "r1"}, top_k=2, conversation_id="c")
    assert r1["context_pilot"]["turn"] == 1 and r1["context_pilot"]["sent"] == []


@pytest.mark.parametrize(
    ("filters", "item", "expected"),
    [
        ({"user_id": "a"}, {"user_id": "a"}, True),
        ({"user_id": "a"}, {"user_id": "b"}, False),
        ({"user_id": "a", "agent_id": "x"}, {"user_id": "a"}, False),  # no agent: no match
        ({"user_id": "a", "run_id": "r"}, {"user_id": "a", "run_id": "r"}, True),
        ({"user_id": " a "}, {"user_id": "a"}, True),  # mem0 trims ids
        ({"user_id": "a", "category": "w"}, {"user_id": "a", "metadata": {"category": "w"}}, True),
        ({"user_id": "a", "category": "w"}, {"user_id": "a", "metadata": {"category": "h"}}, False),
        ({"user_id": "a", "n": {"gte": 3}}, {"user_id": "a", "metadata": {"n": 3}}, True),
        ({"user_id": "a", "n": {"gt": 3}}, {"user_id": "a", "metadata": {"n": "3"}}, False),  # type mismatch: no
        ({"user_id": "a", "t": {"in": ["x", "y"]}}, {"user_id": "a", "metadata": {"t": "y"}}, True),
        ({"user_id": "a", "t": {"nin": ["x"]}}, {"user_id": "a", "metadata": {"t": "x"}}, False),
        ({"user_id": "a", "t": {"contains": "ab"}}, {"user_id": "a", "metadata": {"t": "x ab y"}}, True),
        # Qdrant's MatchText (mem0's contains/icontains) matches whole words: "xaby" holds no word "ab"
        ({"user_id": "a", "t": {"icontains": "AB"}}, {"user_id": "a", "metadata": {"t": "xaby"}}, False),
        ({"user_id": "a", "t": "*"}, {"user_id": "a", "metadata": {"t": 1}}, True),
        ({"user_id": "a", "t": "*"}, {"user_id": "a"}, True),  # mem0's Qdrant store adds no condition for "*"
        ({"AND": [{"user_id": "a"}, {"t": "x"}]}, {"user_id": "a", "metadata": {"t": "x"}}, True),
        ({"OR": [{"user_id": "b"}, {"t": "x"}]}, {"user_id": "a", "metadata": {"t": "x"}}, True),
        ({"user_id": "a", "NOT": [{"t": "x"}]}, {"user_id": "a", "metadata": {"t": "x"}}, False),
        ({"user_id": "a", "t": {"regex": "x"}}, {"user_id": "a", "metadata": {"t": "x"}}, False),  # unknown: no
        ({"user_id": "a"}, {"user_id": "a", "expiration_date": "2001-01-01"}, False),  # expired: hidden
    ],
)
def test_filter_evaluator_admits_only_what_it_can_prove(filters, item, expected):
    assert admits(filters, {"memory": "a memory", **item}) is expected
