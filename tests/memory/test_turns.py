"""A failed turn never poisons dedup: turns are planned by search, committed once sent.

The paper's multi-turn dedup replaces memories sent in earlier turns by pointers. If a turn counted as
sent before its prompt reached the model, a retry after a failed model call would send only pointers to
memories the model never saw. Here the "model call" is a function that fails on purpose.
"""

from __future__ import annotations

import pytest

from tests.conftest import SPEAKER_A as A
from tests.mem0_fixtures import require_mem0

require_mem0()

from cp_memory.memory import ContextPilotMemory  # noqa: E402

pytestmark = pytest.mark.mem0

Q = "What does Caroline want to do for her career?"
F = {"user_id": A}


class ModelDown(RuntimeError):
    pass


def call_model(prompt: str) -> str:
    raise ModelDown("engine unavailable")


def test_a_failed_send_rolls_back_and_the_retry_sends_the_memories_again(mem):
    cp = ContextPilotMemory(mem)
    first = cp.search(Q, filters=F, top_k=4, conversation_id="retry")
    with pytest.raises(ModelDown), cp.sending(first):
        call_model(first["context_pilot"]["context"])
    retry = cp.search(Q, filters=F, top_k=4, conversation_id="retry")
    info = retry["context_pilot"]
    assert info["turn"] == 1 and info["sent"] == []  # nothing counts as sent
    assert [b["text"] for b in info["blocks"]] == [b["text"] for b in first["context_pilot"]["blocks"]]
    with cp.sending(retry):
        pass  # this time the model answered
    third = cp.search(Q, filters=F, top_k=4, conversation_id="retry")["context_pilot"]
    assert third["turn"] == 2 and len(third["sent"]) == 4


def test_an_uncommitted_turn_is_not_registered(mem):
    cp = ContextPilotMemory(mem)
    cp.search(Q, filters=F, top_k=4, conversation_id="never-sent")  # caller never sent it
    again = cp.search(Q, filters=F, top_k=4, conversation_id="never-sent")["context_pilot"]
    assert again["turn"] == 1 and again["sent"] == []


def test_commit_and_rollback_are_checked(mem):
    cp = ContextPilotMemory(mem)
    out = cp.search(Q, filters=F, top_k=3, conversation_id="checks")
    assert cp.commit(out) == 1
    with pytest.raises(ValueError, match="already committed"):
        cp.commit(out)
    rolled = cp.search(Q, filters=F, top_k=3, conversation_id="checks-2")
    cp.rollback(rolled)
    cp.rollback(rolled)  # idempotent
    with pytest.raises(ValueError):
        cp.commit(rolled)
    with pytest.raises(TypeError, match="search response"):
        cp.commit({"results": []})
    assert cp.commit({"context_pilot": {"turn_id": None}}) is None  # a search without a conversation


def test_rollback_takes_the_request_out_of_the_scopes_index(mem):
    cp = ContextPilotMemory(mem)
    index = cp.index_for(F)
    before = len(index)
    out = cp.search(Q, filters=F, top_k=3, conversation_id="idx")
    assert len(index) == before + 1
    cp.rollback(out)
    assert len(index) == before and out["context_pilot"]["request_id"] not in index


def test_turns_commit_in_the_order_they_were_sent(mem):
    cp = ContextPilotMemory(mem)
    a = cp.search(Q, filters=F, top_k=3, conversation_id="order")
    b = cp.search("Caroline's family", filters=F, top_k=3, conversation_id="order")
    assert a["context_pilot"]["turn"] == b["context_pilot"]["turn"] == 1  # both planned on turn 0
    assert cp.commit(b) == 1 and cp.commit(a) == 2  # renumbered at commit
    nxt = cp.search(Q, filters=F, top_k=3, conversation_id="order")["context_pilot"]
    sent = {s["id"] for s in nxt["sent"]}
    assert nxt["turn"] == 3 and set(a["context_pilot"]["order"]) <= sent
    assert sent <= set(a["context_pilot"]["order"]) | set(b["context_pilot"]["order"])


def test_pending_turns_are_bounded(mem):
    cp = ContextPilotMemory(mem, max_pending_turns=2)
    outs = [cp.search(Q, filters=F, top_k=2, conversation_id=f"p{i}") for i in range(3)]
    with pytest.raises(ValueError, match="expired"):
        cp.commit(outs[0])
    assert cp.commit(outs[2]) == 1
