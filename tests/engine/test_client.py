"""EngineClient / AsyncEngineClient against a loopback fake engine: no llama-server needed."""

from __future__ import annotations

import pytest

from cp_memory.engine import (
    AsyncEngineClient,
    EngineError,
    EngineStatusError,
)
from cp_memory.engine._server import free_port
from cp_memory.engine.sse import StreamDecoder

from .conftest import FakeClock, FakeEngine, FakeRequest, MakeClient, sse

SSE = {"content-type": "text/event-stream"}


def _chunk(text: str | None = None, finish: str | None = None, **extra: object) -> dict:
    choice = {"index": 0, "text": text or "", "finish_reason": finish}
    return {"id": "cmpl-1", "object": "text_completion", "choices": [choice], **extra}


def _chat_chunk(content: str | None = None, finish: str | None = None, **extra: object) -> dict:
    delta = {} if content is None else {"content": content}
    choice = {"index": 0, "delta": delta, "finish_reason": finish}
    return {"id": "chat-1", "object": "chat.completion.chunk", "choices": [choice], **extra}


USAGE = {
    "prompt_tokens": 100,
    "completion_tokens": 2,
    "total_tokens": 102,
    "prompt_tokens_details": {"cached_tokens": 90},
}


def test_stream_parsed_and_rid_sent(make_client: MakeClient, fake_engine: FakeEngine) -> None:
    fake_engine.responder = lambda req: (
        200,
        SSE,
        sse(_chunk("Hel"), _chunk("lo"), _chunk(finish="length"), {"id": "cmpl-1", "choices": [], "usage": USAGE}),
    )
    with make_client(fake_engine.url, model="m") as client:
        res = client.complete("prompt", max_tokens=3, request_id="req-42", stop="\n")
    assert res.text == "Hello"
    assert (res.prompt_tokens, res.cached_tokens, res.completion_tokens) == (100, 90, 2)
    assert res.request_id == "req-42" and res.finish_reason == "length"
    assert 0 <= res.ttft_s <= res.total_s
    assert res.cache_hit_ratio == pytest.approx(0.9)
    body = fake_engine.requests[0].body
    assert fake_engine.requests[0].path == "/v1/completions"
    assert body["rid"] == "req-42" and body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    assert body["model"] == "m" and body["stop"] == ["\n"] and body["max_tokens"] == 3
    assert fake_engine.requests[0].headers.get("X-Request-Id") == "req-42"


def test_request_id_generated_and_can_be_omitted(make_client: MakeClient, fake_engine: FakeEngine) -> None:
    fake_engine.responder = lambda req: (200, SSE, sse(_chunk("x", finish="stop")))
    with make_client(fake_engine.url) as client:
        res = client.complete("p")
    assert res.request_id and len(res.request_id) == 32
    assert fake_engine.requests[-1].body["rid"] == res.request_id
    with make_client(fake_engine.url, send_request_id=False, extra_body={"ignore_eos": True}) as client:
        client.complete("p")
    assert "rid" not in fake_engine.requests[-1].body
    assert fake_engine.requests[-1].body["ignore_eos"] is True


def test_llamacpp_timings_fallback(make_client: MakeClient, fake_engine: FakeEngine) -> None:
    timings = {"cache_n": 75, "prompt_n": 25, "predicted_n": 4}
    fake_engine.responder = lambda req: (
        200,
        SSE,
        sse(_chat_chunk("a"), _chat_chunk("b"), _chat_chunk(finish="stop", timings=timings)),
    )
    with make_client(fake_engine.url) as client:
        res = client.chat([{"role": "user", "content": "hi"}])
    assert fake_engine.requests[0].path == "/v1/chat/completions"
    assert res.text == "ab"
    assert (res.prompt_tokens, res.cached_tokens, res.completion_tokens) == (100, 75, 4)


def test_no_cache_report(make_client: MakeClient, fake_engine: FakeEngine) -> None:
    usage = {"prompt_tokens": 10, "completion_tokens": 1}  # vLLM without the flag
    fake_engine.responder = lambda req: (200, SSE, sse(_chunk("z", finish="stop", usage=usage)))
    with make_client(fake_engine.url) as client:
        res = client.complete("p")
    assert res.prompt_tokens == 10 and res.cached_tokens is None


