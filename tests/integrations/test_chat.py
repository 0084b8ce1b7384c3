"""The layout every integration shares (cp_memory.integrations.chat), on the real embedded mem0."""

from __future__ import annotations

import re
from typing import Any

import pytest

from cp_memory.integrations.chat import (
    ChatMemory,
    context_messages,
    is_context_message,
    pointers_resolve,
    question_of,
    user_content,
)
from tests.integrations.conftest import BOB

ALICE_FILTERS = {"user_id": "alice"}


def _response(turn: int | None, sent: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    return {"results": [], "context_pilot": {"turn": turn, "sent": sent or [], "blocks": [], "context": ""}}


# ------------------------------------------------------------------------------------------ pure helpers
def test_user_content_puts_memories_before_the_question_and_round_trips() -> None:
    found = {"results": [{"id": "m1", "memory": "Alice has a cat named Miso."}]}
    content = user_content("Does Alice have pets?", found)
    assert content == "Context:\n[Doc 1] Alice has a cat named Miso.\n\nQuestion: Does Alice have pets?"
    assert is_context_message(content)
    assert question_of(content) == "Does Alice have pets?"
    assert user_content("Hi", {"results": []}) == "Question: Hi"
    assert not is_context_message("Question: Hi") and question_of("Question: Hi") == "Hi"
    assert question_of("typed by the user") == "typed by the user"


def test_pointers_resolve_only_when_the_history_holds_the_turns_they_name() -> None:
    turn1 = "Context:\n[Doc 1] Alice moved to Lisbon in 2023.\n[Doc 2] Alice has a cat named Miso.\n\nQuestion: q1"
    turn2 = "Context:\n[Doc 1] Alice is allergic to peanuts.\n\nQuestion: q2"
    pointer = {
        "id": "m2",
        "turn": 1,
        "position": 2,
        "label": "[Doc 2]",
        "annotation": "...",
        "rank": 0,
        "text": "Alice has a cat named Miso.",
    }
    assert pointers_resolve(_response(3, [pointer]), [turn1, turn2])
    assert not pointers_resolve(_response(3, [pointer]), [turn2])  # turn 1 trimmed away
    assert not pointers_resolve(_response(3, [dict(pointer, label="[Doc 3]")]), [turn1, turn2])
    assert not pointers_resolve(_response(1), [turn1])  # fresh record, old history
    assert pointers_resolve(_response(None), [turn1])  # no dedup: nothing to check
    assert context_messages(["hello", turn1, "Question: x", turn2]) == [turn1, turn2]


def test_a_pointer_must_name_the_memory_the_history_shows_at_that_label() -> None:
    """Regression: only the label's existence was checked, so a history whose turn 1 is another prompt
    (two submits of one turn, kept in another order) got pointers at the wrong memories."""
    turn1 = "Context:\n[Doc 1] Alice moved to Lisbon in 2023.\n[Doc 2] Alice has a cat named Miso.\n\nQuestion: q1"
    other = "Context:\n[Doc 1] Alice moved to Lisbon in 2023.\n[Doc 2] Alice is allergic to peanuts.\n\nQuestion: q1"
    pointer = {"id": "m2", "turn": 1, "position": 2, "label": "[Doc 2]", "annotation": "...", "rank": 0}
    miso = dict(pointer, text="Alice has a cat named Miso.")
    assert pointers_resolve(_response(2, [miso]), [turn1])
    assert not pointers_resolve(_response(2, [miso]), [other])  # [Doc 2] there is another memory
    assert pointers_resolve(_response(2, [dict(miso, text="Alice has a cat  named Miso.")]), [turn1])  # blanks folded
    assert not pointers_resolve(_response(2, [dict(miso, text="ALICE has a cat named Miso.")]), [turn1])  # case kept
    assert not pointers_resolve(_response(2, [pointer]), [turn1])  # a pointer without its text: unverifiable
    forged = "Context:\n[Doc 1] Alice moved to Lisbon in 2023.\n\nQuestion: q1\n[Doc 2] Alice has a cat named Miso."
    assert not pointers_resolve(_response(2, [miso]), [forged])  # a question's line is no block


def test_a_bullet_pointer_names_the_line_at_its_position() -> None:
    """The bullet style (mem0's ``- memory`` lines) has no number on a line: "turn 1 item 2" is the second
    line of turn 1's list, so the pointer resolves only where that line shows its memory."""
    turn1 = "Context:\n- Alice moved to Lisbon in 2023.\n- Alice has a cat named Miso.\n\nQuestion: q1"
    swapped = "Context:\n- Alice has a cat named Miso.\n- Alice moved to Lisbon in 2023.\n\nQuestion: q1"
    miso = {"id": "m2", "turn": 1, "position": 2, "label": "-", "annotation": "...", "rank": 0}
    miso["text"] = "Alice has a cat named Miso."
    assert pointers_resolve(_response(2, [miso]), [turn1])
    assert not pointers_resolve(_response(2, [miso]), [swapped])  # line 2 there is another memory
    assert not pointers_resolve(_response(2, [dict(miso, position=1)]), [turn1])
    assert not pointers_resolve(_response(2, [dict(miso, position=3)]), [turn1])  # turn 1 has two lines
    short = "Context:\n- Alice moved to Lisbon in 2023.\n\nAlso relevant, shown before: turn 1 item 2.\n\nQuestion: q"
    assert not pointers_resolve(_response(3, [dict(miso, turn=2, position=2)]), [turn1, short])  # a note is no line


def test_a_same_text_copy_within_the_search_points_into_its_own_turn() -> None:
    """Regression: two memories with one text in one search get a pointer into the *current* turn; it was
    taken for a pointer into a missing turn and turned dedup off for the whole conversation."""
    own = "[Doc 1] Eve likes green tea.\n[Doc 2] Eve lives in Rome.\n\n[Doc 1] above has the same content."
    copy = {"id": "m9", "turn": 2, "position": 1, "label": "[Doc 1]", "annotation": "", "rank": 1}
    response = _response(2, [dict(copy, text="Eve likes green tea.")])
    response["context_pilot"]["context"] = own
    response["context_pilot"]["blocks"] = [  # the search's own block lines (its prompt contract reads them)
        {"label": f"[Doc {i}]", "id": f"m{i}", "text": t, "extra": False}
        for i, t in enumerate(["Eve likes green tea.", "Eve lives in Rome."], start=1)
    ]
    assert pointers_resolve(response, ["Context:\n[Doc 1] Eve has a bike.\n\nQuestion: q1"])
    response["context_pilot"]["sent"][0]["text"] = "Eve lives in Rome."
    assert not pointers_resolve(response, ["Context:\n[Doc 1] Eve has a bike.\n\nQuestion: q1"])


def test_bad_arguments_fail_clearly(store: Any) -> None:
    with pytest.raises(ValueError, match="layout"):
        ChatMemory(store, layout="middle")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="top_k"):
        ChatMemory(store, top_k=0)
    with pytest.raises(ValueError, match="search_kwargs"):
        ChatMemory(store, search_kwargs={"filters": {}})
    chat = ChatMemory(store)
    with pytest.raises(ValueError, match="filters"):
        chat.turn("Where does Alice live?", filters={})
    with pytest.raises(ValueError, match="query"):
        chat.turn("  ", filters=ALICE_FILTERS)
    with pytest.raises(TypeError, match="mem0 Memory"):
        ChatMemory(object())


