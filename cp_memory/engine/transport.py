"""The HTTP + retry layer, written once for both clients and free of I/O.

A :class:`Call` is one logical request: its :class:`Request`, the client's :class:`ClientConfig`,
a total deadline, and the handler that turns the answer's bytes into a result. The sync and async
clients only move bytes: per attempt they open ``http.stream(**call.httpx_kwargs())``, feed the
chunks to ``call.on_response(...)`` and return ``handler.finish()``; tenacity repeats that under
:meth:`Call.retrying`. Everything else — timeouts per attempt, the deadline, byte caps, which
failures are retried, ``Retry-After``, and the error messages — lives here.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Generic, NoReturn, Protocol, TypeVar

import httpx
from tenacity import (
    RetryCallState,
    before_sleep_log,
    retry_if_exception,
    wait_exponential,
)

from .errors import (
    EngineConnectionError,
    EngineError,
    EngineStatusError,
    EngineTimeout,
)
from .sse import CompletionResult, StreamDecoder, error_detail

logger = logging.getLogger(__name__)

__all__ = ["Call", "ClientConfig", "Reply", "Request"]

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)

#: an error answer is read up to this many bytes (enough for any message; never a whole 50 MB page)
ERROR_BODY_LIMIT = 64 * 1024


@dataclass(frozen=True)
class ClientConfig:
    """What every request of one client shares."""

    base_url: str
    headers: Mapping[str, str]
    timeout: float
    max_retries: int
    retry_wait_s: float
    retry_wait_max_s: float

    @property
    def connect_timeout(self) -> float:
        return min(self.timeout, 10.0)


@dataclass(frozen=True)
class Request:
    """One HTTP request to plan. ``stream``: a completion stream (else an admin request whose
    status the caller interprets); ``chat`` picks the stream's text field."""

    method: str
    path: str
    json: Any = None
    params: Mapping[str, str] | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    stream: bool = False
    chat: bool = False
    request_id: str | None = None


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


