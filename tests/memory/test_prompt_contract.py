"""The prompt contract sends the bytes the library sent before it: representative turns over a real mem0
Memory (a fresh search, an aligned prefix, dedup pointers, order and location annotations, numbered labels,
the fallback, a plain mem0 response) rendered through the public functions, which now read the contract,
and through the pre-contract implementation (kept below as the reference: it read ``context_pilot`` by key
and re-cut the rendered text), compared byte for byte; a response that crossed a process as JSON gives the
same contract."""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from tests.conftest import SPEAKER_A as A
from tests.mem0_fixtures import require_mem0

require_mem0()

from cp_memory.core.prompt import ContextPilotDict, PromptContract, contract_of, prompt_contract  # noqa: E402
from cp_memory.core.render import (  # noqa: E402
    PROMPT_TEMPLATE,
    USER_TEMPLATE,
    build_messages,
    build_prompt,
    context_of,
    render_context,
)
from cp_memory.integrations.chat import CHAT_CONFIG, user_content  # noqa: E402
from cp_memory.memory import ContextPilotMemory  # noqa: E402
from cp_memory.providers import anthropic_request, openai_request  # noqa: E402

pytestmark = pytest.mark.mem0

F = {"user_id": A}
Q1 = "What does Caroline want to do for her career?"
Q2 = "What career is Caroline interested in pursuing?"
Q3 = "Where did Caroline go last summer?"
SYSTEM = "You answer questions about the user. " * 40


# ---------------------------------------------------------------- the pre-contract implementation (reference)
def legacy_context_of(search_result: Any) -> str:
    """cp_memory.core.render.context_of before the contract."""
    if isinstance(search_result, Mapping):
        info = search_result.get("context_pilot")
        if isinstance(info, Mapping):
            context = info.get("context")
            if isinstance(context, str):
                return context
        results = search_result.get("results", [])
    else:
        results = search_result
    return render_context(list(results))


def legacy_user_content(query: str, response: Any) -> str:
    """cp_memory.integrations.chat.user_content before the contract."""
    context = legacy_context_of(response)
    return USER_TEMPLATE.format(context=context, query=query) if context else f"Question: {query}"


def legacy_context_pieces(query: str, response: Any) -> tuple[tuple[str, ...], int, int]:
    """cp_memory.providers.layout.context_pieces before the contract: (pieces, docs, shared)."""
    text = legacy_user_content(query, response)
    info = response.get("context_pilot") if isinstance(response, Mapping) else getattr(response, "context_pilot", None)
    info = info if isinstance(info, Mapping) else None
    blocks = list(info.get("blocks") or ()) if info is not None else []
    context = info.get("context") if info is not None else None
    lines = []
    for b in blocks:
        if not isinstance(b, Mapping) or not isinstance(b.get("label"), str) or not isinstance(b.get("text"), str):
            return (text,), 0, 0
        lines.append(f"{b['label']} {b['text']}")
    section = "\n".join(lines)
    head = "Context:\n"
    if not lines or not isinstance(context, str) or not context.startswith(section):
        return (text,), 0, 0
    if not text.startswith(head + section):
        return (text,), 0, 0
    pieces = [head + lines[0]] + ["\n" + line for line in lines[1:]] + [text[len(head) + len(section) :]]
    if "".join(pieces) != text:
        return (text,), 0, 0
    raw = info.get("prefix_len") if info is not None else 0
    shared = raw if isinstance(raw, int) and not isinstance(raw, bool) and 0 <= raw <= len(lines) else 0
    return tuple(pieces), len(lines), shared