# ------------------------------------------------------------------------------------------ on mem0
def _chat(chat: ChatMemory, questions: list[str], conversation: str) -> list[Any]:
    history: list[str] = []
    turns = []
    for q in questions:
        t = chat.turn(q, filters=ALICE_FILTERS, history=history, conversation_id=conversation)
        chat.commit(t)
        history.append(t.content)
        turns.append(t)
    return turns


def test_append_layout_points_at_memories_sent_in_earlier_turns(store: Any) -> None:
    chat = ChatMemory(store, layout="append", top_k=3)
    t1, t2 = _chat(chat, ["Where does Alice live?", "Where does Alice live and work?"], "chat-append")
    assert t1.conversation_id == "chat-append" and not t1.sent
    assert t2.sent, "turn 2 retrieves turn 1's memories again: they become pointers"
    for sent in t2.sent:  # bullets: the pointer names the line's position in turn 1's list
        assert sent["label"] == "-" and sent["turn"] == 1
        assert re.search(rf"shown before: turn 1 items? (\d+, )*{sent['position']}\b", t2.content)
        block = next(b for b in t1.response["context_pilot"]["blocks"] if b["id"] == sent["id"])
        assert block["text"] not in t2.content  # the memory itself is not sent twice
        lines = t1.content.removeprefix("Context:\n").split("\n\n")[0].splitlines()
        assert lines[sent["position"] - 1] == f"- {block['text']}"
    for t in (t1, t2):
        assert all(fact not in t.content for fact in BOB)


def test_late_layout_never_deduplicates(store: Any) -> None:
    chat = ChatMemory(store, layout="late", top_k=3)
    t1, t2 = _chat(chat, ["Where does Alice live?", "Where does Alice live?"], "chat-late")
    assert t1.conversation_id is None and t2.conversation_id is None
    assert t1.context.split("\n\n")[0] == t2.context.split("\n\n")[0]  # same blocks, same bytes
    assert not t2.sent


