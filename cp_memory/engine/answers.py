"""What to do with an answer's bytes, free of I/O: stream it into a completion, collect an admin
reply, or keep the start of an error answer; every handler is wrapped in :class:`Bounded`, which
decodes the answer's ``Content-Encoding`` and enforces the byte cap and the deadline chunk by chunk.

The clients hand over the raw bytes (``iter_raw``), not httpx's decoded ones: httpx inflates each
network chunk whole, so 64 KiB of gzip from a server ignoring ``Accept-Encoding: identity`` became
64 MiB in memory before any cap could look at it. :class:`Bounded` inflates at most
:data:`DECODE_PIECE` bytes at a time (zlib's ``max_length``) and counts them, so the caps hold on
decoded bytes with one piece of slack.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, NoReturn, Protocol, TypeVar

import httpx

from .deadline import parse_retry_after
from .errors import EngineResponseTooLarge, EngineStatusError, EngineStreamError, RetryableStatus
from .sse import CompletionResult, StreamDecoder, error_detail

__all__ = [
    "DECODE_PIECE",
    "ERROR_BODY_LIMIT",
    "Attempt",
    "Body",
    "Bounded",
    "Handler",
    "Reply",
    "RetryableStatus",
    "completion_handler",
]

T_co = TypeVar("T_co", covariant=True)

#: an error answer is read up to this many bytes (enough for any message; never a whole 50 MB page)
ERROR_BODY_LIMIT = 64 * 1024
#: a compressed answer is inflated this many bytes at a time, each counted against the caps
DECODE_PIECE = 64 * 1024


@dataclass(frozen=True)
class Reply:
    """An admin request's answer: status and (bounded) body."""

    status: int
    body: bytes

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")

    def json(self) -> Any:
        """The body as JSON, ``None`` when it is not JSON."""
        try:
            return json.loads(self.body)
        except ValueError:
            return None


class _Planned(Protocol):
    @property
    def chat(self) -> bool: ...

    @property
    def request_id(self) -> str | None: ...


class _Limits(Protocol):
    @property
    def max_response_bytes(self) -> int: ...


class Attempt(Protocol):
    """What the handlers read of one attempt of a call (:class:`cp_memory.engine.transport.Call` is one):
    where it went, when it started, its byte cap and deadline, and the byte counters :class:`Bounded`
    advances (the call resets them per attempt)."""

    received: int  # decoded bytes of this attempt's answer
    received_raw: int  # bytes of it on the wire
    t0: float

    @property
    def request(self) -> _Planned: ...

    @property
    def config(self) -> _Limits: ...

    @property
    def url(self) -> str: ...

    @property
    def where(self) -> str: ...

    def expired(self) -> bool: ...

    def deadline_error(self) -> Exception: ...


class Handler(Protocol[T_co]):
    """Consumes an answer's body: ``feed`` returns ``True`` to stop reading early."""

    def feed(self, data: bytes) -> bool: ...

    def finish(self) -> T_co: ...


class ErrorBody:
    """Collects the start of an error answer (:data:`ERROR_BODY_LIMIT`), then raises."""

    def __init__(self, call: Attempt, status: int, headers: httpx.Headers) -> None:
        self.call = call
        self.status = status
        self.retry_after = parse_retry_after(headers.get("retry-after"))
        self.body = bytearray()

    def feed(self, data: bytes) -> bool:
        self.body += data[: ERROR_BODY_LIMIT - len(self.body)]
        return len(self.body) >= ERROR_BODY_LIMIT  # the rest is never read

    def finish(self) -> NoReturn:
        detail = error_detail(self.body.decode("utf-8", "replace"))
        if self.status >= 500 or self.status == 429:
            raise RetryableStatus(self.status, detail, self.retry_after)
        raise EngineStatusError(
            f"{self.call.where} was rejected: HTTP {self.status}: {detail}",
            status=self.status,
            retry_after=self.retry_after,
        )


class Stream:
    """A successful completion answer: SSE (or one JSON document) into a CompletionResult."""

    def __init__(self, call: Attempt, headers: httpx.Headers) -> None:
        self.call = call
        event_stream = "text/event-stream" in headers.get("content-type", "")
        self.decoder = StreamDecoder(call.url, call.t0, chat=call.request.chat, event_stream=event_stream)

    def feed(self, data: bytes) -> bool:
        return self.decoder.feed(data)

    def finish(self) -> CompletionResult:
        return self.decoder.result(self.call.request.request_id)


