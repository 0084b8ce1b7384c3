"""The paper's context reuse inside the gateway's traffic, on its worked examples (issue 30, items 1-2).

* an agent reads file A, file B, then A again: the third read goes out as a pointer to the first;
* search results [3, 1, 2], then the same question gets [2, 3, 1]: aligned to the order the session's index
  holds, so the second request repeats the first one's bytes and the engine reuses them;
* a file re-read with its middle changed: pointers to its unchanged chunks plus the new lines;
* every pointer resolves to the right text in the history the model sees (the forwarded request alone).

The flow is driven without a network, as the app does (``Gateway.plan``, then ``commit`` on a 2xx).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from cp_memory.gateway import GatewayConfig, UpstreamKind
from cp_memory.gateway.flow import Gateway
from cp_memory.gateway.protocols import Api

from .content_sessions import numbered_file, pointers_in, resolve, tool_results, tool_session

HEADERS = {"authorization": "Bearer sk-tenant-one"}
APIS = [Api.MESSAGES, Api.CHAT, Api.RESPONSES]
PATHS = {Api.MESSAGES: "/v1/messages", Api.CHAT: "/v1/chat/completions", Api.RESPONSES: "/v1/responses"}


def gateway(kind: UpstreamKind = UpstreamKind.COMPATIBLE, **settings: Any) -> Gateway:
    return Gateway(GatewayConfig(upstream="http://127.0.0.1:1", upstream_kind=kind, **settings), kind)


def drive(gw: Gateway, api: Api, bodies: list[dict[str, Any]], headers: dict[str, str] = HEADERS) -> list[bytes]:
    """Each request through the gateway as the app does (plan, then commit once the upstream said 2xx)."""
    sent = []
    for body in bodies:
        plan = gw.plan(api, headers, json.dumps(body).encode())
        assert not plan.failed_open
        gw.commit(plan)
        sent.append(plan.content)
    return sent


A = numbered_file("a.conf", 40)
B = numbered_file("b.conf", 40)


@pytest.mark.parametrize("api", APIS)
def test_a_file_read_a_second_time_becomes_a_pointer_to_the_first_read(api: Api) -> None:
    """Reads A, B, A: the third result is one location annotation; the first two go out as sent."""
    bodies = tool_session(api, [A, B, A])
    sent = drive(gateway(), api, bodies)
    assert sent[0] == json.dumps(bodies[0]).encode() and pointers_in(sent[1]) == 0
    third = json.loads(sent[2])
    results = tool_results(api, third)
    first_id = results[0][0]
    assert results[2][1] == f"Please refer to the result of tool call {first_id} in the previous conversation."
    assert resolve(api, third)[results[2][0]] == A
    assert len(sent[2]) < len(json.dumps(bodies[2]).encode()) - len(A) + 200


@pytest.mark.parametrize("api", APIS)
def test_a_file_re_read_with_its_middle_changed_becomes_pointers_plus_the_new_lines(api: Api) -> None:
    big = numbered_file("service.yaml", 160)
    edited = numbered_file("service.yaml", 160, changed=range(78, 83))
    bodies = tool_session(api, [big, B, edited])
    sent = json.loads(drive(gateway(), api, bodies)[2])
    rewritten = tool_results(api, sent)[2][1]
    assert "Please refer to lines 1-" in rewritten and "(edited)" in rewritten
    assert len(rewritten) < len(edited) / 3
    assert resolve(api, sent)[tool_results(api, sent)[2][0]] == edited  # every line back, in order


def _search_request(results: list[dict[str, str]]) -> dict[str, Any]:
    """A RAG step: the same question, the search tool's JSON answer (Chat Completions)."""
    call = {"id": "call_s", "type": "function", "function": {"name": "search", "arguments": '{"q": "harbour"}'}}
    return {
        "model": "m",
        "messages": [
            {"role": "system", "content": "Answer from the search results."},
            {"role": "user", "content": "What did the council decide about the harbour?"},
            {"role": "assistant", "content": None, "tool_calls": [call]},
            {"role": "tool", "tool_call_id": "call_s", "content": json.dumps(results, indent=1)},
        ],
    }


DOCS = {
    n: {"title": f"Minutes {n}", "text": f"Minutes of meeting {n}: " + "the harbour budget was discussed. " * 12}
    for n in (1, 2, 3)
}


def test_search_results_in_another_order_are_aligned_to_the_order_the_index_holds() -> None:
    """[3, 1, 2] then [2, 3, 1] (the question asked again, fresher results): the second request is sent in
    the first one's order, byte for byte the same prompt, so an engine reuses all of it; no annotation."""
    gw = gateway()
    headers = {**HEADERS, "x-cp-session": "rag-1"}
    first, second = _search_request([DOCS[3], DOCS[1], DOCS[2]]), _search_request([DOCS[2], DOCS[3], DOCS[1]])
    sent = drive(gw, Api.CHAT, [first, second], headers)
    assert sent[0] == json.dumps(first).encode()
    out = json.loads(sent[1])
    assert json.loads(out["messages"][3]["content"]) == [DOCS[3], DOCS[1], DOCS[2]]
    assert out["messages"][3]["content"] == first["messages"][3]["content"]
    assert "priority order" not in sent[1].decode()


def test_the_order_note_is_a_switch() -> None:
    gw = gateway()
    headers = {**HEADERS, "x-cp-session": "rag-2", "x-cp-content": "order-note"}
    sent = drive(
        gw,
        Api.CHAT,
        [_search_request([DOCS[3], DOCS[1], DOCS[2]]), _search_request([DOCS[2], DOCS[3], DOCS[1]])],
        headers,
    )
    note = json.loads(sent[1])["messages"][3]["content"].rsplit("\n\n", 1)[1]
    # shown: result 1 = doc 3, result 2 = doc 1, result 3 = doc 2; the client ranked doc 2 > doc 3 > doc 1
    ranking = "result 3 > result 1 > result 2"
    assert note == f"Please read the context in the following priority order: {ranking} and answer the question."


def test_documents_sent_before_become_pointers_and_new_ones_stay() -> None:
    """XML documents: a user pastes two documents, then two more of which one is a repeat."""
    doc = lambda n: f"<document>\n{DOCS[n]['text']}\n</document>"  # noqa: E731
    turn1 = [{"role": "user", "content": f"{doc(1)}\n{doc(2)}\nSummarise them."}]
    turn2 = turn1 + [
        {"role": "assistant", "content": "Done."},
        {"role": "user", "content": f"{doc(2)}\n{doc(3)}\nAnd now?"},
    ]
    sent = drive(gateway(), Api.CHAT, [{"model": "m", "messages": turn1}, {"model": "m", "messages": turn2}])
    last = json.loads(sent[1])["messages"][-1]["content"]
    assert last.startswith("<document>Please refer to document 2 in message 1 in the previous conversation.</document>")
    assert DOCS[3]["text"] in last and last.endswith("And now?")
