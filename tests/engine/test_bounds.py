"""Every call is bounded: a total deadline over connect, status line, headers, body, retries and
their waits; a cap on bytes read; ``Retry-After`` honoured within both. Each test is a misbehaving
loopback server, run against both clients.

Where a test is about the retry logic, the client runs on a :class:`FakeClock` (its waits take no
time and are listed). Where a real socket must be slow, the server dawdles for 30 s and the test
only asserts that a deadline of 1-3 s ended the call well before: under :data:`WELL_UNDER` s (the
read timeout is longer than the server's pauses, so that only the deadline can end the call)."""

from __future__ import annotations

import email.utils
import json
import math
import socket
import time
from collections.abc import Iterator

import pytest

from cp_memory.engine import (
    EngineClient,
    EngineDeadlineExceeded,
    EngineResponseTooLarge,
    EngineStatusError,
    EngineTimeout,
)
from cp_memory.engine.deadline import parse_retry_after

from ._raw_server import Answer, RawEngine, raw_engine, trickle
from .conftest import FakeClock, FakeEngine, FakeRequest, MakeClient

SSE = {"content-type": "text/event-stream"}
MiB = 1024 * 1024
#: a call under a 1-3 s deadline against a server dawdling for 30 s ends before this (any load)
WELL_UNDER = 12.0


def event(text: str) -> bytes:
    chunk = {"id": "c", "choices": [{"index": 0, "text": text, "finish_reason": None}]}
    return b"data: " + json.dumps(chunk).encode() + b"\n\n"


def slowly(fake: FakeEngine, first: bytes, then: bytes, every_s: float, for_s: float = 30.0) -> Iterator[bytes]:
    """``first``, then ``then`` every ``every_s`` seconds for up to ``for_s`` seconds."""
    yield first
    end = time.monotonic() + for_s
    while time.monotonic() < end and not fake.closing.wait(every_s):
        yield then


@pytest.mark.parametrize("drip", [event("x"), b": ping\n\n"], ids=["token", "keep-alive"])
def test_trickle_cannot_outlast_the_deadline(make_client: MakeClient, fake_engine: FakeEngine, drip: bytes) -> None:
    """A server sending a token (or an SSE comment) every 0.2 s for 30 s never trips the 15 s read
    timeout; the 1 s total deadline still ends the call."""
    fake_engine.responder = lambda req: (200, SSE, slowly(fake_engine, event("a"), drip, 0.2))
    with make_client(fake_engine.url, timeout=15.0, total_timeout=1.0) as client:
        t0 = time.monotonic()
        with pytest.raises(EngineDeadlineExceeded, match=r"total_timeout=1s") as info:
            client.complete("p", max_tokens=4)
        assert time.monotonic() - t0 < WELL_UNDER
    assert isinstance(info.value, EngineTimeout) and isinstance(info.value, TimeoutError)
    assert len(fake_engine.requests) == 1  # a deadline is final: not retried


def test_a_read_blocked_at_the_deadline_is_cut_short(make_client: MakeClient, fake_engine: FakeEngine) -> None:
    """One token, then 30 s of silence: the 60 s read timeout would wait; the 1 s deadline wins."""
    fake_engine.responder = lambda req: (200, SSE, slowly(fake_engine, event("a"), event("b"), 30))
    with make_client(fake_engine.url, timeout=60.0, total_timeout=1.0) as client:
        t0 = time.monotonic()
        with pytest.raises(EngineDeadlineExceeded):
            client.complete("p")
        assert time.monotonic() - t0 < WELL_UNDER


def test_waiting_for_headers_is_bounded_by_the_deadline(make_client: MakeClient, fake_engine: FakeEngine) -> None:
    """A 30 s prefill (no byte of the answer yet) under a 1 s deadline."""

    def slow_prefill(req: FakeRequest) -> tuple[int, dict[str, str], bytes]:
        fake_engine.closing.wait(30)
        return 200, SSE, event("late")

    fake_engine.responder = slow_prefill
    with make_client(fake_engine.url, timeout=60.0, total_timeout=1.0) as client:
        t0 = time.monotonic()
        with pytest.raises(EngineDeadlineExceeded):
            client.complete("p")
        assert time.monotonic() - t0 < WELL_UNDER


#: a status line 40 bytes long: 40 s at one byte per second
SLOW_STATUS = b"HTTP/1.1 200 " + b"O" * 25 + b"\r\n"
#: a header that would take 30 s to arrive, after a status line and a header sent at once
SLOW_HEADER = b"X-Padding: " + b"a" * 40 + b"\r\n\r\n"


def trickled_status(sock: socket.socket, n: int, engine: RawEngine) -> None:
    trickle(sock, SLOW_STATUS, engine)


def trickled_headers(sock: socket.socket, n: int, engine: RawEngine) -> None:
    sock.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n")
    trickle(sock, SLOW_HEADER, engine)