# ---------------------------------------------------------------- representative turns
@pytest.fixture(scope="module")
def turns(mem: Any) -> Iterator[dict[str, tuple[str, Any]]]:
    """name -> (question, response) over the session's real mem0 store."""
    cp = ContextPilotMemory(mem, commit="on_search", annotate=True)  # the contract covers the annotation too
    out: dict[str, tuple[str, Any]] = {}
    out["fresh"] = (Q1, cp.search(Q1, filters=F, top_k=6))
    out["aligned prefix"] = (Q2, cp.search(Q2, filters=F, top_k=6))
    out["aligned again"] = (Q3, cp.search(Q3, filters=F, top_k=8))
    out["dedup turn 1"] = (Q1, cp.search(Q1, filters=F, top_k=5, conversation_id="contract"))
    out["dedup pointers"] = (Q2, cp.search(Q2, filters=F, top_k=5, conversation_id="contract"))
    chat = ContextPilotMemory(mem, config=CHAT_CONFIG, commit="on_search")
    out["numbered turn 1"] = (Q1, chat.search(Q1, filters=F, top_k=5, conversation_id="numbered"))
    out["numbered pointers"] = (Q2, chat.search(Q2, filters=F, top_k=5, conversation_id="numbered"))
    real = mem.search

    def unhashable_first(*args: Any, **kwargs: Any) -> Any:
        found = real(*args, **kwargs)
        return {**found, "results": [{"id": ["x"], "memory": "An odd one."}, *found["results"]]}

    mem.search = unhashable_first  # a result id that cannot be hashed: the wrapper falls back to mem0's order
    try:
        out["fallback"] = (Q1, ContextPilotMemory(mem).search(Q1, filters=F, top_k=4))
    finally:
        del mem.search
    out["plain mem0"] = (Q1, mem.search(Q1, filters=F, top_k=5))
    out["plain mem0 list"] = (Q1, mem.search(Q1, filters=F, top_k=5)["results"])
    out["no memories"] = (Q1, {"results": []})
    yield out


def test_the_turns_cover_what_the_contract_carries(turns: dict[str, tuple[str, Any]]) -> None:
    infos = [r["context_pilot"] for _, r in turns.values() if isinstance(r, Mapping) and "context_pilot" in r]
    assert any(i["prefix_len"] > 0 for i in infos), "an aligned prefix"
    assert any(i["order_annotation"] for i in infos), "an order annotation"
    assert turns["dedup pointers"][1]["context_pilot"]["sent"], "location annotations"
    assert turns["numbered pointers"][1]["context_pilot"]["sent"], "grouped numbered pointers"
    assert turns["fallback"][1]["context_pilot"]["fallback"]


def test_every_prompt_is_the_bytes_the_library_sent_before(turns: dict[str, tuple[str, Any]]) -> None:
    for name, (q, r) in turns.items():
        legacy = legacy_user_content(q, r)
        assert context_of(r) == legacy_context_of(r), name
        assert user_content(q, r) == legacy, name
        context = legacy_context_of(r)
        prompt = PROMPT_TEMPLATE.format(context=context, query=q) if context else f"Question: {q}\nAnswer:"
        assert build_prompt(q, r) == prompt, name
        history = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
        assert build_messages(q, r, system="s", history=history)[-1] == {"role": "user", "content": legacy}, name
        message = prompt_contract(r).user_message(q)
        assert (message.pieces, message.docs, message.shared) == legacy_context_pieces(q, r), name
        assert openai_request(q, r, system="s")["messages"][-1]["content"] == legacy, name


def test_provider_requests_keep_their_blocks_and_breakpoints(turns: dict[str, tuple[str, Any]]) -> None:
    """The Anthropic request sends the legacy pieces as its blocks: the same bytes, the same cut, so the
    same cache_control positions."""
    for name, (q, r) in turns.items():
        pieces, docs, shared = legacy_context_pieces(q, r)
        for layout in ("oneshot", "append", "late"):
            req = anthropic_request(q, r, model="claude-sonnet-4-5", system=SYSTEM, layout=layout, min_tokens=1)
            sent = [b["text"] for b in req.kwargs()["messages"][-1]["content"]]
            assert sent == (list(pieces) if layout == "oneshot" and docs else ["".join(pieces)]), (name, layout)
            if layout == "oneshot" and docs:
                wanted = {("turn", docs)} | ({("aligned", shared)} if 0 < shared < docs else set())
                assert {(b.where, b.block) for b in req.breakpoints if b.where != "stable"} == wanted, name


def test_a_response_from_another_process_gives_the_same_contract(turns: dict[str, tuple[str, Any]]) -> None:
    for name, (q, r) in turns.items():
        if not isinstance(r, Mapping) or "context_pilot" not in r:
            assert contract_of(r) is None and not prompt_contract(r).searched, name
            continue
        assert isinstance(r["context_pilot"], ContextPilotDict), name
        typed = contract_of(r)
        wire = json.loads(json.dumps(r))  # plain JSON: the typed record is gone, rebuilt from the fields
        assert not isinstance(wire["context_pilot"], ContextPilotDict) and wire == r
        assert PromptContract.from_dict(wire["context_pilot"]) == typed, name
        assert prompt_contract(wire).user_message(q) == typed.user_message(q), name
