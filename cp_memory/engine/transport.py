"""The HTTP + retry layer, written once for both clients and free of I/O.

A :class:`Call` is one logical request: its :class:`Request`, the client's :class:`ClientConfig`,
a total deadline, and the handler (:mod:`.answers`) that turns the answer's bytes into a result.
The sync and async clients only move bytes: per attempt they open
``http.stream(**call.httpx_kwargs())`` under ``call.attempt()`` and their guard of
``call.deadline`` (:mod:`.deadline`), feed the raw chunks to ``call.on_response(...)`` and return
``handler.finish()``; tenacity repeats that under :meth:`Call.retrying`, sleeping on the client's
:class:`~.deadline.Clock`. Everything else — timeouts per attempt, the deadline, which failures
are retried, ``Retry-After`` against the deadline, and the error messages — lives here.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Generic, NoReturn, TypeVar

import httpx
from tenacity import (
    RetryCallState,
    before_sleep_log,
    retry_if_exception,
    wait_exponential,
)

from .answers import Body, Bounded, Handler, Reply, completion_handler
from .deadline import MONOTONIC, Clock, Deadline
from .errors import (
    EngineConnectionError,
    EngineDeadlineExceeded,
    EngineError,
    EngineStatusError,
    EngineTimeout,
    RetryableStatus,
)
from .redact import scrub
from .sse import CompletionResult

logger = logging.getLogger(__name__)

__all__ = ["DEFAULT_MAX_RESPONSE_BYTES", "Call", "ClientConfig", "Reply", "Request"]

T = TypeVar("T")

#: default cap on the bytes of one answer (~50k streamed tokens; a server ignoring max_tokens)
DEFAULT_MAX_RESPONSE_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class ClientConfig:
    """What every request of one client shares."""

    base_url: str  #: without credentials (the client moves them to basic auth)
    headers: Mapping[str, str] = field(repr=False)  # Authorization
    timeout: float
    total_timeout: float
    max_retries: int
    retry_wait_s: float
    retry_wait_max_s: float
    max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES
    #: values masked in every message (API key, URL password)
    secrets: tuple[str, ...] = field(default=(), repr=False)
    #: what the deadline is measured on and the waits between attempts sleep on
    clock: Clock = field(default=MONOTONIC, repr=False)

    @property
    def connect_timeout(self) -> float:
        return min(self.timeout, 10.0)


@dataclass(frozen=True)
class Request:
    """One HTTP request to plan; ``chat`` and ``request_id`` matter to a completion stream."""

    method: str
    path: str
    json: Any = None
    params: Mapping[str, str] | None = None
    headers: Mapping[str, str] = field(default_factory=dict)
    chat: bool = False
    request_id: str | None = None


_RETRYABLE_TRANSPORT = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.ReadError,
    httpx.WriteError,
    httpx.RemoteProtocolError,
    httpx.PoolTimeout,
)


def _is_retryable(exc: BaseException) -> bool:
    return isinstance(exc, (RetryableStatus, *_RETRYABLE_TRANSPORT))


class Call(Generic[T]):
    """One logical request and its attempts. I/O-free: the clients do the I/O."""

    def __init__(
        self,
        request: Request,
        config: ClientConfig,
        handler: Callable[[Call[T], int, httpx.Headers], Handler[T]],
    ) -> None:
        self.request = request
        self.config = config
        self._handler = handler
        #: the end of the whole call: every attempt and every wait between them
        self.deadline = Deadline(config.clock, config.total_timeout)
        self.t0 = 0.0
        self.attempts = 0
        self.received = 0  # decoded bytes of the current attempt's answer
        self.received_raw = 0  # bytes of it on the wire (differ under a Content-Encoding)
        self._wait_exp = wait_exponential(multiplier=config.retry_wait_s, max=config.retry_wait_max_s)
        self._gave_up_early: str | None = None

    @classmethod
    def completion(cls, request: Request, config: ClientConfig) -> Call[CompletionResult]:
        return Call(request, config, completion_handler)

    @classmethod
    def admin(cls, request: Request, config: ClientConfig) -> Call[Reply]:
        return Call(request, config, lambda call, status, headers: Body(status))

    @property
    def url(self) -> str:
        return f"{self.config.base_url}{self.request.path}"

    @property
    def where(self) -> str:
        return f"{self.request.method} {self.url}"

    # -- the deadline ----------------------------------------------------------------------
    def remaining(self) -> float:
        return self.deadline.remaining()

    def expired(self) -> bool:
        return self.deadline.expired()

    def deadline_error(self) -> EngineDeadlineExceeded:
        return EngineDeadlineExceeded(
            f"{self.where}: no complete answer within the call's deadline (total_timeout="
            f"{self.config.total_timeout:g}s; {self.attempts} attempt(s), {self.received} bytes "
            f"of the last answer read)"
        )

    # -- one attempt -----------------------------------------------------------------------
    def httpx_kwargs(self) -> dict[str, Any]:
        """Arguments of ``http.stream(...)`` for the next attempt."""
        req = self.request
        left = max(self.remaining(), 0.001)
        kwargs: dict[str, Any] = {
            "method": req.method,
            "url": req.path,
            "headers": {**self.config.headers, **req.headers},
            # no single wait (connect, write, headers, a read) may pass the deadline
            "timeout": httpx.Timeout(min(self.config.timeout, left), connect=min(self.config.connect_timeout, left)),
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
        where = self.where
        if isinstance(exc, (EngineError, RetryableStatus)):
            return
        if isinstance(exc, (httpx.HTTPError, TimeoutError)) and self.expired():
            raise self.deadline_error() from exc  # a wait the deadline guard ended
        if isinstance(exc, _RETRYABLE_TRANSPORT):
            return
        if isinstance(exc, httpx.TimeoutException):
            raise EngineTimeout(
                f"{where} timed out after {self.config.timeout:g}s: {exc or type(exc).__name__}"
            ) from exc
        if isinstance(exc, httpx.HTTPError):
            raise EngineError(f"{where} failed: {type(exc).__name__}: {exc}") from exc

    def on_response(self, status: int, headers: httpx.Headers) -> Handler[T]:
        """The handler for this answer's raw body: decoded, bounded by the byte cap (on decoded
        and on raw bytes) and the deadline."""
        self.received = self.received_raw = 0
        return Bounded(self, self._handler(self, status, headers), status, headers)

    # -- attempts --------------------------------------------------------------------------
    def retrying(self) -> dict[str, Any]:
        """Keyword arguments of ``tenacity.Retrying`` / ``AsyncRetrying`` for this call."""
        return {
            "retry": retry_if_exception(_is_retryable),
            "stop": self._stop,
            "wait": self._wait,
            "before_sleep": before_sleep_log(logger, logging.WARNING),
            "retry_error_callback": self._give_up,
        }

    def _wait(self, state: RetryCallState) -> float:
        """Exponential backoff, or the server's ``Retry-After`` when that is longer."""
        wait = float(self._wait_exp(state))
        exc = state.outcome.exception() if state.outcome is not None else None
        retry_after = getattr(exc, "retry_after", None)
        return max(wait, retry_after) if isinstance(retry_after, float) else wait

    def _stop(self, state: RetryCallState) -> bool:
        if state.attempt_number >= self.config.max_retries + 1:
            return True
        wait, left = self._wait(state), self.remaining()
        if wait < left:
            return False
        exc = state.outcome.exception() if state.outcome is not None else None
        asked = getattr(exc, "retry_after", None)
        self._gave_up_early = (
            f"; not retried: the server asked to wait {asked:g}s (Retry-After)"
            if isinstance(asked, float) and asked >= wait
            else f"; not retried: the next attempt (in {wait:g}s) would start"
        )
        self._gave_up_early += (
            f" past the call's deadline (total_timeout={self.config.total_timeout:g}s, {max(left, 0):.1f}s left)"
        )
        return True

    def _give_up(self, state: RetryCallState) -> NoReturn:
        exc = state.outcome.exception() if state.outcome is not None else None
        n, why = state.attempt_number, self._gave_up_early or ""
        if isinstance(exc, RetryableStatus):
            raise EngineStatusError(
                f"{self.where} failed after {n} attempt(s): HTTP {exc.status}: {exc.detail}{why}",
                status=exc.status,
                retry_after=exc.retry_after,
            ) from exc
        if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)):
            raise EngineConnectionError(
                f"cannot connect to the engine at {self.config.base_url} ({self.where}) after {n} "
                f"attempt(s): {exc or type(exc).__name__}. Is the server running?{why}"
            ) from exc
        raise EngineConnectionError(
            f"{self.where} failed after {n} attempt(s): {type(exc).__name__}: {exc}{why}"
        ) from exc


def _scrub_exception(exc: BaseException, secrets: tuple[str, ...]) -> None:
    """Mask secrets in the message of an error on its way to tenacity's log or the caller (a
    server may echo the API key in an error body)."""
    if secrets and exc.args and isinstance(exc.args[0], str):
        exc.args = (scrub(exc.args[0], secrets), *exc.args[1:])
        if isinstance(exc, RetryableStatus):
            exc.detail = scrub(exc.detail, secrets)


class _Attempt:
    """Around one attempt: starts its clock, converts its errors (:meth:`Call._convert`)."""

    def __init__(self, call: Call[Any]) -> None:
        self.call = call

    def __enter__(self) -> None:
        call = self.call
        call.attempts += 1
        call.received = call.received_raw = 0
        if call.expired():
            raise call.deadline_error()
        call.t0 = time.perf_counter()

    def __exit__(self, typ: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if exc is not None:
            _scrub_exception(exc, self.call.config.secrets)
            self.call._convert(exc)

    async def __aenter__(self) -> None:
        self.__enter__()

    async def __aexit__(
        self, typ: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.__exit__(typ, exc, tb)
