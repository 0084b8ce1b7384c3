"""What to do with an answer's bytes, free of I/O: stream it into a completion, collect an admin
reply, or keep the start of an error answer; every handler is wrapped in :class:`Bounded`, which
enforces the byte cap and the deadline chunk by chunk."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, NoReturn, Protocol, TypeVar

import httpx

from .deadline import parse_retry_after
from .errors import EngineResponseTooLarge, EngineStatusError
from .sse import CompletionResult, StreamDecoder, error_detail

if TYPE_CHECKING:
    from .transport import Call

__all__ = ["ERROR_BODY_LIMIT", "Body", "Bounded", "Handler", "Reply", "RetryableStatus", "completion_handler"]

T_co = TypeVar("T_co", covariant=True)

#: an error answer is read up to this many bytes (enough for any message; never a whole 50 MB page)
ERROR_BODY_LIMIT = 64 * 1024


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


class Handler(Protocol[T_co]):
    """Consumes an answer's body: ``feed`` returns ``True`` to stop reading early."""

    def feed(self, data: bytes) -> bool: ...

    def finish(self) -> T_co: ...


class RetryableStatus(Exception):
    """A 5xx / 429 answer: worth another attempt (turned into an EngineStatusError at the end)."""

    def __init__(self, status: int, detail: str, retry_after: float | None) -> None:
        super().__init__(f"HTTP {status}: {detail}")
        self.status = status
        self.detail = detail
        self.retry_after = retry_after


class ErrorBody:
    """Collects the start of an error answer (:data:`ERROR_BODY_LIMIT`), then raises."""

    def __init__(self, call: Call[Any], status: int, headers: httpx.Headers) -> None:
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

    def __init__(self, call: Call[CompletionResult], headers: httpx.Headers) -> None:
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


class Bounded(Generic[T_co]):
    """Counts the bytes of an answer against the cap and checks the deadline per chunk."""

    def __init__(self, call: Call[Any], inner: Handler[T_co]) -> None:
        self.call = call
        self.inner = inner

    def feed(self, data: bytes) -> bool:
        call = self.call
        call.received += len(data)
        if call.received > call.config.max_response_bytes:
            raise EngineResponseTooLarge(
                f"{call.where}: the answer exceeded max_response_bytes="
                f"{call.config.max_response_bytes} (a server ignoring max_tokens?); stopped "
                f"reading after {call.received} bytes"
            )
        if call.expired():
            raise call.deadline_error()
        return self.inner.feed(data)

    def finish(self) -> T_co:
        if self.call.expired():  # the alarm may have cut the body short: not an answer
            raise self.call.deadline_error()
        return self.inner.finish()


def completion_handler(call: Call[CompletionResult], status: int, headers: httpx.Headers) -> Handler[CompletionResult]:
    if status >= 400:
        return ErrorBody(call, status, headers)
    return Stream(call, headers)