@pytest.mark.parametrize(
    "payload, content_type, match",
    [
        (b"data: {this is not json\n\n", "text/event-stream", "not JSON"),
        (b"<html><body>502 Bad Gateway</body></html>\n", "text/event-stream", "without a field"),
        (b"<html>oops</html>", "text/html", "expected an SSE stream"),
        (b"data: [1, 2, 3]\n\n", "text/event-stream", "not a JSON object"),
        (b'data: {"choices": "nope"}\n\n', "text/event-stream", "not a list"),
        (b": ping\n\n", "text/event-stream", "without any completion event"),
        (sse(_chunk("partial"), done=False), "text/event-stream", "before \\[DONE\\]"),
    ],
)
def test_malformed_stream_is_a_clear_error(
    make_client: MakeClient, fake_engine: FakeEngine, payload: bytes, content_type: str, match: str
) -> None:
    fake_engine.responder = lambda req: (200, {"content-type": content_type}, payload)
    with make_client(fake_engine.url) as client, pytest.raises(EngineError, match=match) as info:
        client.complete("p")
    assert "malformed stream" in str(info.value)
    assert len(fake_engine.requests) == 1  # a malformed answer is not retried


def test_error_event_in_stream(make_client: MakeClient, fake_engine: FakeEngine) -> None:
    err = {"error": {"code": 500, "message": "context overflow", "type": "server_error"}}
    fake_engine.responder = lambda req: (200, SSE, sse(err))
    with make_client(fake_engine.url) as client, pytest.raises(EngineError, match="context overflow"):
        client.complete("p")


def test_5xx_retried_then_engine_error(make_client: MakeClient, fake_engine: FakeEngine) -> None:
    fake_engine.responder = lambda req: (
        503,
        {"content-type": "application/json"},
        b'{"error": {"code": 503, "message": "Loading model"}}',
    )
    with make_client(fake_engine.url) as client, pytest.raises(EngineError) as info:
        client.complete("p")
    assert len(fake_engine.requests) == 3  # 1 + max_retries
    assert "after 3 attempt(s)" in str(info.value) and "Loading model" in str(info.value)


def test_5xx_then_success(make_client: MakeClient, fake_engine: FakeEngine) -> None:
    def responder(req: FakeRequest) -> tuple[int, dict[str, str], bytes]:
        if len(fake_engine.requests) == 1:
            return 500, {"content-type": "text/plain"}, b"boom"
        return 200, SSE, sse(_chunk("ok", finish="stop"))

    fake_engine.responder = responder
    with make_client(fake_engine.url) as client:
        assert client.complete("p").text == "ok"
    assert len(fake_engine.requests) == 2


def test_4xx_not_retried(make_client: MakeClient, fake_engine: FakeEngine) -> None:
    fake_engine.responder = lambda req: (
        400,
        {"content-type": "application/json"},
        b'{"error": {"code": 400, "message": "the request exceeds the available context size"}}',
    )
    with make_client(fake_engine.url) as client, pytest.raises(EngineError, match="exceeds the available"):
        client.complete("p")
    assert len(fake_engine.requests) == 1


def test_connection_refused_bounded(make_client: MakeClient, fake_clock: FakeClock) -> None:
    """Nothing listens: 3 attempts, the 2 waits between them within the 10-50 ms backoff, then a clear error."""
    port = free_port()  # nothing listens there
    with (
        make_client(f"http://127.0.0.1:{port}", clock=fake_clock) as client,
        pytest.raises(EngineError) as info,
    ):
        client.complete("p")
    assert len(fake_clock.slept) == 2 and all(0.01 <= s <= 0.05 for s in fake_clock.slept), fake_clock.slept
    msg = str(info.value)
    assert "cannot connect" in msg and "3 attempt(s)" in msg and "Is the server running" in msg


def test_non_streaming_json_answer_accepted(make_client: MakeClient, fake_engine: FakeEngine) -> None:
    full = {"id": "x", "choices": [{"index": 0, "text": "whole", "finish_reason": "stop"}], "usage": USAGE}
    fake_engine.responder = lambda req: (
        200,
        {"content-type": "application/json"},
        __import__("json").dumps(full).encode(),
    )
    with make_client(fake_engine.url) as client:
        res = client.complete("p")
    assert res.text == "whole" and res.cached_tokens == 90


def test_flush_cache_sglang_style(make_client: MakeClient, fake_engine: FakeEngine) -> None:
    fake_engine.responder = lambda req: (
        (200, {"content-type": "text/plain"}, b"Cache flushed.") if req.path == "/flush_cache" else (404, {}, b"")
    )
    with make_client(fake_engine.url) as client:
        assert client.flush_cache() is True
    assert fake_engine.requests[0].method == "POST"


def test_flush_cache_refused(make_client: MakeClient, fake_engine: FakeEngine) -> None:
    fake_engine.responder = lambda req: (400, {"content-type": "text/plain"}, b"running requests")
    with make_client(fake_engine.url) as client:
        assert client.flush_cache() is False


