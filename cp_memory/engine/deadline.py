"""Time bounds of a call: the clock, the deadline, ``Retry-After`` parsing, and the two guards that
hold every wait of an attempt to the deadline. No state outside the objects; nothing here knows
about completions.

httpx cannot bound a call by itself: its ``read`` timeout applies to each socket read and starts
again with every byte received, so a server sending its status line or headers one byte per
second keeps a call open for as long as it likes (``timeout`` is never reached), and a deadline
checked between body chunks comes too late, after the headers. Hence two guards, each the robust
form for its kind of client:

* :class:`SocketDeadlines` (:class:`EngineClient`): a blocking call cannot be cancelled, so each
  socket operation is given at most the time left — every connect, TLS handshake, write and read
  of the attempt, the status line and headers included. The client's network backend is wrapped
  (:meth:`SocketDeadlines.install`); the deadline of the call running in the current thread
  reaches it through a context variable. No timer thread, nothing to race with the connection
  pool: the operation that would outlast the deadline ends with a timeout, at the deadline.
* :class:`CancelAtDeadline` (:class:`AsyncEngineClient`): the attempt runs in an anyio cancel
  scope (``anyio.fail_after``) that expires at the deadline and cancels whatever is awaited then
  (DNS, connect, headers, a read; asyncio or trio); httpcore closes the connection it cancels.
"""

from __future__ import annotations

import email.utils
import math
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import AbstractContextManager, contextmanager
from contextvars import ContextVar
from datetime import timezone
from types import TracebackType
from typing import Any, Protocol, TypeVar

import anyio
import httpcore
import httpx

__all__ = [
    "MONOTONIC",
    "CancelAtDeadline",
    "Clock",
    "Deadline",
    "MonotonicClock",
    "SocketDeadlines",
    "parse_retry_after",
]

T = TypeVar("T")

#: a deadline further away than this (about 115 days) is no deadline: timers reject huge delays
_NEVER_S = 1e7


class Clock(Protocol):
    """The time a client's calls run on: ``now()`` (seconds, monotonic) places the deadline; the
    waits between attempts (backoff, ``Retry-After``) are ``sleep`` / ``asleep``. Tests inject
    a clock that only advances when slept on, so retry logic runs without waiting."""

    def now(self) -> float: ...

    def sleep(self, seconds: float) -> None: ...

    async def asleep(self, seconds: float) -> None: ...


class MonotonicClock:
    """:class:`Clock` of ``time.monotonic`` and real sleeps (the default, :data:`MONOTONIC`)."""

    def now(self) -> float:
        return time.monotonic()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    async def asleep(self, seconds: float) -> None:
        await anyio.sleep(seconds)


#: the clients' default clock
MONOTONIC: Clock = MonotonicClock()


class Deadline:
    """The end of one call, ``seconds`` from now on ``clock`` (``math.inf``: none)."""

    def __init__(self, clock: Clock, seconds: float) -> None:
        self.clock = clock
        self.at = clock.now() + seconds
        #: set when a guard ended a wait at the deadline (its clock may read a hair earlier)
        self.hit = False

    def remaining(self) -> float:
        return self.at - self.clock.now()

    def expired(self) -> bool:
        return self.hit or self.remaining() <= 0

    def delay(self) -> float | None:
        """Seconds left for a timer, ``None`` for no deadline."""
        left = self.remaining()
        return None if left >= _NEVER_S else max(0.0, left)