class Body:
    """An admin answer, whatever its status: the whole body (under the cap) for the flow."""

    def __init__(self, status: int) -> None:
        self.status = status
        self.body = bytearray()

    def feed(self, data: bytes) -> bool:
        self.body += data
        return False

    def finish(self) -> Reply:
        return Reply(self.status, bytes(self.body))


class _Inflate:
    """One ``gzip`` or ``deflate`` coding, inflated :data:`DECODE_PIECE` bytes at a time."""

    def __init__(self, coding: str, url: str) -> None:
        self.coding, self.url = coding, url
        # deflate is zlib-wrapped by the standard, raw in some servers: tried in that order (as httpx)
        self._raw_fallback = coding == "deflate"
        self._zlib = zlib.decompressobj(zlib.MAX_WBITS if coding == "deflate" else zlib.MAX_WBITS | 16)

    def decode(self, data: bytes) -> Iterator[bytes]:
        more = True
        while more and not self._zlib.eof:  # bytes after the end of the compressed stream: ignored
            try:
                out = self._zlib.decompress(data, DECODE_PIECE)
            except zlib.error as exc:
                if not self._raw_fallback:
                    raise EngineStreamError(f"malformed stream from {self.url}: bad {self.coding} data: {exc}") from exc
                self._raw_fallback = False
                self._zlib = zlib.decompressobj(-zlib.MAX_WBITS)
                continue
            self._raw_fallback = False
            data = self._zlib.unconsumed_tail
            more = bool(data) or len(out) == DECODE_PIECE  # a full piece: zlib may hold more output
            if out:
                yield out

    def decode_all(self, pieces: Iterable[bytes]) -> Iterator[bytes]:
        for piece in pieces:
            yield from self.decode(piece)


class Bounded(Generic[T_co]):
    """Decodes an answer (``gzip`` / ``deflate``, a piece at a time), counts its raw and its
    decoded bytes against the cap and checks the deadline per chunk.

    A coding it does not decode (``br``, ``zstd``: never asked for, the client sends
    ``Accept-Encoding: identity``) is a malformed answer; an error answer in one is kept raw
    (under :data:`ERROR_BODY_LIMIT`), so that its status still counts."""

    def __init__(self, call: Attempt, inner: Handler[T_co], status: int, headers: httpx.Headers) -> None:
        self.call = call
        self.inner = inner
        self.codings = [c.strip().lower() for c in headers.get("content-encoding", "").split(",") if c.strip()]
        self.stages: list[_Inflate] = []
        for coding in reversed(self.codings):  # the last coding applied is undone first
            if coding in ("gzip", "x-gzip", "deflate"):
                self.stages.append(_Inflate(coding, call.url))
            elif coding != "identity" and status < 400:
                raise EngineStreamError(
                    f"malformed stream from {call.url}: the answer is in Content-Encoding "
                    f"{headers['content-encoding']!r}, although the client asked for identity; only "
                    f"gzip and deflate are decoded"
                )
            elif coding != "identity":
                self.stages = []  # an error body in a coding we cannot decode: kept raw
                break

    def _too_large(self, count: int, what: str) -> EngineResponseTooLarge:
        call = self.call
        return EngineResponseTooLarge(
            f"{call.where}: the answer exceeded max_response_bytes="
            f"{call.config.max_response_bytes} (a server ignoring max_tokens?); stopped "
            f"reading after {count} {what}"
        )

    def feed(self, data: bytes) -> bool:
        call = self.call
        cap = call.config.max_response_bytes
        call.received_raw += len(data)
        if call.received_raw > cap:
            raise self._too_large(call.received_raw, "bytes")
        if call.expired():
            raise call.deadline_error()
        pieces: Iterable[bytes] = (data,)
        for stage in self.stages:
            pieces = stage.decode_all(pieces)
        for piece in pieces:
            call.received += len(piece)
            if call.received > cap:
                raise self._too_large(
                    call.received, f"decoded bytes ({call.received_raw} bytes of {', '.join(self.codings)} read)"
                )
            if self.inner.feed(piece):
                return True
        return False

    def finish(self) -> T_co:
        if self.call.expired():  # a guard may have cut the body short: not an answer
            raise self.call.deadline_error()
        return self.inner.finish()


def completion_handler(call: Attempt, status: int, headers: httpx.Headers) -> Handler[CompletionResult]:
    if status >= 400:
        return ErrorBody(call, status, headers)
    return Stream(call, headers)
