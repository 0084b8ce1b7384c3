"""Bad input and bad upstreams: a clear error or a clean passthrough, never a hang, never another tenant's data.

The upstream here is ``tests.loopback``'s scripted server (failure injection only: stalls, garbage, trickles);
the real engines are in test_engines.py.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from pydantic import ValidationError

from cp_memory.gateway import GatewayConfig
from tests.loopback import FakeRequest, loopback_engine, sse

from .conftest import running_gateway

CHAT = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
OK_CHAT = {
    "id": "c",
    "object": "chat.completion",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 7, "completion_tokens": 1, "prompt_tokens_details": {"cached_tokens": 4}},
}


def ok(req: FakeRequest) -> tuple[int, dict[str, str], bytes]:
    return 200, {"content-type": "application/json"}, json.dumps(OK_CHAT).encode()


@pytest.fixture()
def upstream() -> Iterator[Any]:
    with loopback_engine(ok) as engine:
        yield engine


def test_malformed_json_and_wrong_types_are_forwarded_as_sent(upstream: Any) -> None:
    upstream.responder = lambda req: (400, {"content-type": "application/json"}, b'{"error": {"message": "bad json"}}')
    with running_gateway(upstream.url) as gw:
        for raw in (b'{"model": "m", "messages": [', b'["a list"]', b'{"messages": "not a list"}', b"\xff\xfe"):
            answer = httpx.post(
                gw.url + "/v1/chat/completions", content=raw, headers={"content-type": "application/json"}
            )
            assert answer.status_code == 400 and answer.json()["error"]["message"] == "bad json"  # the upstream's own
        fail_open = gw.app.state.metrics.fail_open._value.get()
    # the upstream got each body as the client sent it (the scripted server parses JSON where it can)
    assert [r.body for r in upstream.requests] == [
        b'{"model": "m", "messages": [',
        ["a list"],
        {"messages": "not a list"},
        b"\xff\xfe",
    ]
    assert fail_open == 1  # the wrong type was an internal failure of the plan: the request went out unchanged


def test_a_huge_body_is_refused_with_413_declared_or_chunked(upstream: Any) -> None:
    with running_gateway(upstream.url, max_body_bytes=4096) as gw:
        big = json.dumps({**CHAT, "pad": "x" * 10_000}).encode()
        assert httpx.post(gw.url + "/v1/chat/completions", content=big).status_code == 413

        def chunks() -> Iterator[bytes]:
            for _ in range(20):
                yield b"x" * 1024

        answer = httpx.post(gw.url + "/v1/chat/completions", content=chunks())
        assert answer.status_code == 413 and "4096" in answer.json()["error"]["message"]
    assert upstream.requests == []  # nothing reached the upstream


def test_an_upstream_that_stalls_is_a_504_not_a_hang(upstream: Any) -> None:
    def stall(req: FakeRequest) -> tuple[int, dict[str, str], Any]:
        upstream.closing.wait(10)
        return ok(req)

    upstream.responder = stall
    with running_gateway(upstream.url, read_timeout_s=1.0) as gw:
        started = time.monotonic()
        answer = httpx.post(gw.url + "/v1/chat/completions", json=CHAT, timeout=30)
        assert answer.status_code == 504 and answer.json()["error"]["type"] == "upstream_timeout"
        assert time.monotonic() - started < 10


def test_an_unreachable_upstream_is_a_502() -> None:
    with running_gateway("http://127.0.0.1:9") as gw:
        answer = httpx.post(gw.url + "/v1/chat/completions", json=CHAT)
    assert answer.status_code == 502 and answer.json()["error"]["type"] == "upstream_unreachable"


def test_garbage_from_the_upstream_passes_through_unchanged(upstream: Any) -> None:
    upstream.responder = lambda req: (200, {"content-type": "text/html"}, b"<html>not json</html>")
    with running_gateway(upstream.url) as gw:
        answer = httpx.post(gw.url + "/v1/chat/completions", json=CHAT)
        assert answer.status_code == 200 and answer.content == b"<html>not json</html>"
        assert answer.headers["x-cp-input-tokens"] == "0"
        upstream.responder = lambda req: (
            200,
            {"content-type": "text/event-stream"},
            b"data: {broken\n\nnot sse at all",
        )
        streamed = httpx.post(gw.url + "/v1/chat/completions", json={**CHAT, "stream": True})
        assert streamed.content == b"data: {broken\n\nnot sse at all"


def test_upstream_errors_reach_the_client_with_status_and_body(upstream: Any) -> None:
    upstream.responder = lambda req: (
        429,
        {"content-type": "application/json", "retry-after": "3"},
        b'{"error":"slow down"}',
    )
    with running_gateway(upstream.url) as gw:
        answer = httpx.post(gw.url + "/v1/messages", json={"model": "c", "max_tokens": 1, "messages": []})
    assert (
        answer.status_code == 429
        and answer.content == b'{"error":"slow down"}'
        and answer.headers["retry-after"] == "3"
    )


def test_a_client_that_leaves_mid_stream_closes_the_upstream_stream(upstream: Any) -> None:
    chunk = sse({"choices": [{"index": 0, "delta": {"content": "word "}}]}, done=False)

    def trickle(req: FakeRequest) -> tuple[int, dict[str, str], Any]:
        def body() -> Iterator[bytes]:
            for _ in range(400):
                yield chunk
                time.sleep(0.02)

        return 200, {"content-type": "text/event-stream"}, body()

    upstream.responder = trickle
    with running_gateway(upstream.url) as gw:
        with httpx.stream("POST", gw.url + "/v1/chat/completions", json={**CHAT, "stream": True}) as answer:
            first = next(answer.iter_raw())
            assert first.startswith(b"data: ")
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not upstream.requests[0].complete:
            sent = upstream.requests[0].sent
            time.sleep(0.5)
            if upstream.requests[0].sent == sent:
                break  # the upstream stopped being read: its stream was closed
        assert not upstream.requests[0].complete
        assert httpx.post(gw.url + "/v1/chat/completions", json=CHAT).status_code == 200  # still serving


def test_the_gateway_key_is_required_when_set_and_never_forwarded(upstream: Any) -> None:
    with running_gateway(upstream.url, gateway_key="gw-secret-123") as gw:
        assert httpx.post(gw.url + "/v1/chat/completions", json=CHAT).status_code == 401
        assert httpx.get(gw.url + "/metrics").status_code == 401
        headers = {"x-cp-gateway-key": "gw-secret-123", "authorization": "Bearer sk-client"}
        assert httpx.post(gw.url + "/v1/chat/completions", json=CHAT, headers=headers).status_code == 200
    forwarded = {k.lower(): v for k, v in upstream.requests[-1].headers.items()}
    assert forwarded["authorization"] == "Bearer sk-client" and "x-cp-gateway-key" not in forwarded


def test_other_paths_and_queries_and_headers_pass_through_untouched(upstream: Any) -> None:
    upstream.responder = lambda req: (
        200,
        {"content-type": "application/json"},
        b'{"data": [{"id": "m", "owned_by": "x"}]}',
    )
    with running_gateway(upstream.url) as gw:
        models = httpx.get(gw.url + "/v1/models", headers={"x-api-key": "k"})
        assert models.json()["data"][0]["id"] == "m"
        body = {"model": "c", "max_tokens": 1, "messages": [{"role": "user", "content": "hi"}]}
        raw = json.dumps(body, indent=2).encode()
        httpx.post(gw.url + "/v1/messages?beta=true", content=raw, headers={"anthropic-beta": "context-1m-2025-08-07"})
    seen = upstream.requests[-1]
    assert seen.path == "/v1/messages?beta=true" and seen.headers.get("anthropic-beta") == "context-1m-2025-08-07"
    assert seen.body == body and upstream.requests[0].method == "GET" and upstream.requests[0].path == "/v1/models"


def test_a_base_path_percent_encoding_and_the_answers_headers_cross_as_written(upstream: Any) -> None:
    upstream.responder = lambda req: (200, {"content-type": "application/json", "x-request-id": "r1"}, b"{}")
    with running_gateway(upstream.url + "/base/") as gw:
        answer = httpx.get(gw.url + "/v1/files/a%20b%2Fc?name=x%2Fy&q=1+2", headers={"x-api-key": "k"})
    assert answer.status_code == 200 and answer.headers["x-request-id"] == "r1" and answer.content == b"{}"
    assert upstream.requests[-1].path == "/base/v1/files/a%20b%2Fc?name=x%2Fy&q=1+2"
    assert upstream.requests[-1].headers.get("x-api-key") == "k"


def test_two_tenants_with_identical_openings_see_only_their_own_savings(upstream: Any) -> None:
    with running_gateway(upstream.url) as gw:
        a = httpx.post(gw.url + "/v1/chat/completions", json=CHAT, headers={"authorization": "Bearer sk-alice"})
        b = httpx.post(gw.url + "/v1/chat/completions", json=CHAT, headers={"authorization": "Bearer sk-bob"})
        httpx.post(gw.url + "/v1/chat/completions", json=CHAT, headers={"authorization": "Bearer sk-bob"})
        alice = httpx.get(gw.url + "/cp/savings", headers={"authorization": "Bearer sk-alice"}).json()
        bob = httpx.get(gw.url + "/cp/savings", headers={"authorization": "Bearer sk-bob"}).json()
        nobody = httpx.get(gw.url + "/cp/savings").json()
        metrics = httpx.get(gw.url + "/metrics").text
    assert a.headers["x-cp-session"] != b.headers["x-cp-session"]
    assert alice["totals"]["calls"] == 1 and bob["totals"]["calls"] == 2 and nobody["totals"] is None
    assert [s["session"] for s in alice["sessions"]] == [a.headers["x-cp-session"]]
    assert alice["tenant"] != bob["tenant"]
    for secret in ("sk-alice", "sk-bob", alice["tenant"], bob["tenant"], a.headers["x-cp-session"]):
        assert secret not in metrics


def test_concurrent_requests_of_many_tenants_stay_apart(upstream: Any) -> None:
    with running_gateway(upstream.url) as gw:
        errors: list[BaseException] = []

        def user(i: int) -> None:
            try:
                for _ in range(3):
                    httpx.post(gw.url + "/v1/chat/completions", json=CHAT, headers={"authorization": f"Bearer sk-{i}"})
            except BaseException as exc:  # noqa: BLE001 (reported below)
                errors.append(exc)

        threads = [threading.Thread(target=user, args=(i,)) for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        totals = [
            httpx.get(gw.url + "/cp/savings", headers={"authorization": f"Bearer sk-{i}"}).json()["totals"]
            for i in range(8)
        ]
    assert (
        errors == [] and [t["calls"] for t in totals] == [3] * 8 and all(t["cache_read_tokens"] == 12 for t in totals)
    )


def test_a_non_loopback_bind_needs_an_explicit_flag() -> None:
    with pytest.raises(ValidationError, match="allow_remote"):
        GatewayConfig(upstream="http://127.0.0.1:8000", host="0.0.0.0")
    assert GatewayConfig(upstream="http://127.0.0.1:8000", host="0.0.0.0", allow_remote=True).host == "0.0.0.0"
    with pytest.raises(ValidationError, match="http"):
        GatewayConfig(upstream="ftp://x")


def test_a_large_body_is_planned_off_the_event_loop_and_forwarded_whole(upstream: Any) -> None:
    body = {"model": "m", "messages": [{"role": "user", "content": "word " * 300_000}]}  # 1.5 MB
    with running_gateway(upstream.url) as gw:
        answer = httpx.post(gw.url + "/v1/chat/completions", json=body, timeout=60)
        assert answer.status_code == 200 and answer.headers["x-cp-cache-read-tokens"] == "4"
    assert upstream.requests[-1].body == body


def test_the_upstream_proxy_comes_from_the_environment_once_and_no_proxy_is_honoured(monkeypatch: Any) -> None:
    from cp_memory.gateway.upstream import _env_proxy

    for name in ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "ALL_PROXY"):  # the machine's own settings out of the way
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.lower(), raising=False)
    monkeypatch.setenv("HTTPS_PROXY", "http://proxy.corp:3128")
    monkeypatch.setenv("NO_PROXY", "internal.corp,127.0.0.1")
    assert _env_proxy("https://api.openai.com") == "http://proxy.corp:3128"
    assert _env_proxy("https://llm.internal.corp/v1") is None and _env_proxy("http://127.0.0.1:8000") is None
    assert _env_proxy("http://engine:8000") is None  # no HTTP_PROXY: straight through