@pytest.mark.parametrize("answer", [trickled_status, trickled_headers], ids=["status-line", "headers"])
def test_a_trickled_status_line_or_header_cannot_outlast_the_deadline(make_client: MakeClient, answer: Answer) -> None:
    """httpx's read timeout starts again with every byte: a server sending its status line or its
    headers one byte per second (for 30 s) never trips a read timeout of 3 s or more (``timeout``
    is 10 s, cut to the 3 s the call has). The 3 s deadline ends the call all the same, before any
    header is complete."""
    with raw_engine(answer) as engine, make_client(engine.url, timeout=10.0, total_timeout=3.0) as client:
        t0 = time.monotonic()
        with pytest.raises(EngineDeadlineExceeded, match=r"total_timeout=3s; 1 attempt\(s\), 0 bytes"):
            client.complete("p")
        assert time.monotonic() - t0 < WELL_UNDER
        assert engine.requests == 1  # a deadline is final: not retried


def test_the_deadline_holds_through_a_proxy_from_the_environment(
    make_client: MakeClient, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``HTTP_PROXY`` routes the call through another connection pool: held to the deadline too."""
    with raw_engine(trickled_headers) as proxy:
        for name in ("NO_PROXY", "no_proxy", "ALL_PROXY", "all_proxy", "http_proxy"):
            monkeypatch.delenv(name, raising=False)
        monkeypatch.setenv("HTTP_PROXY", proxy.url)
        with make_client("http://engine.invalid:8080", timeout=10.0, total_timeout=3.0) as client:
            t0 = time.monotonic()
            with pytest.raises(EngineDeadlineExceeded):
                client.complete("p")
            assert time.monotonic() - t0 < WELL_UNDER
        assert proxy.requests == 1


def test_the_retry_after_a_failure_runs_under_the_same_deadline(make_client: MakeClient) -> None:
    """The first attempt is answered 503 at once; the retry meets headers trickled for 30 s. The
    call's one deadline (3.5 s, counting the first attempt and the backoff) ends it."""

    def answer(sock: socket.socket, n: int, engine: RawEngine) -> None:
        if n == 1:
            sock.sendall(b"HTTP/1.1 503 Busy\r\nContent-Length: 4\r\nConnection: close\r\n\r\nbusy")
        else:
            trickled_headers(sock, n, engine)

    with raw_engine(answer) as engine, make_client(engine.url, timeout=10.0, total_timeout=3.5) as client:
        t0 = time.monotonic()
        with pytest.raises(EngineDeadlineExceeded, match=r"2 attempt\(s\)"):
            client.complete("p")
        assert time.monotonic() - t0 < WELL_UNDER
        assert engine.requests == 2


def test_server_ignoring_max_tokens_hits_the_byte_cap(make_client: MakeClient, fake_engine: FakeEngine) -> None:
    """An endless stream is cut at the default 16 MiB cap, not read until memory runs out."""

    def endless() -> Iterator[bytes]:
        chunk = event("y" * 4000) * 16
        while not fake_engine.closing.is_set():
            yield chunk

    fake_engine.responder = lambda req: (200, SSE, endless())
    with (
        make_client(fake_engine.url) as client,
        pytest.raises(EngineResponseTooLarge, match="max_response_bytes=16777216"),
    ):
        client.complete("p", max_tokens=8)
    assert len(fake_engine.requests) == 1 and not fake_engine.requests[0].complete


def test_a_non_streamed_answer_is_capped_too(make_client: MakeClient, fake_engine: FakeEngine) -> None:
    doc = json.dumps({"id": "x", "choices": [{"text": "z" * MiB, "finish_reason": "stop"}]})
    fake_engine.responder = lambda req: (200, {"content-type": "application/json"}, doc.encode())
    with make_client(fake_engine.url, max_response_bytes=MiB // 2) as client:
        with pytest.raises(EngineResponseTooLarge, match="max_response_bytes=524288"):
            client.complete("p")
        fake_engine.responder = lambda req: (200, {}, b"# metrics\n" * MiB)
        with pytest.raises(EngineResponseTooLarge):
            client.metrics()


@pytest.mark.parametrize("status", [400, 500])
def test_a_50_mb_error_body_is_not_read_whole(make_client: MakeClient, fake_engine: FakeEngine, status: int) -> None:
    def huge() -> Iterator[bytes]:
        yield b'{"error": {"message": "context overflow"}} '
        for _ in range(50 * 16):
            yield b"x" * (64 * 1024)

    fake_engine.responder = lambda req: (status, {"content-type": "application/json"}, huge())
    with make_client(fake_engine.url, max_retries=1) as client, pytest.raises(EngineStatusError) as info:
        client.complete("p")
    assert info.value.status == status
    assert f"HTTP {status}" in str(info.value)
    for req in fake_engine.requests:  # the client hung up long before 50 MB
        assert not req.complete and req.sent < 20 * MiB, req.sent


@pytest.mark.parametrize("status", [429, 503])
@pytest.mark.parametrize("form", ["seconds", "http-date"])
def test_retry_after_is_honoured(
    make_client: MakeClient, fake_engine: FakeEngine, fake_clock: FakeClock, status: int, form: str
) -> None:
    """The client waits what the server asked (7 s, or until a date 30 s ahead), not its 10 ms
    backoff."""

    def responder(req: FakeRequest) -> tuple[int, dict[str, str], bytes]:
        if len(fake_engine.requests) == 1:
            when = "7" if form == "seconds" else email.utils.formatdate(time.time() + 30, usegmt=True)
            return status, {"retry-after": when}, b"slow down"
        return 200, SSE, event("ok") + b"data: [DONE]\n\n"

    fake_engine.responder = responder
    with make_client(fake_engine.url, retry_wait_s=0.01, total_timeout=100, clock=fake_clock) as client:
        assert client.complete("p").text == "ok"
    assert len(fake_engine.requests) == 2
    (waited,) = fake_clock.slept
    if form == "seconds":
        assert waited == 7.0
    else:  # the date has whole seconds, read against the wall clock a moment later
        assert 25.0 < waited <= 30.0, waited


def test_retry_after_past_the_deadline_gives_up_at_once(
    make_client: MakeClient, fake_engine: FakeEngine, fake_clock: FakeClock
) -> None:
    fake_engine.responder = lambda req: (503, {"retry-after": "30"}, b"overloaded")
    with make_client(fake_engine.url, total_timeout=3.0, clock=fake_clock) as client:
        with pytest.raises(EngineStatusError, match="Retry-After") as info:
            client.complete("p")
    assert fake_clock.slept == []  # no sleeping towards a deadline it cannot make
    msg = str(info.value)
    assert "after 1 attempt(s)" in msg and "total_timeout=3s" in msg and "overloaded" in msg
    assert info.value.retry_after == 30.0 and len(fake_engine.requests) == 1


def test_backoff_stops_at_the_deadline(make_client: MakeClient, fake_engine: FakeEngine, fake_clock: FakeClock) -> None:
    """10 retries 1 s, 2 s, 4 s ... apart would take minutes; the 2.5 s deadline stops them."""
    fake_engine.responder = lambda req: (500, {}, b"boom")
    with make_client(
        fake_engine.url, max_retries=10, retry_wait_s=1.0, retry_wait_max_s=60, total_timeout=2.5, clock=fake_clock
    ) as client:
        with pytest.raises(EngineStatusError, match=r"the next attempt \(in 2s\) would start past the call's deadline"):
            client.complete("p")
    assert fake_clock.slept == [1.0]  # attempts at 0 s and 1 s; the next (at 3 s) is past it
    assert len(fake_engine.requests) == 2


def test_time_spent_in_attempts_counts_against_the_deadline(
    make_client: MakeClient, fake_engine: FakeEngine, fake_clock: FakeClock
) -> None:
    """Each 500 answer takes 1 s of the call's clock: with backoffs of 0.25 s and 0.5 s, the third
    attempt would start at 2.75 s, past the 2.5 s deadline."""

    def slow_failure(req: FakeRequest) -> tuple[int, dict[str, str], bytes]:
        fake_clock.t += 1.0
        return 500, {}, b"boom"

    fake_engine.responder = slow_failure
    with make_client(
        fake_engine.url, max_retries=10, retry_wait_s=0.25, retry_wait_max_s=60, total_timeout=2.5, clock=fake_clock
    ) as client:
        with pytest.raises(EngineStatusError, match="past the call's deadline"):
            client.complete("p")
    assert fake_clock.slept == [0.25] and len(fake_engine.requests) == 2


def test_default_deadline_is_derived_from_timeout() -> None:
    """Default ``total_timeout``: one full ``timeout`` for each attempt."""
    with EngineClient("http://127.0.0.1:1", timeout=2.0, max_retries=3) as client:
        assert client.total_timeout == 8.0
    with EngineClient("http://127.0.0.1:1") as client:
        assert (client.timeout, client.total_timeout) == (120.0, 480.0)
    with pytest.raises(ValueError, match="total_timeout"):
        EngineClient("http://127.0.0.1:1", total_timeout=0)
    with pytest.raises(ValueError, match="max_response_bytes"):
        EngineClient("http://127.0.0.1:1", max_response_bytes=0)
    with pytest.raises(ValueError, match="timeout"):
        EngineClient("http://127.0.0.1:1", timeout=0)


def test_no_total_deadline_when_asked(make_client: MakeClient, fake_engine: FakeEngine) -> None:
    fake_engine.responder = lambda req: (200, SSE, event("ok") + b"data: [DONE]\n\n")
    with make_client(fake_engine.url, total_timeout=math.inf) as client:
        assert client.complete("p").text == "ok"


def test_parse_retry_after() -> None:
    now = 1_700_000_000.0
    assert parse_retry_after("120", now) == 120.0
    assert parse_retry_after(" 1.5 ", now) == 1.5
    assert parse_retry_after(email.utils.formatdate(now + 30, usegmt=True), now) == 30.0
    assert parse_retry_after(email.utils.formatdate(now - 30, usegmt=True), now) == 0.0
    for bad in (None, "", "soon", "nan", "inf", "-5x"):
        assert parse_retry_after(bad, now) is None
    assert parse_retry_after("-5", now) == 0.0
