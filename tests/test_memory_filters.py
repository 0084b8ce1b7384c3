"""Superset/swap extras never bring back a memory the caller's filters exclude *now*.

An extra comes from a cached prefix of the same scope: mem0 returned it for these very filters once, but
its payload may have changed since with its text unchanged (tagged ``archived``, categorised). Two gates
decide before it reaches a prompt: the store itself (one Qdrant scroll over the candidate ids with mem0's
translation of the filters, :mod:`cp_memory.memory.admission`), then the three-valued evaluator
(:mod:`cp_memory.memory.filters`, Qdrant's semantics, unknown refused). Where the store cannot be asked
(hosted platform, other vector stores) only extras of entity-id-only scopes are read and checked.

The evaluator cases below are the leaks an adversarial review found (the previous evaluator admitted each,
mem0 excludes each); ``tests/test_memory_filters_differential.py`` compares both gates with real mem0 on
random filters.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.mem0_fixtures import require_mem0

require_mem0()

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
