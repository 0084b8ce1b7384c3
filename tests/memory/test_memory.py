"""ContextPilotMemory over a real mem0 Memory (embedded Qdrant + bundled MiniLM), LoCoMo observations.

No mem0 mocks: mocks appear only to inject failures. The paper's mechanics, one test each: alignment
(results are mem0's, reordered to share a prefix), the order annotation (restores mem0's ranking),
multi-turn dedup (already-sent memories become location annotations), fallback (never lose a memory).
"""

from __future__ import annotations

import logging
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.conftest import SPEAKER_A as A
from tests.conftest import SPEAKER_B as B
from tests.mem0_fixtures import require_mem0

require_mem0()

from cp_memory.core.index import ContextIndex
from cp_memory.core.render import build_messages, build_prompt
from cp_memory.memory import ContextPilotConfig, ContextPilotInfo, ContextPilotMemory

pytestmark = pytest.mark.mem0

Q1 = "What does Caroline want to do for her career?"
Q2 = "What career is Caroline interested in pursuing?"
QB = "What does Melanie like to paint?"
LABEL = re.compile(r"\[Doc (\d+)\]")


class Spy:
    """Calls through to the real function and remembers what it returned (no behaviour change)."""

    def __init__(self, fn: Any) -> None:
        self.fn = fn
        self.returns: list[Any] = []
        self.calls: list[tuple[tuple, dict]] = []

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self.calls.append((args, kwargs))
        out = self.fn(*args, **kwargs)
        self.returns.append(out)
        return out


@pytest.fixture
def cp(mem):
    return ContextPilotMemory(mem)


def ranked(annotation: str, info: dict) -> list[str]:
    """Ids in the order an order annotation ranks them (labels resolved through the rendered blocks)."""
    by_label = {b["label"]: b["id"] for b in info["blocks"]}
    return [by_label[f"[Doc {n}]"] for n in LABEL.findall(annotation.split(":", 1)[1])]


def strip(results: list[dict]) -> dict[str, dict]:
    return {r["id"]: {k: v for k, v in r.items() if k not in ("score", "rank")} for r in results}


def test_results_are_mem0_results_reordered(mem, cp, monkeypatch):
    plain = mem.search(Q1, filters={"user_id": A}, top_k=10)
    spy = Spy(mem.search)
    monkeypatch.setattr(mem, "search", spy)
    out = cp.search(Q1, filters={"user_id": A}, top_k=10)
    # mem0 was called with exactly the caller's arguments
    assert spy.calls == [((Q1,), {"top_k": 10, "filters": {"user_id": A}})]
    returned = spy.returns[0]["results"]
    assert len(out["results"]) == len(returned) == len(plain["results"]) == 10
    # mem0's result dicts (copies: the caller's dicts gain "rank", mem0's are not mutated), reordered
    assert strip(out["results"]) == strip(returned) == strip(plain["results"])
    assert all("rank" not in r for r in returned)
    plain_scores = {r["id"]: r["score"] for r in plain["results"]}
    assert all(r["score"] == pytest.approx(plain_scores[r["id"]], abs=1e-5) for r in out["results"])
    assert [returned[r["rank"]]["id"] for r in out["results"]] == [r["id"] for r in out["results"]]
    info = out["context_pilot"]
    assert info["original_ids"] == [r["id"] for r in returned]
    assert info["fallback"] is False and info["scope"] == f"user_id={A}"
    # rendered blocks follow the results' (aligned) order and carry mem0's text
    assert [b["id"] for b in info["blocks"]] == [r["id"] for r in out["results"]]
    assert [b["text"] for b in info["blocks"]] == [r["memory"] for r in out["results"]]
    assert set(out) == set(plain) | {"context_pilot"}


def test_results_order_mem0_keeps_mem0s_ranking(mem):
    cp = ContextPilotMemory(mem, results_order="mem0")
    cp.search(Q2, filters={"user_id": A}, top_k=8)  # warm the index so the aligned order can differ
    out = cp.search(Q1, filters={"user_id": A}, top_k=8)
    plain = mem.search(Q1, filters={"user_id": A}, top_k=8)
    assert [r["id"] for r in out["results"]] == [r["id"] for r in plain["results"]]
    assert [r["rank"] for r in out["results"]] == list(range(8))
    info = out["context_pilot"]  # the prompt still uses the aligned order
    assert [b["id"] for b in info["blocks"]] == info["order"]
    assert sorted(info["order"]) == sorted(r["id"] for r in plain["results"])


