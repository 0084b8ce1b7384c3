"""ContextPilotMemory over a real mem0 Memory (embedded Qdrant + bundled MiniLM), LoCoMo observations.

No mem0 mocks: mocks appear only to inject failures.
"""
from __future__ import annotations

import logging
import re
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from tests.mem0_fixtures import ingest, observations, require_mem0

require_mem0()

from cp_memory.embedded import default_memory  # noqa: E402
from cp_memory.index import ContextIndex  # noqa: E402
from cp_memory.memory import ContextPilotMemory, ContextPilotInfo, scope_of  # noqa: E402
from cp_memory.render import build_messages, build_prompt  # noqa: E402

pytestmark = pytest.mark.mem0

A, B = "Caroline", "Melanie"
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


@pytest.fixture(scope="module")
def mem():
    memory = default_memory()
    facts = observations(0, per_speaker=60)
    ids = {speaker: ingest(memory, speaker, facts[speaker]) for speaker in (A, B)}
    memory.cp_test_ids = ids  # type: ignore[attr-defined]
    yield memory
    memory.close()


@pytest.fixture
def cp(mem):
    return ContextPilotMemory(mem)


def ranked(annotation: str, info: dict) -> list[str]:
    """Ids in the order an order annotation ranks them (labels resolved through the rendered blocks)."""
    by_label = {b["label"]: b["id"] for b in info["blocks"]}
    return [by_label[f"[Doc {n}]"] for n in LABEL.findall(annotation.split(":", 1)[1])]


def test_results_are_mem0_results_reordered(mem, cp, monkeypatch):
    plain = mem.search(Q1, filters={"user_id": A}, top_k=10)
    spy = Spy(mem.search)
    monkeypatch.setattr(mem, "search", spy)
    out = cp.search(Q1, filters={"user_id": A}, top_k=10)
    # mem0 was called with the caller's arguments
    assert spy.calls == [((Q1,), {"top_k": 10, "filters": {"user_id": A}})]
    returned = spy.returns[0]["results"]
    assert len(out["results"]) == len(returned) == len(plain["results"]) == 10
    # the very same dict objects, unchanged, only reordered
    assert sorted(map(id, out["results"])) == sorted(map(id, returned))
    # and the same values as a plain mem0 search (scores up to float noise of the CPU embedder)
    strip = lambda rs: {r["id"]: {k: v for k, v in r.items() if k != "score"} for r in rs}  # noqa: E731
    assert strip(out["results"]) == strip(plain["results"])
    plain_scores = {r["id"]: r["score"] for r in plain["results"]}
    assert all(r["score"] == pytest.approx(plain_scores[r["id"]], abs=1e-5) for r in out["results"])
    info = out["context_pilot"]
    assert [returned[i]["id"] for i in info["original_ranks"]] == [r["id"] for r in out["results"]]
    assert info["original_ids"] == [r["id"] for r in returned]
    assert info["fallback"] is False and info["scope"] == f"user_id={A}"
    # rendered blocks follow the results' (aligned) order and carry mem0's text
    assert [b["id"] for b in info["blocks"]] == [r["id"] for r in out["results"]]
    assert [b["text"] for b in info["blocks"]] == [r["memory"] for r in out["results"]]
    assert set(out) == set(plain) | {"context_pilot"}


def test_order_annotation_restores_mem0_ranking(mem, cp):
    cp.search(Q1, filters={"user_id": A}, top_k=8)  # warm the index so the next order can differ
    out = cp.search(QB.replace("Melanie", "Caroline"), filters={"user_id": A}, top_k=8)
    info = out["context_pilot"]
    plain = mem.search(QB.replace("Melanie", "Caroline"), filters={"user_id": A}, top_k=8)
    assert ranked(info["order_annotation"], info) == [r["id"] for r in plain["results"]]
    assert info["context"].endswith(info["order_annotation"])
    assert "priority order" in info["order_annotation"]


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


