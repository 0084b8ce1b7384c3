"""The content rules' invariants (issue 30 item 2): only the new part changes; the rewritten text comes back
byte for byte on later turns (through prefix replay's sent log); the output is the same protocol's JSON; a
failing stage falls back to replay + rules; nothing crosses tenants; every switch switches.
"""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest

from cp_memory.gateway import UpstreamKind
from cp_memory.gateway.content import ContentStep
from cp_memory.gateway.protocols import Api, segments
from cp_memory.gateway.replay import strip_marks

from .content_sessions import numbered_file, pointers_in, resolve, tool_results, tool_session
from .test_content import APIS, HEADERS, A, B, drive, gateway

C = numbered_file("c.conf", 40)


def _segs(api: Api, raw: bytes) -> list[str]:
    return [json.dumps(strip_marks(s)) for s in segments(api, json.loads(raw))[0]]


@pytest.mark.parametrize("api", APIS)
def test_a_rewritten_result_is_sent_rewritten_again_on_every_later_turn(api: Api) -> None:
    """Turn 3 turned the second read of A into a pointer; turns 4 and 5 (whose client history holds A again)
    forward that same pointer: each request starts with the bytes of the one before (marks aside)."""
    bodies = tool_session(api, [A, B, A, C, B, C])
    gw = gateway()
    sent, replayed, rewritten = [], [], 0
    for body in bodies:  # as the app does: plan, then commit on a 2xx
        plan = gw.plan(api, HEADERS, json.dumps(body).encode())
        gw.commit(plan)
        sent.append(plan.content)
        replayed.append(plan.replayed)
        rewritten += plan.rewritten
    assert rewritten == 0  # the gateway's own rewrites are not counted as the client's re-renderings
    # replay never stops early: every segment of the request before (rewritten ones included) is replayed
    assert replayed[1:] == [len(segments(api, b)[0]) for b in bodies[:-1]]
    for before, after in zip(sent, sent[1:]):
        n = len(_segs(api, before))
        assert _segs(api, after)[:n] == _segs(api, before)
    last = json.loads(sent[-1])
    texts = [t for _, t in tool_results(api, last)]
    assert texts[2].startswith("Please refer to") and texts[3] == C and texts[4].startswith("Please refer to")
    assert list(resolve(api, last).values()) == [A, B, A, C, B, C]
    state = gw.store.session(*_ids(gw, api, bodies[-1]))
    assert state.logs[api].segments == tuple(segments(api, last)[0])


def _ids(gw: Any, api: Api, body: dict[str, Any]) -> tuple[str, str]:
    ident = gw.identify(api, HEADERS, body)
    return ident.tenant, ident.session


def test_a_client_mark_on_an_earlier_message_protects_everything_up_to_it() -> None:
    """Anthropic: a mark on an earlier message reads a prefix the upstream may hold: nothing up to it changes,
    even a repeat the gateway would otherwise point to; after it, the rules apply."""
    body = tool_session(Api.MESSAGES, [A, B, A, C, A])[4]
    body["messages"][6]["content"][0]["cache_control"] = {"type": "ephemeral"}  # the 3rd result (A again)
    gw = gateway()
    drive(gw, Api.MESSAGES, tool_session(Api.MESSAGES, [A, B]))
    out = json.loads(drive(gw, Api.MESSAGES, [body])[0])
    texts = [t for _, t in tool_results(Api.MESSAGES, out)]
    assert texts[:4] == [A, B, A, C] and texts[4].startswith("Please refer to the result of tool call toolu_00")


def test_a_session_the_gateway_does_not_know_changes_only_in_its_newest_message() -> None:
    """No sent log (a first request, or a forgotten session): the upstream may hold the history from before,
    so only the newest message may change (here: a same-request repeat of A)."""
    body = tool_session(Api.CHAT, [A, B, A, A])[3]
    out = json.loads(drive(gateway(), Api.CHAT, [body])[0])
    texts = [t for _, t in tool_results(Api.CHAT, out)]
    assert texts[:3] == [A, B, A] and texts[3] == "the result of tool call call_00 above has the same content."


def _shape(value: Any) -> Any:
    """The JSON's structure with every string replaced by its type: what must never change."""
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_shape(v) for v in value]
    return type(value).__name__


@pytest.mark.parametrize("api", APIS)
def test_the_output_is_the_same_protocols_json_with_only_texts_changed(api: Api) -> None:
    bodies = tool_session(api, [A, B, numbered_file("a.conf", 40, changed=range(20, 22)), A])
    for client, raw in zip(bodies, drive(gateway(), api, bodies)):
        out = json.loads(raw)
        assert _shape(out) == _shape(client) and out["model"] == client["model"]