def test_no_order_annotation_by_default(mem, cp):
    """Off by default since LoCoMo answers were scored (docs/quality.md): the aligned prompt carries none."""
    cp.search(Q1, filters={"user_id": A}, top_k=8)
    info = cp.search(QB.replace("Melanie", "Caroline"), filters={"user_id": A}, top_k=8)["context_pilot"]
    assert cp.cp_config.annotate is False
    assert info["order_annotation"] == "" and "priority order" not in info["context"]


def test_order_annotation_restores_mem0_ranking(mem):
    """With annotate=True it names mem0's five best memories in mem0's order, then says the others follow."""
    cp = ContextPilotMemory(mem, annotate=True)
    cp.search(Q1, filters={"user_id": A}, top_k=8)  # warm the index so the next order can differ
    out = cp.search(QB.replace("Melanie", "Caroline"), filters={"user_id": A}, top_k=8)
    info = out["context_pilot"]
    plain = mem.search(QB.replace("Melanie", "Caroline"), filters={"user_id": A}, top_k=8)
    assert cp.cp_config.annotate_top == 5
    assert ranked(info["order_annotation"], info) == [r["id"] for r in plain["results"]][:5]
    assert info["context"].endswith(info["order_annotation"])
    assert info["order_annotation"].startswith("Please read the context in the following priority order: [Doc ")
    assert info["order_annotation"].endswith("] > the rest and answer the question.")


def test_annotate_top_none_is_the_papers_full_ranking(mem):
    cp = ContextPilotMemory(mem, annotate=True, annotate_top=None)
    cp.search(Q1, filters={"user_id": A}, top_k=8)
    info = cp.search(QB.replace("Melanie", "Caroline"), filters={"user_id": A}, top_k=8)["context_pilot"]
    plain = mem.search(QB.replace("Melanie", "Caroline"), filters={"user_id": A}, top_k=8)
    assert ranked(info["order_annotation"], info) == [r["id"] for r in plain["results"]]
    assert "the rest" not in info["order_annotation"]


def test_related_query_shares_prefix(cp):
    first = cp.search(Q1, filters={"user_id": A}, top_k=6)["context_pilot"]
    second = cp.search(Q2, filters={"user_id": A}, top_k=6)["context_pilot"]
    assert first["prefix_len"] == 0
    assert second["prefix_len"] > 0
    n = second["prefix_len"]
    assert second["order"][:n] == first["order"][:n]
    # the shared blocks render to byte-identical text
    p1, p2 = build_prompt(Q1, {"context_pilot": first}), build_prompt(Q2, {"context_pilot": second})
    shared = "Context:\n" + "\n".join(f"[Doc {i + 1}] {first['blocks'][i]['text']}" for i in range(n))
    assert p1.startswith(shared) and p2.startswith(shared)


def test_same_blocks_render_byte_identical(cp):
    a = cp.search(Q1, filters={"user_id": A}, top_k=5)
    b = cp.search(Q1, filters={"user_id": A}, top_k=5)
    assert b["context_pilot"]["prefix_len"] == len(b["context_pilot"]["order"]) == 5
    assert a["context_pilot"]["context"] == b["context_pilot"]["context"]
    assert build_prompt(Q1, a) == build_prompt(Q1, b)
    assert build_messages(Q1, a, system="s") == build_messages(Q1, b, system="s")


def test_dedup_across_committed_turns_of_one_conversation(mem, cp):
    t1 = cp.search(Q1, filters={"user_id": A}, top_k=5, conversation_id="c1")
    assert t1["context_pilot"]["committed"] is False and t1["context_pilot"]["turn"] == 1
    assert cp.commit(t1) == 1
    t2 = cp.search(Q2, filters={"user_id": A}, top_k=5, conversation_id="c1")
    i1, i2 = t1["context_pilot"], t2["context_pilot"]
    assert i2["turn"] == 2 and i1["sent"] == []
    assert i2["sent"], "the related second question retrieves memories sent in turn 1"
    shown = {b["id"]: b for b in i1["blocks"]}
    for s in i2["sent"]:
        assert s["id"] in shown and s["turn"] == 1
        assert s["label"] == shown[s["id"]]["label"]
        assert s["annotation"] in i2["context"]
        assert shown[s["id"]]["text"] not in i2["context"]  # replaced, not repeated
    # over-fetch: still top_k fresh memories, and results hold only those (never more than top_k)
    assert len(i2["blocks"]) == len(t2["results"]) == 5
    assert [r["id"] for r in t2["results"]] == i2["order"]
    assert not set(i2["order"]) & set(shown)
    # annotations come after the blocks
    ctx = i2["context"]
    assert ctx.index(i2["sent"][0]["annotation"]) > ctx.index(i2["blocks"][-1]["text"])