def test_dedup_across_turns_of_one_conversation(mem, cp):
    t1 = cp.search(Q1, filters={"user_id": A}, top_k=5, conversation_id="c1")
    t2 = cp.search(Q2, filters={"user_id": A}, top_k=5, conversation_id="c1")
    i1, i2 = t1["context_pilot"], t2["context_pilot"]
    assert (i1["turn"], i2["turn"]) == (1, 2)
    assert i1["duplicates"] == []
    assert i2["duplicates"], "the related second question retrieves memories sent in turn 1"
    sent = {b["id"]: b for b in i1["blocks"]}
    for loc in i2["locations"]:
        assert loc["id"] in sent and loc["turn"] == 1
        assert loc["label"] == sent[loc["id"]]["label"]
        assert loc["annotation"] in i2["context"]
        assert sent[loc["id"]]["text"] not in i2["context"]  # replaced, not repeated
    # over-fetch: still top_k fresh memories (mem0 has plenty for this user)
    assert len(i2["blocks"]) == 5
    assert not set(i2["order"]) & set(sent)
    # every returned result is mem0's: fresh ones first (aligned), then those replaced by annotations
    ids = [r["id"] for r in t2["results"]]
    assert ids == i2["order"] + [d for d in ids if d in i2["duplicates"]]
    assert len(ids) == len(set(ids)) == 5 + len(i2["duplicates"])
    # annotations come after the blocks
    ctx = i2["context"]
    assert ctx.index(i2["locations"][0]["annotation"]) > ctx.index(i2["blocks"][-1]["text"])


def test_no_dedup_across_conversations_or_users(cp):
    cp.search(Q1, filters={"user_id": A}, top_k=5, conversation_id="conv-x")
    other_conv = cp.search(Q1, filters={"user_id": A}, top_k=5, conversation_id="conv-y")["context_pilot"]
    assert other_conv["duplicates"] == [] and other_conv["turn"] == 1
    other_user = cp.search(Q1, filters={"user_id": B}, top_k=5, conversation_id="conv-x")["context_pilot"]
    assert other_user["duplicates"] == [] and other_user["turn"] == 1
    no_conv = cp.search(Q1, filters={"user_id": A}, top_k=5)["context_pilot"]
    assert no_conv["conversation_id"] is None and no_conv["duplicates"] == []


def test_dedup_off(mem):
    cp = ContextPilotMemory(mem, dedup=False, annotate=False)
    cp.search(Q1, filters={"user_id": A}, top_k=5, conversation_id="c")
    info = cp.search(Q1, filters={"user_id": A}, top_k=5, conversation_id="c")["context_pilot"]
    assert info["duplicates"] == [] and len(info["blocks"]) == 5
    assert info["order_annotation"] == "" and "priority order" not in info["context"]


def test_users_never_see_each_other(mem):
    ids = mem.cp_test_ids
    cp = ContextPilotMemory(mem, extra_budget=1.0)
    texts = {A: set(observations(0, 60)[A]), B: set(observations(0, 60)[B])}
    for q in (Q1, Q2, "Caroline and Melanie", QB, "painting with the kids"):
        for me, other in ((A, B), (B, A)):
            out = cp.search(q, filters={"user_id": me}, top_k=10, conversation_id="shared-conv")
            info = out["context_pilot"]
            shown = {r["id"] for r in out["results"]} | set(info["order"]) | set(info["duplicates"])
            assert shown <= set(ids[me]), f"{me} got memories of {other}"
            assert not any(t in info["context"] for t in texts[other] if t not in texts[me])
    index_blocks_a = {k[0] for rid in cp.index_for({"user_id": A}).request_ids()
                      for k in cp.index_for({"user_id": A}).order_of(rid)}
    assert index_blocks_a <= set(ids[A])
    assert sorted(cp.users) == [f"user_id={A}", f"user_id={B}"]