def parse_retry_after(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from an HTTP ``Retry-After`` value: delay-seconds (``"120"``) or an
    HTTP-date (``"Wed, 21 Oct 2015 07:28:00 GMT"``, relative to ``now``, default the wall clock).
    A past date gives 0; a missing or unreadable value gives ``None``."""
    if value is None or not value.strip():
        return None
    text = value.strip()
    try:
        seconds = float(text)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(text)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=timezone.utc)
        seconds = when.timestamp() - (time.time() if now is None else now)
    if not math.isfinite(seconds):
        return None
    return max(0.0, seconds)


# -- blocking clients: every socket operation clipped to the time left ------------------------


def _clipped(
    current: ContextVar[Deadline | None],
    timeout: float | None,
    expired: type[httpcore.TimeoutException],
    op: Callable[[float | None], T],
) -> T:
    """Run ``op(timeout)`` with ``timeout`` cut to the current call's time left; a timeout of an
    operation cut that way is the deadline (marked on it, so the error names the deadline)."""
    deadline = current.get()
    left = None if deadline is None else deadline.delay()
    if deadline is None or left is None or (timeout is not None and timeout <= left):
        return op(timeout)
    if left <= 0:
        deadline.hit = True
        raise expired("the call's deadline passed")
    try:
        return op(left)
    except httpcore.TimeoutException:
        deadline.hit = True
        raise


class _ClippedStream(httpcore.NetworkStream):
    def __init__(self, inner: httpcore.NetworkStream, current: ContextVar[Deadline | None]) -> None:
        self._inner = inner
        self._current = current

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return _clipped(self._current, timeout, httpcore.ReadTimeout, lambda t: self._inner.read(max_bytes, t))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        _clipped(self._current, timeout, httpcore.WriteTimeout, lambda t: self._inner.write(buffer, t))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> httpcore.NetworkStream:
        tls = _clipped(
            self._current,
            timeout,
            httpcore.ConnectTimeout,
            lambda t: self._inner.start_tls(ssl_context, server_hostname, t),
        )
        return _ClippedStream(tls, self._current)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _ClippedBackend(httpcore.NetworkBackend):
    def __init__(self, inner: httpcore.NetworkBackend, current: ContextVar[Deadline | None]) -> None:
        self._inner = inner
        self._current = current

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        stream = _clipped(
            self._current,
            timeout,
            httpcore.ConnectTimeout,
            lambda t: self._inner.connect_tcp(host, port, t, local_address, socket_options),
        )
        return _ClippedStream(stream, self._current)

    def connect_unix_socket(
        self, path: str, timeout: float | None = None, socket_options: Iterable[Any] | None = None
    ) -> httpcore.NetworkStream:
        stream = _clipped(
            self._current,
            timeout,
            httpcore.ConnectTimeout,
            lambda t: self._inner.connect_unix_socket(path, t, socket_options),
        )
        return _ClippedStream(stream, self._current)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


class SocketDeadlines:
    """Holds every socket operation of a blocking :class:`httpx.Client` to the deadline of the
    call running in the calling thread (see the module docstring).

    :meth:`install` wraps the network backend of each of the client's connection pools (the
    direct one and any proxy from the environment); :meth:`under` sets the deadline for the
    duration of one attempt. Outside :meth:`under` the sockets keep httpx's own timeouts."""

    def __init__(self) -> None:
        self._current: ContextVar[Deadline | None] = ContextVar("cp_memory_engine_deadline", default=None)

    def install(self, http: httpx.Client) -> bool:
        """Wrap the client's network backends; ``False`` when this httpx keeps them elsewhere
        (then only the per-wait ``timeout`` and the checks between chunks bound a call)."""
        # httpx builds its pools without a network_backend argument: reach them (httpx >= 0.23)
        found: list[tuple[Any, httpcore.NetworkBackend]] = []
        for transport in (http._transport, *http._mounts.values()):
            if transport is None:  # a NO_PROXY entry
                continue
            pool = getattr(transport, "_pool", None)
            backend = getattr(pool, "_network_backend", None)
            if not isinstance(backend, httpcore.NetworkBackend):
                return False
            found.append((pool, backend))
        for pool, backend in found:
            if not isinstance(backend, _ClippedBackend):
                pool._network_backend = _ClippedBackend(backend, self._current)
        return True

    @contextmanager
    def under(self, deadline: Deadline) -> Iterator[None]:
        token = self._current.set(deadline)
        try:
            yield
        finally:
            self._current.reset(token)


# -- async clients: a cancel scope that expires at the deadline -------------------------------


class CancelAtDeadline:
    """``async with`` around one attempt of an async call: cancels it at the deadline (an anyio
    cancel scope, so asyncio and trio alike) and marks the deadline as hit."""

    def __init__(self, deadline: Deadline) -> None:
        self._deadline = deadline
        self._scope: AbstractContextManager[anyio.CancelScope] | None = None

    async def __aenter__(self) -> None:
        self._scope = anyio.fail_after(self._deadline.delay())
        self._scope.__enter__()

    async def __aexit__(
        self, typ: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> bool | None:
        assert self._scope is not None
        try:
            return self._scope.__exit__(typ, exc, tb)
        except TimeoutError as timeout:
            if timeout is exc:  # raised inside (e.g. an EngineDeadlineExceeded): not the scope's
                raise
            self._deadline.hit = True
            raise