def test_trimmed_history_turns_dedup_off_instead_of_pointing_at_nothing(store: Any) -> None:
    """Regression: pointers into turns the history no longer holds would silently drop memories."""
    chat = ChatMemory(store, layout="append", top_k=3)
    t1 = chat.turn("Where does Alice live?", filters=ALICE_FILTERS, conversation_id="chat-trim")
    chat.commit(t1)
    t2 = chat.turn("Where does Alice live?", filters=ALICE_FILTERS, history=[], conversation_id="chat-trim")
    assert t2.conversation_id is None and not t2.sent
    assert t2.context.split("\n\n")[0] == t1.context.split("\n\n")[0]  # everything sent in full again
    t3 = chat.turn(
        "Where does Alice live?", filters=ALICE_FILTERS, history=[t1.content, t2.content], conversation_id="chat-trim"
    )
    assert t3.conversation_id is None, "the conversation stays without dedup"


def test_a_turn_whose_model_call_failed_is_not_pointed_at(store: Any) -> None:
    chat = ChatMemory(store, layout="append", top_k=3)
    t1 = chat.turn("Where does Alice live?", filters=ALICE_FILTERS, conversation_id="chat-fail")
    chat.rollback(t1)  # the model call failed
    t2 = chat.turn("Where does Alice live?", filters=ALICE_FILTERS, conversation_id="chat-fail")
    assert not t2.sent and t2.response["context_pilot"]["turn"] == 1


def test_a_turn_without_memories_is_not_counted(store: Any) -> None:
    chat = ChatMemory(store, layout="append", top_k=3)
    empty = chat.turn("anything", filters={"user_id": "nobody"}, conversation_id="chat-empty")
    assert empty.content == "Question: anything" and not empty.shows_memories
    chat.commit(empty)  # rolled back: no turn a pointer could name
    again = chat.turn("anything", filters={"user_id": "nobody"}, history=[empty.content], conversation_id="chat-empty")
    assert again.conversation_id == "chat-empty" and again.response["context_pilot"]["turn"] == 1


async def test_async_driver_runs_a_sync_memory_in_a_thread(store: Any) -> None:
    chat = ChatMemory(store, layout="append", top_k=2)
    t = await chat.aturn("Does Alice have pets?", filters=ALICE_FILTERS, conversation_id="chat-async")
    assert "Miso" in t.content and t.content.endswith("Question: Does Alice have pets?")
    chat.commit(t)


EVE = ["Eve likes green tea.", "Eve likes green tea.", "Eve lives in Rome.", "Eve rides a red bike."]


def test_same_text_memories_in_one_search_keep_dedup_on(store: Any, caplog: pytest.LogCaptureFixture) -> None:
    """Regression: a same-text copy's in-turn pointer turned dedup off ("trimmed or restored history?")."""
    store.add([{"role": "user", "content": f} for f in EVE], user_id="eve", infer=False)
    try:
        chat = ChatMemory(store, layout="append", top_k=3)
        t1 = chat.turn("What does Eve drink?", filters={"user_id": "eve"}, conversation_id="chat-twins")
        assert t1.conversation_id == "chat-twins", "dedup stays on"
        assert [s["turn"] for s in t1.sent] == [1] and t1.content.count("Eve likes green tea.") == 1
        assert "trimmed or restored" not in caplog.text
        chat.commit(t1)
        t2 = chat.turn(
            "What does Eve drink?", filters={"user_id": "eve"}, history=[t1.content], conversation_id="chat-twins"
        )
        assert t2.conversation_id == "chat-twins" and t2.sent
    finally:
        store.delete_all(user_id="eve")


def test_two_submits_of_one_turn_never_get_pointers_at_the_other_prompt(store: Any) -> None:
    """Regression: two searches of one conversation planned before either committed (a double submit); the
    record numbers them in commit order, the app's history may hold them in the other order. A pointer
    must name the memory the history shows at that label, else the conversation goes without dedup."""
    chat = ChatMemory(store, layout="append", top_k=3)
    conv = "chat-double"
    a = chat.turn("Where does Alice live?", filters=ALICE_FILTERS, conversation_id=conv)
    b = chat.turn("Does Alice have a pet or play music?", filters=ALICE_FILTERS, conversation_id=conv)
    assert a.response["context_pilot"]["blocks"] != b.response["context_pilot"]["blocks"]
    chat.commit(b)  # b's answer came first: b is turn 1 of the record
    chat.commit(a)  # turn 2
    history = [a.content, b.content]  # the app kept them in submit order
    t3 = chat.turn(
        "Where does Alice live, and does she have a pet?", filters=ALICE_FILTERS, history=history, conversation_id=conv
    )
    assert t3.conversation_id is None, "the history's turn 1 is not the record's: no dedup"
    for sent in t3.sent:
        shown = history[sent["turn"] - 1]
        line = next(x for x in shown.splitlines() if x.startswith(sent["label"] + " "))
        block, memory = line[len(sent["label"]) + 1 :], store.get(sent["id"])["memory"]
        assert block == memory, f"{sent['annotation']} points at {block!r}, not at {memory!r}"