def test_superset_extras_are_same_user_and_unranked(mem):
    ids = ingest(mem, "sup", ["Sam owns a red sports car.", "Sam likes apples.", "Sam likes pears.",
                              "Sam likes bananas.", "Sam likes grapes."])
    ingest(mem, "sup-other", ["Olga owns a red sports car.", "Olga likes apples."])
    cp = ContextPilotMemory(mem, extra_budget=0.5)
    f = {"user_id": "sup"}
    first = cp.search("Sam's red car", filters=f, top_k=5, threshold=0.0)["context_pilot"]
    assert first["order"][0] == ids[0]
    out = cp.search("Which fruit does Sam like?", filters=f, top_k=4, threshold=0.0)
    info = out["context_pilot"]
    fruit = {r["id"] for r in out["results"]}
    assert ids[0] not in fruit and fruit <= set(ids)
    # the cached path starts with the car memory: superset alignment adopts it as an extra block
    assert info["extra"] == [ids[0]]
    assert info["order"][0] == ids[0] and info["prefix_len"] >= 2
    assert [b["id"] for b in info["blocks"] if b["extra"]] == [ids[0]]
    assert info["blocks"][0]["text"] == "Sam owns a red sports car."
    assert "Olga" not in info["context"]
    assert len(out["results"]) == 4  # mem0's results only; the extra is context, not a result
    ranking = ranked(info["order_annotation"], info)
    assert ranking == info["original_ids"]  # extras shown, not ranked
    assert "[Doc 1]" not in info["order_annotation"]
    # an extra whose memory was edited since it was cached is re-read and dropped (stale text)
    mem.update(ids[0], text="Sam sold the red car.")
    again = cp.search("Which fruit does Sam like?", filters=f, top_k=4, threshold=0.0)["context_pilot"]
    assert again["extra"] == [] and "sports car" not in again["context"]
    mem.delete_all(user_id="sup")
    mem.delete_all(user_id="sup-other")


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
    # __getattr__: everything else is mem0's own attribute
    assert cp.config is mem.config and cp.vector_store is mem.vector_store
    assert cp.embedding_model is mem.embedding_model and cp.memory is mem
    assert "vector_store" in dir(cp)
    with pytest.raises(AttributeError):
        cp.no_such_attribute  # noqa: B018
    assert cp.delete(mid) == {"message": "Memory deleted successfully!"}
    assert cp.get(mid) is None
    cp.add("Zed also rows.", user_id="zed", infer=False)
    cp.search("rowing", filters={"user_id": "zed"})
    assert "user_id=zed" in cp.users
    cp.delete_all(user_id="zed")
    assert cp.get_all(filters={"user_id": "zed"})["results"] == []
    assert "user_id=zed" not in cp.users  # its index described memories that are gone


def test_update_and_delete_never_leave_stale_text(mem):
    cp = ContextPilotMemory(mem)
    ids = ingest(mem, "upd", ["Uma's favourite colour is green.", "Uma lives in Porto.",
                              "Uma works as a nurse."])
    f = {"user_id": "upd"}
    first = cp.search("What is Uma's favourite colour?", filters=f, top_k=3, conversation_id="u")
    assert "green" in first["context_pilot"]["context"]
    cp.update(ids[0], text="Uma's favourite colour is now purple.")
    second = cp.search("What is Uma's favourite colour?", filters=f, top_k=3, conversation_id="u")
    info = second["context_pilot"]
    assert ids[0] in info["order"] and ids[0] not in info["duplicates"]  # edited: sent again
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


@pytest.mark.parametrize("kwargs", [
    {"filters": {}},
    {"filters": None},
    {"filters": {"category": "x"}},
    {"filters": {"user_id": "   "}},
    {"user_id": A},
    {"filters": {"user_id": A}, "top_k": -1},
])
def test_bad_arguments_raise_mem0s_own_error(mem, cp, kwargs):
    with pytest.raises(Exception) as theirs:
        mem.search(Q1, **kwargs)
    with pytest.raises(type(theirs.value)) as ours:
        cp.search(Q1, **kwargs)
    assert str(ours.value) == str(theirs.value)


