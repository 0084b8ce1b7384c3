"""AsyncContextPilotMemory over a real mem0 AsyncMemory (embedded Qdrant + bundled MiniLM)."""

from __future__ import annotations

import asyncio
import logging

import pytest

from tests.mem0_fixtures import aingest, observations, require_mem0

require_mem0()

from cp_memory.core.index import ContextIndex
from cp_memory.core.render import build_prompt
from cp_memory.embedded import default_memory
from cp_memory.memory import AsyncContextPilotMemory

pytestmark = pytest.mark.mem0

A, B = "Caroline", "Melanie"
QA = [
    "What does Caroline want to do for her career?",
    "What career is Caroline interested in pursuing?",
    "Caroline's adoption plans",
    "support group",
    "Caroline's family",
]
QB = ["What does Melanie like to paint?", "Melanie's kids", "camping trips", "pottery", "Melanie's husband"]


@pytest.fixture(scope="module")
def amem():
    memory = default_memory(async_=True)
    facts = observations(0, per_speaker=60)

    async def load() -> dict[str, list[str]]:
        return {s: await aingest(memory, s, facts[s]) for s in (A, B)}

    memory.cp_test_ids = asyncio.run(load())  # type: ignore[attr-defined]
    yield memory
    memory.close()


async def test_gather_20_searches(amem):
    cp = AsyncContextPilotMemory(amem)
    ids = amem.cp_test_ids
    jobs = []
    for i in range(20):
        user, qs = (A, QA) if i % 2 == 0 else (B, QB)
        conv = f"conv-{i}"  # turns of one conversation are sequential; concurrent searches are not
        jobs.append((user, cp.search(qs[i // 2 % 5], filters={"user_id": user}, top_k=5, conversation_id=conv)))
    outs = await asyncio.gather(*(job for _, job in jobs))
    for (user, _), out in zip(jobs, outs):
        info = out["context_pilot"]
        assert not info["fallback"] and info["scope"] == f"user_id={user}"
        shown = {r["id"] for r in out["results"]} | set(info["order"])
        assert shown <= set(ids[user])  # never the other user's memories
        assert len(info["blocks"]) == 5
    assert len(cp.index_for({"user_id": A})) == 10 and len(cp.index_for({"user_id": B})) == 10


async def test_same_as_mem0_reordered_and_prefix(amem):
    cp = AsyncContextPilotMemory(amem)
    plain = await amem.search(QA[0], filters={"user_id": A}, top_k=8)
    out = await cp.search(QA[0], filters={"user_id": A}, top_k=8)
    assert sorted(r["id"] for r in out["results"]) == sorted(r["id"] for r in plain["results"])
    assert [plain["results"][r["rank"]]["id"] for r in out["results"]] == [r["id"] for r in out["results"]]
    second = (await cp.search(QA[1], filters={"user_id": A}, top_k=8))["context_pilot"]
    assert second["prefix_len"] > 0
    assert build_prompt(QA[1], {"context_pilot": second}).startswith("Context:\n[Doc 1] ")


async def test_dedup_across_turns(amem):
    cp = AsyncContextPilotMemory(amem)
    r1 = await cp.search(QA[0], filters={"user_id": A}, top_k=5, conversation_id="c")
    with cp.sending(r1):  # the model call would go here; success commits the turn
        await asyncio.sleep(0)
    t1 = r1["context_pilot"]
    t2 = (await cp.search(QA[1], filters={"user_id": A}, top_k=5, conversation_id="c"))["context_pilot"]
    sent = {s["id"] for s in t2["sent"]}
    assert t2["turn"] == 2 and sent
    assert sent <= set(t1["order"]) and not set(t2["order"]) & set(t1["order"])
    other = (await cp.search(QA[1], filters={"user_id": A}, top_k=5, conversation_id="d"))["context_pilot"]
    assert other["sent"] == []


async def test_passthrough_update_delete(amem):
    cp = AsyncContextPilotMemory(amem)
    added = await cp.add("Ava grows tomatoes.", user_id="ava", infer=False)
    mid = added["results"][0]["id"]
    assert (await cp.get(mid))["memory"] == "Ava grows tomatoes."
    first = await cp.search("What does Ava grow?", filters={"user_id": "ava"}, conversation_id="x")
    assert "tomatoes" in first["context_pilot"]["context"]
    cp.commit(first)
    await cp.update(mid, text="Ava grows chillies.")
    second = await cp.search("What does Ava grow?", filters={"user_id": "ava"}, conversation_id="x")
    ctx = second["context_pilot"]["context"]
    assert "chillies" in ctx and "tomatoes" not in ctx
    assert [h["event"] for h in await cp.history(mid)][:2] == ["ADD", "UPDATE"]
    assert len((await cp.get_all(filters={"user_id": "ava"}))["results"]) == 1
    assert cp.config is amem.config  # __getattr__ passthrough
    await cp.delete(mid)
    assert await cp.get(mid) is None
    await cp.delete_all(user_id="ava")


async def test_bad_filters_and_empty(amem):
    cp = AsyncContextPilotMemory(amem)
    with pytest.raises(ValueError) as theirs:
        await amem.search(QA[0], filters={})
    with pytest.raises(ValueError) as ours:
        await cp.search(QA[0], filters={})
    assert str(ours.value) == str(theirs.value)
    out = await cp.search(QA[0], filters={"user_id": "nobody"})
    assert out["results"] == [] and out["context_pilot"]["context"] == ""


async def test_failure_falls_back_and_retry(amem, monkeypatch, caplog):
    cp = AsyncContextPilotMemory(amem, retry_wait_s=0.001)
    real = amem.search
    calls = {"n": 0}

    async def flaky(*a, **k):
        calls["n"] += 1
        if calls["n"] == 1:
            raise TimeoutError("slow vector store")
        return await real(*a, **k)

    monkeypatch.setattr(amem, "search", flaky)

    def boom(self, *a, **k):
        raise RuntimeError("index exploded")

    monkeypatch.setattr(ContextIndex, "insert", boom)
    with caplog.at_level(logging.ERROR, logger="cp_memory.memory"):
        out = await cp.search(QA[0], filters={"user_id": A}, top_k=4)
    assert calls["n"] == 2
    assert out["context_pilot"]["fallback"] is True and len(out["results"]) == 4
    assert any(r.exc_info for r in caplog.records)


async def test_restart_restores_index(amem, tmp_path, monkeypatch):
    monkeypatch.setattr(amem, "close", lambda: None)
    async with AsyncContextPilotMemory(amem, index_dir=tmp_path) as cp:
        first = (await cp.search(QA[0], filters={"user_id": A}, top_k=5))["context_pilot"]
    assert cp.close() is None  # mem0's AsyncMemory.close() is sync, and so is the wrapper's
    cp2 = AsyncContextPilotMemory(amem, index_dir=tmp_path)
    again = (await cp2.search(QA[0], filters={"user_id": A}, top_k=5))["context_pilot"]
    assert again["prefix_len"] == 5 and again["order"] == first["order"]