def test_no_dedup_across_conversations_users_or_without_conversation(mem, cp):
    cp.commit(cp.search(Q1, filters={"user_id": A}, top_k=5, conversation_id="conv-x"))
    other_conv = cp.search(Q1, filters={"user_id": A}, top_k=5, conversation_id="conv-y")["context_pilot"]
    assert other_conv["sent"] == [] and other_conv["turn"] == 1
    other_user = cp.search(Q1, filters={"user_id": B}, top_k=5, conversation_id="conv-x")["context_pilot"]
    assert other_user["sent"] == [] and other_user["turn"] == 1
    no_conv = cp.search(Q1, filters={"user_id": A}, top_k=5)
    assert no_conv["context_pilot"]["conversation_id"] is None and no_conv["context_pilot"]["turn_id"] is None
    assert cp.commit(no_conv) is None
    # run_id alone is no conversation unless configured (a plain mem0 caller gets every result)
    run_only = ContextPilotMemory(mem)
    f = {"user_id": A, "run_id": "r-1"}
    assert run_only.search(Q1, filters=f, top_k=3)["context_pilot"]["conversation_id"] is None
    as_conv = ContextPilotMemory(mem, run_id_as_conversation=True, commit="on_search")
    assert as_conv.search(Q1, filters=f, top_k=3)["context_pilot"]["conversation_id"] == "r-1"


def test_commit_on_search_registers_at_once(mem):
    cp = ContextPilotMemory(mem, commit="on_search")
    t1 = cp.search(Q1, filters={"user_id": A}, top_k=5, conversation_id="auto")
    assert t1["context_pilot"]["committed"] is True and t1["context_pilot"]["turn_id"] is None
    t2 = cp.search(Q1, filters={"user_id": A}, top_k=5, conversation_id="auto")
    assert len(t2["context_pilot"]["sent"]) == 5


def test_dedup_off(mem):
    cp = ContextPilotMemory(mem, dedup=False, annotate=False)
    cp.commit(cp.search(Q1, filters={"user_id": A}, top_k=5, conversation_id="c"))
    info = cp.search(Q1, filters={"user_id": A}, top_k=5, conversation_id="c")["context_pilot"]
    assert info["sent"] == [] and len(info["blocks"]) == 5
    assert info["order_annotation"] == "" and "priority order" not in info["context"]


def test_passthrough_methods(mem):
    cp = ContextPilotMemory(mem)
    added = cp.add("Zed keeps bees on the roof.", user_id="zed", infer=False)
    mid = added["results"][0]["id"]
    assert cp.get(mid)["memory"] == "Zed keeps bees on the roof."
    assert [m["id"] for m in cp.get_all(filters={"user_id": "zed"})["results"]] == [mid]
    assert cp.update(mid, text="Zed keeps two hives on the roof.") == {"message": "Memory updated successfully!"}
    assert mem.get(mid)["memory"] == "Zed keeps two hives on the roof."
    events = [h["event"] for h in cp.history(mid)]
    assert events[:2] == ["ADD", "UPDATE"]
    # everything else is mem0's own attribute
    assert cp.config is mem.config and cp.vector_store is mem.vector_store
    assert cp.embedding_model is mem.embedding_model and cp.wrapped is mem
    assert "vector_store" in dir(cp) and "commit" in dir(cp)
    with pytest.raises(AttributeError):
        cp.no_such_attribute  # noqa: B018
    assert cp.delete(mid) == {"message": "Memory deleted successfully!"}
    assert cp.get(mid) is None
    cp.add("Zed also rows.", user_id="zed", infer=False)
    cp.search("rowing", filters={"user_id": "zed"})
    assert "user_id=zed" in cp.scopes
    cp.delete_all(user_id="zed")
    assert cp.get_all(filters={"user_id": "zed"})["results"] == []
    assert "user_id=zed" not in cp.scopes  # its index described memories that are gone