class _RetryableStatus(Exception):
    """A 5xx / 429 answer: worth another attempt (turned into an EngineStatusError at the end)."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(f"HTTP {status}: {detail}")
        self.status = status
        self.detail = detail


_RETRYABLE_TRANSPORT = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.ReadError,
    httpx.WriteError,
    httpx.RemoteProtocolError,
    httpx.PoolTimeout,
)


def _is_retryable(exc: BaseException) -> bool:
    return isinstance(exc, (_RetryableStatus, *_RETRYABLE_TRANSPORT))


class _ErrorBody:
    """Collects the start of an error answer, then raises the matching error."""

    def __init__(self, call: Call[Any], status: int) -> None:
        self.call = call
        self.status = status
        self.body = bytearray()

    def feed(self, data: bytes) -> bool:
        self.body += data[: ERROR_BODY_LIMIT - len(self.body)]
        return len(self.body) >= ERROR_BODY_LIMIT

    def finish(self) -> NoReturn:
        detail = error_detail(self.body.decode("utf-8", "replace"))
        if self.status >= 500 or self.status == 429:
            raise _RetryableStatus(self.status, detail)
        raise EngineStatusError(f"{self.call.request.method} {self.call.url} was rejected: "
                                f"HTTP {self.status}: {detail}", status=self.status)


class _Stream:
    def __init__(self, call: Call[CompletionResult], headers: httpx.Headers) -> None:
        self.call = call
        event_stream = "text/event-stream" in headers.get("content-type", "")
        self.decoder = StreamDecoder(call.url, call.t0, chat=call.request.chat,
                                     event_stream=event_stream)

    def feed(self, data: bytes) -> bool:
        return self.decoder.feed(data)

    def finish(self) -> CompletionResult:
        return self.decoder.result(self.call.request.request_id)


class _Body:
    def __init__(self, status: int) -> None:
        self.status = status
        self.body = bytearray()

    def feed(self, data: bytes) -> bool:
        self.body += data
        return False

    def finish(self) -> Reply:
        return Reply(self.status, bytes(self.body))


class Call(Generic[T]):
    """One logical request and its attempts. I/O-free: the clients do the I/O."""

    def __init__(self, request: Request, config: ClientConfig,
                 handler: Callable[[Call[T], int, httpx.Headers], Handler[T]]) -> None:
        self.request = request
        self.config = config
        self._handler = handler
        self.t0 = 0.0
        self._wait_exp = wait_exponential(multiplier=config.retry_wait_s,
                                          max=config.retry_wait_max_s)

    @classmethod
    def completion(cls, request: Request, config: ClientConfig) -> Call[CompletionResult]:
        return Call(request, config, _completion_handler)

    @classmethod
    def admin(cls, request: Request, config: ClientConfig) -> Call[Reply]:
        return Call(request, config, lambda call, status, headers: _Body(status))

    @property
    def url(self) -> str:
        return f"{self.config.base_url}{self.request.path}"

    # -- one attempt -----------------------------------------------------------------------
    def httpx_kwargs(self) -> dict[str, Any]:
        """Arguments of ``http.stream(...)`` for the next attempt."""
        req = self.request
        kwargs: dict[str, Any] = {
            "method": req.method,
            "url": req.path,
            "headers": {**self.config.headers, **req.headers},
            "timeout": httpx.Timeout(self.config.timeout, connect=self.config.connect_timeout),
        }
        if req.json is not None:
            kwargs["json"] = req.json
        if req.params is not None:
            kwargs["params"] = dict(req.params)
        return kwargs

    def attempt(self) -> _Attempt:
        """Context manager (``with`` or ``async with``) around one attempt."""
        return _Attempt(self)

    def _convert(self, exc: BaseException) -> None:
        """Turn a transport error not worth retrying into an :class:`EngineError`; anything
        else (retryable errors go to tenacity as they are) is left to propagate."""
        where = f"{self.request.method} {self.url}"
        if isinstance(exc, (EngineError, _RetryableStatus, *_RETRYABLE_TRANSPORT)):
            return
        if isinstance(exc, httpx.TimeoutException):
            raise EngineTimeout(f"{where} timed out after {self.config.timeout:g}s: "
                                f"{exc or type(exc).__name__}") from exc
        if isinstance(exc, httpx.HTTPError):
            raise EngineError(f"{where} failed: {type(exc).__name__}: {exc}") from exc

    def on_response(self, status: int, headers: httpx.Headers) -> Handler[T]:
        """The handler for this answer's body."""
        return self._handler(self, status, headers)

    # -- attempts --------------------------------------------------------------------------
    def retrying(self) -> dict[str, Any]:
        """Keyword arguments of ``tenacity.Retrying`` / ``AsyncRetrying`` for this call."""
        return {
            "retry": retry_if_exception(_is_retryable),
            "stop": self._stop,
            "wait": self._wait_exp,
            "before_sleep": before_sleep_log(logger, logging.WARNING),
            "retry_error_callback": self._give_up,
        }

    def _stop(self, state: RetryCallState) -> bool:
        return state.attempt_number >= self.config.max_retries + 1

    def _give_up(self, state: RetryCallState) -> NoReturn:
        exc = state.outcome.exception() if state.outcome is not None else None
        n = state.attempt_number
        where = f"{self.request.method} {self.url}"
        if isinstance(exc, _RetryableStatus):
            raise EngineStatusError(f"{where} failed after {n} attempt(s): HTTP {exc.status}: "
                                    f"{exc.detail}", status=exc.status) from exc
        if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)):
            raise EngineConnectionError(
                f"cannot connect to the engine at {self.config.base_url} ({where}) after {n} "
                f"attempt(s): {exc or type(exc).__name__}. Is the server running?") from exc
        raise EngineConnectionError(f"{where} failed after {n} attempt(s): "
                                    f"{type(exc).__name__}: {exc}") from exc


class _Attempt:
    """Around one attempt: starts its clock, converts its errors (:meth:`Call._convert`)."""

    def __init__(self, call: Call[Any]) -> None:
        self.call = call

    def __enter__(self) -> None:
        self.call.t0 = time.perf_counter()

    def __exit__(self, typ: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        if exc is not None:
            self.call._convert(exc)

    async def __aenter__(self) -> None:
        self.__enter__()

    async def __aexit__(self, typ: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        self.__exit__(typ, exc, tb)


def _completion_handler(call: Call[CompletionResult], status: int,
                        headers: httpx.Headers) -> Handler[CompletionResult]:
    if status >= 400:
        return _ErrorBody(call, status)
    return _Stream(call, headers)
