"""A compressed answer is capped on its decoded bytes, and decoded a piece at a time.

The client asks for ``Accept-Encoding: identity``; a server may compress anyway. A gzip bomb —
a few hundred KiB that inflate to 200 MiB — must end with :class:`EngineResponseTooLarge` (or,
in an error answer, with the status and the first 64 KiB) without the inflated bytes ever being
in memory: the tests measure the peak of Python allocations (``tracemalloc``) during the call.
"""

from __future__ import annotations

import json
import tracemalloc
import zlib
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from cp_memory.engine import EngineResponseTooLarge, EngineStatusError, EngineStreamError
from cp_memory.engine.answers import DECODE_PIECE, ERROR_BODY_LIMIT
from cp_memory.engine.transport import DEFAULT_MAX_RESPONSE_BYTES

from .conftest import FakeEngine, MakeClient, sse

MiB = 1024 * 1024
SSE = {"content-type": "text/event-stream"}
GZIP, ZLIB, RAW_DEFLATE = zlib.MAX_WBITS | 16, zlib.MAX_WBITS, -zlib.MAX_WBITS


def compress(parts: Iterator[bytes], wbits: int = GZIP) -> bytes:
    z = zlib.compressobj(9, zlib.DEFLATED, wbits)
    return b"".join(z.compress(p) for p in parts) + z.flush()


def bomb(head: bytes, mib: int = 200, fill: bytes = b"\0") -> bytes:
    """``head``, then ``mib`` MiB of ``fill``, gzipped: about 200 KiB on the wire."""
    return compress(iter([head, *(fill * MiB for _ in range(mib))]))


BOMB = bomb(b"")
SSE_BOMB = bomb(b'data: {"choices": [{"index": 0, "text": "a"}]}\n\n: ', fill=b"x")
ERROR_BOMB = bomb(b'{"error": {"message": "context overflow"}}')


def peak_mib(call: Callable[[], Any]) -> float:
    """Peak MiB of Python allocations while ``call()`` runs (it is expected to raise)."""
    tracemalloc.start()
    try:
        call()
    except Exception:  # noqa: BLE001 - the test checks the error itself
        pass
    finally:
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    return peak / MiB


def gzipped(status: int, body: bytes, content_type: str = "application/json") -> Any:
    return lambda req: (status, {"content-type": content_type, "content-encoding": "gzip"}, body)


def test_a_gzip_bomb_stops_at_the_cap_on_decoded_bytes(make_client: MakeClient, fake_engine: FakeEngine) -> None:
    """200 MiB inflated from 200 KiB: cut at the 1 MiB cap; the peak stays near the cap (one
    network chunk used to inflate to some 64 MiB at once)."""
    fake_engine.responder = gzipped(200, BOMB)
    with make_client(fake_engine.url, max_response_bytes=MiB) as client:
        with pytest.raises(EngineResponseTooLarge, match=r"max_response_bytes=1048576.*decoded bytes"):
            client.complete("p")
        assert peak_mib(lambda: client.complete("p")) < 8
    assert fake_engine.requests[0].headers["Accept-Encoding"] == "identity"


def test_a_gzip_bomb_under_the_default_cap(make_client: MakeClient, fake_engine: FakeEngine) -> None:
    """The same with the default 16 MiB cap: held bytes stay within about twice the cap (the
    SSE line buffer growing to it), not the 115 MiB and more of inflating network chunks whole."""
    fake_engine.responder = gzipped(200, SSE_BOMB, "text/event-stream")
    with make_client(fake_engine.url) as client:
        with pytest.raises(EngineResponseTooLarge, match=f"max_response_bytes={DEFAULT_MAX_RESPONSE_BYTES}"):
            client.complete("p")
        assert peak_mib(lambda: client.complete("p")) < 2 * DEFAULT_MAX_RESPONSE_BYTES / MiB + 8


def test_a_gzip_bomb_in_a_streamed_answer(make_client: MakeClient, fake_engine: FakeEngine) -> None:
    """One real event, then an SSE comment line inflating to 200 MiB, sent without a length in
    64 KiB writes (each inflates to 64 MiB)."""

    def stream(req: Any) -> tuple[int, dict[str, str], Iterator[bytes]]:
        chunks = (SSE_BOMB[i : i + 65536] for i in range(0, len(SSE_BOMB), 65536))
        return 200, {**SSE, "content-encoding": "gzip"}, chunks

    fake_engine.responder = stream
    with make_client(fake_engine.url, max_response_bytes=2 * MiB) as client:
        with pytest.raises(EngineResponseTooLarge, match="max_response_bytes=2097152"):
            client.complete("p")
        assert peak_mib(lambda: client.complete("p")) < 12