def test_update_and_delete_never_leave_stale_text(mem):
    from tests.mem0_fixtures import ingest

    cp = ContextPilotMemory(mem)
    ids = ingest(mem, "upd", ["Uma's favourite colour is green.", "Uma lives in Porto.", "Uma works as a nurse."])
    f = {"user_id": "upd"}
    first = cp.search("What is Uma's favourite colour?", filters=f, top_k=3, conversation_id="u")
    cp.commit(first)
    assert "green" in first["context_pilot"]["context"]
    cp.update(ids[0], text="Uma's favourite colour is now purple.")
    second = cp.search("What is Uma's favourite colour?", filters=f, top_k=3, conversation_id="u")
    info = second["context_pilot"]
    assert ids[0] in info["order"] and ids[0] not in {s["id"] for s in info["sent"]}  # edited: sent again
    assert "purple" in info["context"] and "green" not in info["context"]
    assert {b["id"]: b["text"] for b in info["blocks"]}[ids[0]] == "Uma's favourite colour is now purple."
    # the index never maps the new text onto the block cached with the old one
    index = cp.index_for(f)
    keys = {k for rid in index.request_ids() for k in index.order_of(rid) if k[0] == ids[0]}
    assert len(keys) == 2
    cp.delete(ids[1])
    third = cp.search("Where does Uma live?", filters=f, top_k=3, conversation_id="u2")
    assert "Porto" not in third["context_pilot"]["context"]
    assert ids[1] not in {r["id"] for r in third["results"]}
    mem.delete_all(user_id="upd")


@pytest.mark.parametrize(
    "kwargs",
    [
        {"filters": {}},
        {"filters": None},
        {"filters": {"category": "x"}},
        {"filters": {"user_id": "   "}},
        {"user_id": A},
        {"filters": {"user_id": A}, "top_k": -1},
    ],
)
def test_bad_arguments_raise_mem0s_own_error(mem, cp, kwargs):
    with pytest.raises(Exception) as theirs:
        mem.search(Q1, **kwargs)
    with pytest.raises(type(theirs.value)) as ours:
        cp.search(Q1, **kwargs)
    assert str(ours.value) == str(theirs.value)


@pytest.mark.parametrize("filters", ["alice", ["user_id", "alice"], 3])
def test_filters_of_the_wrong_type_raise_a_clear_type_error(cp, filters):
    with pytest.raises(TypeError, match="filters must be a dict"):
        cp.search(Q1, filters=filters)


def test_empty_store_returns_empty_results(cp):
    out = cp.search(Q1, filters={"user_id": "nobody-here"})
    assert out["results"] == []
    info = out["context_pilot"]
    assert info["blocks"] == [] and info["context"] == "" and info["fallback"] is False
    assert build_prompt(Q1, out) == f"Question: {Q1}\nAnswer:"


def test_alignment_failure_falls_back_to_mem0_order(mem, cp, monkeypatch, caplog):
    plain = mem.search(Q1, filters={"user_id": A}, top_k=5)

    def boom(self, *a, **k):
        raise RuntimeError("index exploded")

    monkeypatch.setattr(ContextIndex, "insert", boom)
    with caplog.at_level(logging.ERROR, logger="cp_memory.memory"):
        out = cp.search(Q1, filters={"user_id": A}, top_k=5)
    assert [r["id"] for r in out["results"]] == [r["id"] for r in plain["results"]]
    info = out["context_pilot"]
    assert info["fallback"] is True and "index exploded" in info["error"]
    assert [b["id"] for b in info["blocks"]] == [r["id"] for r in plain["results"]]
    assert any(rec.exc_info for rec in caplog.records)


def test_dedup_failure_falls_back(mem, cp, monkeypatch):
    def boom(*a, **k):
        raise KeyError("dedup exploded")

    monkeypatch.setattr(cp.deduplicator, "plan", boom)
    out = cp.search(Q1, filters={"user_id": A}, top_k=5, conversation_id="z")
    assert out["context_pilot"]["fallback"] is True and len(out["results"]) == 5


def test_transient_mem0_failures_are_retried(mem, monkeypatch):
    cp = ContextPilotMemory(mem, retry_wait_s=0.001)
    real = mem.search
    calls = {"n": 0}

    def flaky(*a, **k):
        calls["n"] += 1
        if calls["n"] < 3:
            raise ConnectionError("qdrant hiccup")
        return real(*a, **k)

    monkeypatch.setattr(mem, "search", flaky)
    out = cp.search(Q1, filters={"user_id": A}, top_k=3)
    assert calls["n"] == 3 and len(out["results"]) == 3
    calls["n"] = -10
    with pytest.raises(ConnectionError):
        cp.search(Q1, filters={"user_id": A}, top_k=3)  # bounded: 3 attempts, then mem0's error
    assert calls["n"] == -7