def test_a_failing_content_stage_sends_what_replay_and_rules_would_and_logs_it(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    bodies = tool_session(Api.MESSAGES, [A, B, A])
    expected = drive(gateway(content_steps=frozenset()), Api.MESSAGES, bodies)

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("injected failure")

    monkeypatch.setattr("cp_memory.gateway.flow.run_content", broken)
    with caplog.at_level(logging.ERROR, logger="cp_memory.gateway.flow"):
        assert drive(gateway(), Api.MESSAGES, bodies) == expected
    assert "the content stage failed" in caplog.text and pointers_in(expected[2]) == 0


def test_two_tenants_with_the_same_opening_never_see_each_others_blocks_or_pointers() -> None:
    """Tenant one reads A, B, A; tenant two (same system prompt, question, call ids and session header) reads
    C, A, C in between: each is pointed only to its own history, and tenant two's first A goes out whole."""
    one = {"authorization": "Bearer sk-one", "x-cp-session": "s"}
    two = {"authorization": "Bearer sk-two", "x-cp-session": "s"}
    gw = gateway(UpstreamKind.VLLM)
    sent_one, sent_two = [], []
    for a, b in zip(tool_session(Api.CHAT, [A, B, A]), tool_session(Api.CHAT, [C, A, C])):
        sent_one += drive(gw, Api.CHAT, [a], one)
        sent_two += drive(gw, Api.CHAT, [b], two)
    texts_two = [t for _, t in tool_results(Api.CHAT, json.loads(sent_two[-1]))]
    assert texts_two[:2] == [C, A] and texts_two[2].startswith("Please refer to the result of tool call call_00")
    assert all(B.encode() not in raw for raw in sent_two) and all(C.encode() not in raw for raw in sent_one)
    assert list(resolve(Api.CHAT, json.loads(sent_two[-1])).values()) == [C, A, C]
    assert list(resolve(Api.CHAT, json.loads(sent_one[-1])).values()) == [A, B, A]
    salts = {json.loads(r)["cache_salt"] for r in sent_one} | {json.loads(r)["cache_salt"] for r in sent_two}
    assert len(salts) == 2


@pytest.mark.parametrize(
    ("header", "pointers"),
    [("off", 0), ("no-dedup", 0), ("no-find", 0), ("no-align,no-chunks", 1), ("on", 1), ("bogus", 0)],
)
def test_the_content_header_switches_steps_off_per_request(header: str, pointers: int) -> None:
    bodies = tool_session(Api.CHAT, [A, B, A])
    sent = drive(gateway(), Api.CHAT, bodies, {**HEADERS, "x-cp-content": header})
    assert pointers_in(sent[2]) == pointers
    if pointers == 0:
        assert sent == [json.dumps(b).encode() for b in bodies]


def test_chunks_can_be_switched_off_alone() -> None:
    edited = numbered_file("a.conf", 120, changed=range(50, 52))
    bodies = tool_session(Api.CHAT, [numbered_file("a.conf", 120), B, edited])
    on = tool_results(Api.CHAT, json.loads(drive(gateway(), Api.CHAT, bodies)[2]))[2][1]
    off = drive(gateway(), Api.CHAT, bodies, {**HEADERS, "x-cp-content": "no-chunks"})[2]
    assert "Please refer to lines" in on and pointers_in(off) == 0


def test_a_tenant_can_be_configured_without_content_rules() -> None:
    bodies = tool_session(Api.CHAT, [A, B, A])
    probe = gateway()
    tenant = probe.identify(Api.CHAT, HEADERS, bodies[0]).tenant
    secret = probe.secret.hex()
    gw = gateway(secret=secret, content_tenants={tenant: frozenset({ContentStep.FIND, ContentStep.ALIGN})})
    gw.secret = probe.secret
    assert pointers_in(drive(gw, Api.CHAT, bodies)[2]) == 0
    other = {"authorization": "Bearer sk-another-tenant"}
    assert pointers_in(drive(gw, Api.CHAT, bodies, other)[2]) == 1


def test_without_prefix_replay_the_content_rules_stay_off() -> None:
    """A rewrite must come back identical next turn, which only replay's sent log guarantees."""
    bodies = tool_session(Api.CHAT, [A, B, A])
    assert drive(gateway(replay=False), Api.CHAT, bodies) == [json.dumps(b).encode() for b in bodies]