def test_base_url_with_v1_suffix(make_client: MakeClient, fake_engine: FakeEngine) -> None:
    fake_engine.responder = lambda req: (200, SSE, sse(_chunk("k", finish="stop")))
    with make_client(fake_engine.url + "/v1/") as client:
        assert client.complete("p").text == "k"
    assert fake_engine.requests[0].path == "/v1/completions"


async def test_async_stream_and_errors(fake_engine: FakeEngine) -> None:
    fake_engine.responder = lambda req: (
        200,
        SSE,
        sse(_chat_chunk("as"), _chat_chunk("ync", finish="stop"), {"id": "c", "choices": [], "usage": USAGE}),
    )
    async with AsyncEngineClient(fake_engine.url, max_retries=1, retry_wait_s=0.01) as client:
        res = await client.chat([{"role": "user", "content": "q"}], request_id="a1")
        assert res.text == "async" and res.cached_tokens == 90 and res.request_id == "a1"
        assert fake_engine.requests[-1].body["rid"] == "a1"
        fake_engine.responder = lambda req: (200, SSE, b"data: {broken\n\n")
        with pytest.raises(EngineError, match="malformed stream"):
            await client.complete("p")


async def test_async_connection_refused() -> None:
    port = free_port()
    async with AsyncEngineClient(f"http://127.0.0.1:{port}", max_retries=2, retry_wait_s=0.01) as client:
        with pytest.raises(EngineError, match="cannot connect"):
            await client.complete("p")


def test_flush_cache_llamacpp_style_erases_every_slot(make_client: MakeClient, fake_engine: FakeEngine) -> None:
    """llama.cpp: no /flush_cache (404), so each slot is erased, and the answer is False because
    the host prompt cache cannot be cleared over HTTP."""

    def responder(req: FakeRequest) -> tuple[int, dict[str, str], bytes]:
        if req.path == "/slots":
            return 200, {"content-type": "application/json"}, b'[{"id": 0}, {"id": 1}]'
        if req.path.startswith("/slots/"):
            return 200, {"content-type": "application/json"}, b'{"n_erased": 10}'
        return 404, {}, b""

    fake_engine.responder = responder
    with make_client(fake_engine.url) as client:
        assert client.flush_cache() is False
    assert [(r.method, r.path) for r in fake_engine.requests] == [
        ("POST", "/flush_cache"),
        ("GET", "/slots"),
        ("POST", "/slots/0?action=erase"),
        ("POST", "/slots/1?action=erase"),
    ]


def test_admin_endpoints(make_client: MakeClient, fake_engine: FakeEngine) -> None:
    answers = {
        "/tokenize": b'{"tokens": [1, 2, {"id": 3, "piece": "x"}]}',
        "/slots": b'[{"id": 0, "is_processing": false}]',
        "/metrics": b"# TYPE llamacpp:prompt_tokens_total counter\nllamacpp:prompt_tokens_total 42\n",
    }
    fake_engine.responder = lambda req: (200, {}, answers[req.path])
    with make_client(fake_engine.url) as client:
        assert client.tokenize("a b c") == [1, 2, 3]
        assert client.slots() == [{"id": 0, "is_processing": False}]
        assert "prompt_tokens_total 42" in client.metrics()
    assert fake_engine.requests[0].body == {"content": "a b c", "add_special": False}
    fake_engine.responder = lambda req: (404, {}, b"not found")
    with make_client(fake_engine.url) as client:
        assert (client.tokenize("x"), client.slots(), client.metrics()) == (None, None, None)


def test_retries_are_logged_by_tenacity(
    make_client: MakeClient, fake_engine: FakeEngine, caplog: pytest.LogCaptureFixture
) -> None:
    fake_engine.responder = lambda req: (503, {}, b"busy")
    with caplog.at_level("WARNING"), make_client(fake_engine.url) as client, pytest.raises(EngineStatusError) as info:
        client.complete("p")
    assert info.value.status == 503
    retries = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Retrying")]
    assert len(retries) == 2 and "HTTP 503: busy" in retries[0], retries


@pytest.mark.parametrize("size", [1, 2, 3, 7])
def test_stream_split_anywhere_parses_the_same(size: int) -> None:
    """The stream parser is transport-independent: any chunking, any line ending."""
    body = sse(_chunk("Hel"), _chunk("lo"), _chunk(finish="stop", usage=USAGE))
    for eol in (b"\n", b"\r\n", b"\r"):
        raw = body.replace(b"\n", eol)
        decoder = StreamDecoder("http://x", 0.0, chat=False, clock=lambda: 1.0)
        for i in range(0, len(raw), size):
            if decoder.feed(raw[i : i + size]):
                break
        res = decoder.result("r")
        assert (res.text, res.finish_reason, res.cached_tokens) == ("Hello", "stop", 90)