@pytest.mark.parametrize("status", [400, 500])
def test_a_gzip_bomb_in_an_error_answer(make_client: MakeClient, fake_engine: FakeEngine, status: int) -> None:
    """An error answer is read to its first 64 KiB decoded: the status and the message come
    through (retried for a 500), the 200 MiB behind them are never inflated."""
    fake_engine.responder = gzipped(status, ERROR_BOMB)
    with make_client(fake_engine.url, max_retries=1) as client:
        with pytest.raises(EngineStatusError, match="context overflow") as info:
            client.complete("p")
        assert peak_mib(lambda: client.complete("p")) < 4
    assert info.value.status == status
    assert len(fake_engine.requests) == (4 if status == 500 else 2)


def test_an_endless_compressed_trickle_of_nothing_stops_at_the_cap_on_raw_bytes(
    make_client: MakeClient, fake_engine: FakeEngine
) -> None:
    """Raw bytes count too: deflate blocks that inflate to nothing cannot be read forever."""

    def empty_blocks() -> Iterator[bytes]:
        yield b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x00\xff"  # a gzip header
        while not fake_engine.closing.is_set():
            yield b"\x00\x00\x00\xff\xff" * 4096  # empty stored blocks, not the last

    fake_engine.responder = lambda req: (200, {**SSE, "content-encoding": "gzip"}, empty_blocks())
    with make_client(fake_engine.url, max_response_bytes=MiB, total_timeout=20) as client:
        with pytest.raises(EngineResponseTooLarge, match=r"after \d+ bytes$"):
            client.complete("p")


EVENTS = [
    {"id": "c", "choices": [{"index": 0, "text": f"t{i} " + "z" * 500, "finish_reason": None}]} for i in range(400)
]
TEXT = "".join(e["choices"][0]["text"] for e in EVENTS)


@pytest.mark.parametrize(
    ("coding", "wbits"),
    [("gzip", GZIP), ("x-gzip", GZIP), ("deflate", ZLIB), ("deflate", RAW_DEFLATE)],
    ids=["gzip", "x-gzip", "deflate", "raw-deflate"],
)
def test_a_compressed_stream_is_read_whole(
    make_client: MakeClient, fake_engine: FakeEngine, coding: str, wbits: int
) -> None:
    """A well-formed compressed stream larger than a decoding piece, split into 1000-byte chunks,
    parses to the same completion as its plain form."""
    body = compress(
        iter([sse(*EVENTS, {"id": "c", "choices": [{"index": 0, "text": "", "finish_reason": "stop"}]})]), wbits
    )
    assert len(zlib.decompress(body, wbits)) > 3 * DECODE_PIECE
    chunks = [body[i : i + 1000] for i in range(0, len(body), 1000)]
    fake_engine.responder = lambda req: (200, {**SSE, "content-encoding": coding}, iter(chunks))
    with make_client(fake_engine.url) as client:
        res = client.complete("p")
    assert res.text == TEXT and res.finish_reason == "stop"


def test_two_codings_are_undone_in_reverse(make_client: MakeClient, fake_engine: FakeEngine) -> None:
    doc = {"id": "x", "choices": [{"text": "twice", "finish_reason": "stop"}]}
    body = compress(iter([compress(iter([json.dumps(doc).encode()]), ZLIB)]), GZIP)
    fake_engine.responder = lambda req: (200, {"content-encoding": "deflate, gzip"}, body)
    with make_client(fake_engine.url) as client:
        assert client.complete("p").text == "twice"


def test_a_coding_it_does_not_decode_is_a_clear_error(make_client: MakeClient, fake_engine: FakeEngine) -> None:
    """``br`` (never asked for) is not decoded: a success answer in it is malformed; an error
    answer keeps its status (its body is read raw, under the error-body cap)."""
    fake_engine.responder = lambda req: (200, {**SSE, "content-encoding": "br"}, b"\x8b\x02\x80data")
    with make_client(fake_engine.url, max_retries=0) as client:
        with pytest.raises(EngineStreamError, match=r"Content-Encoding 'br'.*asked for identity"):
            client.complete("p")
        huge = b"\x8b" * (ERROR_BODY_LIMIT * 8)
        fake_engine.responder = lambda req: (503, {"content-encoding": "br"}, huge)
        with pytest.raises(EngineStatusError) as info:
            client.complete("p")
    assert info.value.status == 503


def test_corrupt_gzip_is_a_malformed_stream(make_client: MakeClient, fake_engine: FakeEngine) -> None:
    fake_engine.responder = lambda req: (200, {**SSE, "content-encoding": "gzip"}, b"\x1f\x8b not gzip at all")
    with make_client(fake_engine.url) as client, pytest.raises(EngineStreamError, match="bad gzip data"):
        client.complete("p")
