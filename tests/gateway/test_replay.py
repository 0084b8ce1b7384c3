"""Byte stability on recorded sessions of the three protocols: what the gateway sent for a session's earlier
segments goes out again byte for byte, however the client re-renders them, and nothing of the client's is lost.

The flow is driven without a network (``Gateway.plan`` + ``commit``, as the app does for each 2xx answer);
the same recordings go through real engines in test_engines.py.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from cp_memory.gateway import GatewayConfig, UpstreamKind
from cp_memory.gateway.flow import Gateway
from cp_memory.gateway.protocols import Api, segments
from cp_memory.gateway.replay import SegmentMemo, SentLog, digest, normalized, replay, strip_marks
from cp_memory.providers.marks import count_marks, find_marks

from .recordings import anthropic_session, chat_session, responses_session

SESSIONS = {
    Api.MESSAGES: anthropic_session,
    Api.CHAT: chat_session,
    Api.RESPONSES: responses_session,
}
HEADERS = {"authorization": "Bearer sk-client-key"}


def gateway(kind: UpstreamKind = UpstreamKind.COMPATIBLE, **settings: Any) -> Gateway:
    return Gateway(GatewayConfig(upstream="http://127.0.0.1:1", upstream_kind=kind, **settings), kind)


def drive(gw: Gateway, api: Api, bodies: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Each body through the gateway as the app does (plan, then commit on a 2xx): the bodies sent."""
    sent = []
    for body in bodies:
        plan = gw.plan(api, HEADERS, json.dumps(body).encode())
        assert not plan.failed_open
        gw.commit(plan)
        sent.append(json.loads(plan.content))
    return sent


def _prefix_bytes(api: Api, body: dict[str, Any], n: int) -> list[str]:
    return [json.dumps(strip_marks(s)) for s in segments(api, body)[0][:n]]


@pytest.mark.parametrize("api", list(SESSIONS))
def test_a_re_rendering_client_gets_its_earlier_segments_back_byte_for_byte(api: Api) -> None:
    """The invariant: every segment of request n that request n-1 also had goes out with n-1's bytes."""
    bodies = SESSIONS[api](rerender=True)
    sent = drive(gateway(), api, bodies)
    rewritten = 0
    for before, after, client in zip(sent, sent[1:], bodies[1:]):
        n = len(segments(api, before)[0])
        assert _prefix_bytes(api, after, n) == _prefix_bytes(api, before, n)
        rewritten += _prefix_bytes(api, client, n) != _prefix_bytes(api, before, n)
    assert rewritten >= len(bodies) // 3, "the recording re-renders its history"


@pytest.mark.parametrize("api", list(SESSIONS))
def test_a_stable_client_is_forwarded_byte_for_byte(api: Api) -> None:
    """A client that never re-renders gets its own bytes (modulo none: the gateway changes nothing; its content
    rules, which point re-reads of a file to the first read, are off here: test_content.py has them)."""
    gw = gateway(content_steps=frozenset())
    for body in SESSIONS[api](rerender=False):
        raw = json.dumps(body).encode()
        plan = gw.plan(api, HEADERS, raw)
        gw.commit(plan)
        assert plan.content == raw and plan.rewritten == 0


def test_the_clients_current_marks_are_kept_and_none_is_added_past_four() -> None:
    bodies = anthropic_session(rerender=True)
    sent = drive(gateway(UpstreamKind.ANTHROPIC), Api.MESSAGES, bodies)
    for client, out in zip(bodies, sent):
        client_paths = {m.path for m in find_marks(client["tools"], client["system"], client["messages"])}
        out_paths = {m.path for m in find_marks(out["tools"], out["system"], out["messages"])}
        assert client_paths <= out_paths  # never removed (paths hold: no thinking block precedes a mark)
        assert count_marks(out) <= 4


def test_thinking_blocks_stripped_by_the_client_are_sent_as_before() -> None:
    bodies = anthropic_session(rerender=True)
    sent = drive(gateway(), Api.MESSAGES, bodies)
    last_client, last_sent = bodies[-1]["messages"], sent[-1]["messages"]
    count = lambda ms: sum(b.get("type") == "thinking" for m in ms for b in m["content"])  # noqa: E731
    assert count(last_sent) > count(last_client)


