"""What the chat prompt pays for: labels, pointers and the order annotation only where they buy something.

Token counts come from the engine's own tokenizer (llama-server ``/tokenize``), on the embedded mem0."""

from __future__ import annotations

import logging
from typing import Any

import httpx

from cp_memory import ContextPilotMemory
from cp_memory.integrations.chat import CHAT_CONFIG, ChatMemory, as_wrapper
from tests.integrations.conftest import ALICE, SYSTEM

F = {"user_id": "alice"}


def _tokens(server: Any, text: str) -> int:
    reply = httpx.post(f"{server.base_url}/tokenize", json={"content": text, "add_special": False}, timeout=30)
    return len(reply.json()["tokens"])


def _mem0_pattern(store: Any, question: str) -> str:
    """mem0's LangGraph guide: the memories as '- memory' lines in the system message, then the question."""
    found = store.search(question, filters=F, top_k=len(ALICE))["results"]
    context = "Relevant information from previous conversations:\n" + "".join(f"- {m['memory']}\n" for m in found)
    return f"{SYSTEM}\n{context}\n{question}"


def test_turn_one_costs_no_more_than_mem0s_pattern(store: Any, server: Any) -> None:
    """Bullet labels are mem0's own ``- memory`` lines (``3. text`` cost a token a line more, ``10 text`` one)."""
    chat = ChatMemory(store, top_k=len(ALICE))  # the append layout: later turns may point at these lines
    question = "Where does Alice live and what does she do?"
    turn = chat.turn(question, filters=F, conversation_id="cost-1")
    ours = _tokens(server, f"{SYSTEM}\n{turn.content}")
    theirs = _tokens(server, _mem0_pattern(store, question))
    assert turn.content.startswith("Context:\n- ") and "priority order" not in turn.content
    assert ours <= theirs, (ours, theirs)
    chat.rollback(turn)


def test_ten_memories_cost_no_more_than_mem0s_pattern_where_numbers_would_cost_more(store: Any, server: Any) -> None:
    """Regression (issue 35): with ``top_k=10`` the numbered label ``10`` is two tokens against mem0's ``-``
    (the Agents SDK's turn 1 cost one token more than mem0's pattern); bullets cost mem0's ``-`` at any
    ``top_k``."""
    facts = [f"Dana visited city number {i} on a trip in 2024." for i in range(1, 13)]
    store.add([{"role": "user", "content": f} for f in facts], user_id="dana", infer=False)
    dana = {"user_id": "dana"}
    question = "Which cities did Dana visit?"
    found = store.search(question, filters=dana, top_k=10)["results"]
    theirs = _tokens(
        server,
        f"{SYSTEM}\nRelevant information from previous conversations:\n"
        + "".join(f"- {m['memory']}\n" for m in found)
        + f"\n{question}",
    )
    bullets = ChatMemory(store, top_k=10).turn(question, filters=dana, conversation_id="cost-10")
    numbered = ChatMemory(
        ContextPilotMemory(store, config=CHAT_CONFIG.model_copy(update={"labels": "number"})), top_k=10
    )
    numbered_turn = numbered.turn(question, filters=dana, conversation_id="cost-10n")
    assert bullets.content.count("\n- ") == 10 and "\n10 " in numbered_turn.content
    ours, before = (_tokens(server, f"{SYSTEM}\n{t.content}") for t in (bullets, numbered_turn))
    assert ours <= theirs and ours == before - 1, (ours, theirs, before)  # "10" was the one token more


def test_pointers_of_a_turn_share_one_line_and_cost_less_than_the_memories(store: Any, server: Any) -> None:
    chat = ChatMemory(store, top_k=3)
    history: list[str] = []
    turns = []
    for q in ("Where does Alice live?", "Where does Alice live and work?"):
        t = chat.turn(q, filters=F, history=history, conversation_id="cost-2")
        chat.commit(t)
        history.append(t.content)
        turns.append(t)
    sent = turns[1].sent
    assert len(sent) >= 2
    notes = [line for line in turns[1].content.splitlines() if line.startswith("Also relevant, shown before:")]
    assert len(notes) == 1 and all(s["annotation"] == notes[0] for s in sent)
    shown = sum(_tokens(server, f"{s['label']} {s['text']}\n") for s in sent)
    assert _tokens(server, notes[0]) < shown


def test_a_plain_memory_gets_the_chat_settings_and_a_wrapper_that_differs_is_warned_about(store: Any, caplog) -> None:
    wrapped = as_wrapper(store)
    assert {k: getattr(wrapped.cp_config, k) for k in ("max_overfetch", "align", "labels")} == {
        "max_overfetch": 0,
        "align": False,
        "labels": "bullet",
    }
    with caplog.at_level(logging.WARNING, logger="cp_memory.integrations.chat"):
        assert as_wrapper(ContextPilotMemory(store, config=CHAT_CONFIG)) is not None
        assert not caplog.records
        as_wrapper(ContextPilotMemory(store))
    assert "max_overfetch=50" in caplog.text and "CHAT_CONFIG" in caplog.text