def test_empty_store_returns_empty_results(cp):
    out = cp.search(Q1, filters={"user_id": "nobody-here"})
    assert out["results"] == []
    info = out["context_pilot"]
    assert info["blocks"] == [] and info["context"] == "" and info["fallback"] is False
    assert build_prompt(Q1, out) == f"Question: {Q1}\nAnswer:"


def test_restart_with_index_dir_restores_index(mem, tmp_path, monkeypatch):
    monkeypatch.setattr(mem, "close", lambda: None)  # the shared Memory stays open for later tests
    first = ContextPilotMemory(mem, index_dir=tmp_path, snapshot_every=1000)
    a = first.search(Q1, filters={"user_id": A}, top_k=6)["context_pilot"]
    first.search(QB, filters={"user_id": B}, top_k=6)
    before = first.index_for({"user_id": A}).snapshot()
    assert list(tmp_path.glob("*.cpidx")) == []  # cadence not reached yet
    first.close()  # snapshots
    assert len(list(tmp_path.glob("*.cpidx"))) == 2
    second = ContextPilotMemory(mem, index_dir=tmp_path)
    index = second.index_for({"user_id": A})
    assert index.snapshot() == before and len(index) == 1
    again = second.search(Q1, filters={"user_id": A}, top_k=6)["context_pilot"]
    assert again["prefix_len"] == 6 and again["order"] == a["order"]


def test_user_lru_snapshots_evicted_users(mem, tmp_path):
    cp = ContextPilotMemory(mem, index_dir=tmp_path, max_users=1, snapshot_every=1000)
    a = cp.search(Q1, filters={"user_id": A}, top_k=5)["context_pilot"]
    cp.search(QB, filters={"user_id": B}, top_k=5)  # evicts A: snapshotted
    assert cp.users == [f"user_id={B}"]
    again = cp.search(Q1, filters={"user_id": A}, top_k=5)["context_pilot"]
    assert again["prefix_len"] == 5 and again["order"] == a["order"]


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

    monkeypatch.setattr(cp.deduplicator, "dedup", boom)
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


def test_info_dataclass_and_scope():
    assert scope_of({"user_id": " u1 ", "agent_id": "a"}) == "user_id=u1"
    assert scope_of({"agent_id": "a", "run_id": "r"}) == "agent_id=a"
    assert scope_of({"run_id": "r"}) == "run_id=r"
    assert scope_of({}) is None and scope_of(None) is None
    info = ContextPilotInfo(scope=None, conversation_id=None, turn=None, original_ids=(), original_ranks=(),
                            order=(), prefix_len=0, extra=(), request_id=None, duplicates=(), locations=(),
                            order_annotation="", blocks=(), context="", fetched=0)
    with pytest.raises(AttributeError):
        info.scope = "x"  # type: ignore[misc]
    assert info.to_dict()["blocks"] == []


def test_constructor_validates():
    with pytest.raises(TypeError):
        ContextPilotMemory(None)
    with pytest.raises(ValueError):
        ContextPilotMemory(object(), extra_budget=2.0)
    with pytest.raises(ValueError):
        ContextPilotMemory(object(), max_users=0)
    with pytest.raises(ValueError):
        ContextPilotMemory(object(), retry_attempts=0)


def test_bounded_requests_and_forget_conversation(mem):
    cp = ContextPilotMemory(mem, max_requests_per_user=3, capacity_tokens=10_000)
    for q in (Q1, Q2, QB, "family", "adoption"):
        cp.search(q, filters={"user_id": A}, top_k=4)
    assert len(cp.index_for({"user_id": A})) == 3
    cp.search(Q1, filters={"user_id": A}, top_k=4, conversation_id="f")
    again = cp.search(Q1, filters={"user_id": A}, top_k=4, conversation_id="f")["context_pilot"]
    assert len(again["duplicates"]) == 4 and again["blocks"] != []  # over-fetched fresh ones
    assert cp.forget_conversation("f", filters={"user_id": A}) is True
    fresh = cp.search(Q1, filters={"user_id": A}, top_k=4, conversation_id="f")["context_pilot"]
    assert fresh["turn"] == 1 and fresh["duplicates"] == []