def test_concurrent_searches_of_one_user(mem):
    cp = ContextPilotMemory(mem)
    queries = [Q1, Q2, "Caroline's family", "adoption plans", "support group", "painting"] * 4
    barrier = threading.Barrier(4)

    def run(q: str) -> dict:
        try:
            barrier.wait(timeout=5)
        except threading.BrokenBarrierError:
            pass
        return cp.search(q, filters={"user_id": A}, top_k=5)

    with ThreadPoolExecutor(4) as pool:
        outs = list(pool.map(run, queries))
    assert all(len(o["results"]) == 5 and not o["context_pilot"]["fallback"] for o in outs)
    assert len(cp.index_for({"user_id": A})) == len(queries)


def test_info_model_is_frozen_and_json():
    info = ContextPilotInfo(scope=None, conversation_id=None, turn=None, original_ids=(), order=())
    from pydantic import ValidationError

    with pytest.raises(ValidationError):
        info.scope = "x"  # type: ignore[misc]
    d = info.to_dict()
    assert d["blocks"] == [] and d["sent"] == [] and d["location_annotations"] == [] and d["labels"] == {}


def test_configuration_is_validated_with_clear_errors(mem):
    class Duck:
        def search(self, query, *, top_k=20, filters=None):
            return {"results": []}

        def get(self, memory_id):
            return None

    with pytest.raises(TypeError, match="needs a mem0 object"):
        ContextPilotMemory(None)
    with pytest.raises(TypeError, match="has no search"):
        ContextPilotMemory(object())
    for bad in (
        {"extra_budget": 2.0},
        {"max_scopes": 0},
        {"retry_attempts": 0},
        {"tail_order": "random"},
        {"no_such_option": 1},
        {"extra_budget": 0.1, "swap_budget": 0.1},
    ):
        with pytest.raises(ValueError):
            ContextPilotMemory(Duck(), **bad)
    config = ContextPilotConfig(extra_budget=0.25, index_dir=None)
    cp = ContextPilotMemory(Duck(), config=config, annotate=False)
    assert cp.cp_config.extra_budget == 0.25 and cp.cp_config.annotate is False
    assert ContextPilotMemory(Duck(), max_users=7).cp_config.max_scopes == 7  # the old keyword name
    assert ContextPilotConfig().model_dump()["commit"] == "explicit"


def test_bounded_requests_and_forget_conversation(mem):
    cp = ContextPilotMemory(mem, max_requests_per_scope=3, capacity_tokens=10_000)
    for q in (Q1, Q2, QB, "family", "adoption"):
        cp.search(q, filters={"user_id": A}, top_k=4)
    assert len(cp.index_for({"user_id": A})) == 3
    cp.commit(cp.search(Q1, filters={"user_id": A}, top_k=4, conversation_id="f"))
    again = cp.search(Q1, filters={"user_id": A}, top_k=4, conversation_id="f")["context_pilot"]
    assert len(again["sent"]) == 4 and len(again["blocks"]) == 4  # over-fetched fresh ones
    assert cp.forget_conversation("f", filters={"user_id": A}) is True
    fresh = cp.search(Q1, filters={"user_id": A}, top_k=4, conversation_id="f")["context_pilot"]
    assert fresh["turn"] == 1 and fresh["sent"] == []


def test_pointers_only_for_sent_memories_within_top_k(mem):
    """Over-fetch reaches past top_k for fresh memories; sent ones it passes on the way get no pointer."""
    cp = ContextPilotMemory(mem)
    for _ in range(2):
        cp.commit(cp.search(Q1, filters={"user_id": A}, top_k=4, conversation_id="pp"))
    third = cp.search(Q1, filters={"user_id": A}, top_k=4, conversation_id="pp")
    info = third["context_pilot"]
    assert len(info["sent"]) == 4 and all(s["rank"] < 4 for s in info["sent"])  # mem0's top 4: pointers
    assert len(info["passed"]) == 4  # ranks 4-7: sent in turn 2
    assert len(third["results"]) == 4 and min(r["rank"] for r in third["results"]) >= 8
    assert info["context"].count("Please refer to") == 4