def test_normalization_ignores_only_what_does_not_change_the_prompt() -> None:
    a = {"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": "f", "arguments": '{"a": 1, "b": 2}'}}]}
    b = {"tool_calls": [{"function": {"arguments": '{"b":2,"a":1}', "name": "f"}, "id": "c"}], "role": "assistant"}
    assert digest(Api.CHAT, a) == digest(Api.CHAT, b)
    changed = json.loads(json.dumps(b))
    changed["tool_calls"][0]["function"]["arguments"] = '{"b":3,"a":1}'
    assert digest(Api.CHAT, a) != digest(Api.CHAT, changed)
    assert normalized(Api.MESSAGES, {"role": "user", "content": "hi"}) == normalized(
        Api.MESSAGES,
        {"role": "user", "content": [{"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}]},
    )
    assert digest(Api.MESSAGES, {"role": "user", "content": "hi"}) != digest(
        Api.MESSAGES, {"role": "user", "content": "hi "}
    )


def test_replay_stops_at_the_first_segment_that_differs_in_meaning() -> None:
    log = SentLog.of(Api.CHAT, [None, {"role": "system", "content": "S"}, {"role": "user", "content": "A"}])
    new = [None, {"content": "S", "role": "system"}, {"role": "user", "content": "B"}, {"role": "user", "content": "C"}]
    result = replay(Api.CHAT, log, new)
    assert result.replayed == 2 and result.rewritten == 1 and result.first_rewritten == 1
    assert result.segments[1] == {"role": "system", "content": "S"} and result.segments[2:] == new[2:]


def test_two_tenants_with_the_same_opening_never_share_a_session() -> None:
    gw = gateway()
    body = chat_session(rerender=False)[0]
    one = gw.plan(Api.CHAT, {"authorization": "Bearer key-one"}, json.dumps(body).encode())
    two = gw.plan(Api.CHAT, {"authorization": "Bearer key-two"}, json.dumps(body).encode())
    same_key_other_tenant = gw.plan(
        Api.CHAT, {"authorization": "Bearer key-one", "x-cp-tenant": "b"}, json.dumps(body).encode()
    )
    assert one.identity and two.identity and same_key_other_tenant.identity
    assert len({one.identity.tenant, two.identity.tenant, same_key_other_tenant.identity.tenant}) == 3
    assert one.identity.session != two.identity.session
    assert "key-one" not in repr(one) and "key-one" not in one.identity.tenant


def test_chat_conversations_with_one_system_message_and_other_openings_are_two_sessions() -> None:
    """OpenClaw sends no session id and its system prompt as a ``system`` message: two of its conversations
    differ from their first user message on, and must not share one session (one sent log, one content
    state)."""
    gw = gateway()
    system = {"role": "system", "content": "You are a personal assistant running inside OpenClaw."}
    first = {"model": "m", "messages": [system, {"role": "user", "content": "[Sun 13:16 UTC] read contract A"}]}
    second = {"model": "m", "messages": [system, {"role": "user", "content": "[Sun 13:17 UTC] read contract B"}]}
    one = gw.plan(Api.CHAT, HEADERS, json.dumps(first).encode())
    two = gw.plan(Api.CHAT, HEADERS, json.dumps(second).encode())
    again = gw.plan(Api.CHAT, HEADERS, json.dumps({**first, "messages": [*first["messages"], system]}).encode())
    assert one.identity and two.identity and again.identity
    assert one.identity.session_source == "fingerprint"
    assert one.identity.session != two.identity.session and again.identity.session == one.identity.session


@pytest.mark.parametrize("api", list(SESSIONS))
def test_the_segment_memo_gives_what_the_work_gives_and_shares_no_object(api: Api) -> None:
    """Replay's per-segment work remembered by exact bytes (min_chars=0: every segment goes through the memo):
    each request of a re-rendering session replays to the same segments, digests and counts as without it,
    on its first sight and on every hit, and a hit is a fresh copy or the request's own segment (where its bytes
    are the log's and it has no mark: what passthrough would forward), never a copy shared between requests."""
    memo, bodies = SegmentMemo(min_chars=0), SESSIONS[api](rerender=True)
    log = None
    for body in bodies:
        segs = segments(api, body)[0]
        plain_digests = tuple(digest(api, s) for s in segs)
        texts = memo.texts(segs)
        assert memo.digests(api, segs) == plain_digests == memo.digests(api, segs, texts)
        plain = replay(api, log, segs, plain_digests)
        for given in (None, texts):  # a miss, then a hit (with and without the texts)
            memoed = replay(api, log, segs, plain_digests, memo, given)
            assert json.dumps(memoed.segments) == json.dumps(plain.segments)
            assert (memoed.replayed, memoed.rewritten, memoed.first_rewritten, memoed.substituted) == (
                plain.replayed,
                plain.rewritten,
                plain.first_rewritten,
                plain.substituted,
            )
        again = replay(api, log, segs, plain_digests, memo)
        for a, b, own in zip(again.segments[: again.replayed], memoed.segments, segs):
            # the request's own segment (its bytes were the log's, no mark to carry), else a fresh copy
            assert a is own or a is not b or not isinstance(a, (dict, list))
        log = SentLog(tuple(plain.segments), plain_digests)


def test_the_segment_memo_keys_on_bytes_not_on_meaning() -> None:
    """Two segments equal in meaning but not in bytes never share an entry: keys in another order (one digest,
    so a memo keyed on meaning would send the first one's bytes for the second), and ``1`` against ``true``
    (equal in Python)."""
    memo = SegmentMemo(min_chars=0)
    a = {"role": "user", "content": "x", "n": 1}
    b = {"content": "x", "role": "user", "n": 1}
    assert digest(Api.CHAT, a) == digest(Api.CHAT, b) and a == {**a, "n": True}
    for seg in (a, b, {**a, "n": True}):
        out = replay(Api.CHAT, SentLog.of(Api.CHAT, [seg]), [seg], memo=memo, texts=memo.texts([seg]))
        assert json.dumps(out.segments) == json.dumps([seg])
