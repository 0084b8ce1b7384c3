"""The content rules through the real ASGI app and HTTP, in front of a local upstream that records what it
receives: the upstream gets the pointer, the header switches the rules off, and a request the upstream
refused registers nothing (the rules' state is committed only with a 2xx)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from cp_memory.gateway.content.records import text_key
from cp_memory.gateway.protocols import Api
from tests.loopback import FakeRequest, loopback_engine

from .conftest import running_gateway
from .content_sessions import tool_results, tool_session
from .test_content import A, B

OK = {
    "id": "c",
    "object": "chat.completion",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 7, "completion_tokens": 1},
}
KEY = {"authorization": "Bearer sk-app-test"}


def ok(req: FakeRequest) -> tuple[int, dict[str, str], bytes]:
    return 200, {"content-type": "application/json"}, json.dumps(OK).encode()


@pytest.fixture()
def upstream() -> Iterator[Any]:
    with loopback_engine(ok) as engine:
        yield engine


def _post(url: str, body: dict[str, Any], **headers: str) -> httpx.Response:
    return httpx.post(url + "/v1/chat/completions", json=body, headers={**KEY, **headers}, timeout=30)


def test_the_upstream_receives_the_pointer_and_the_header_turns_it_off(upstream: Any) -> None:
    bodies = tool_session(Api.CHAT, [A, B, A])
    with running_gateway(upstream.url) as gw:
        for body in bodies:
            assert _post(gw.url, body).status_code == 200
        assert _post(gw.url, bodies[2], **{"x-cp-session": "other", "x-cp-content": "off"}).status_code == 200
    received = [r.body for r in upstream.requests]
    assert tool_results(Api.CHAT, received[2])[2][1] == (
        "Please refer to the result of tool call call_00 in the previous conversation."
    )
    assert received[3] == bodies[2]  # switched off: the client's own request


def test_a_request_the_upstream_refused_registers_nothing(upstream: Any) -> None:
    bodies = tool_session(Api.CHAT, [A, B, B])
    with running_gateway(upstream.url) as gw:
        assert _post(gw.url, bodies[0]).status_code == 200
        upstream.responder = lambda req: (500, {"content-type": "application/json"}, b'{"error": "down"}')
        assert _post(gw.url, bodies[1]).status_code == 500
        state = next(iter(gw.gateway.store.sessions_of(gw.gateway.identify(Api.CHAT, KEY, bodies[0]).tenant, 1)))
        assert state.content.block(Api.CHAT, text_key(B)) is None
        upstream.responder = ok
        for body in bodies[1:]:  # the client retries, then reads B again
            assert _post(gw.url, body).status_code == 200
    assert tool_results(Api.CHAT, upstream.requests[-1].body)[2][1].startswith(
        "Please refer to the result of tool call call_01"
    )
