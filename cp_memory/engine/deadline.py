"""Time bounds of a call: ``Retry-After`` parsing and the alarm that ends a read blocked at the
deadline. No state outside the objects; nothing here knows about completions."""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import math
import socket
import threading
import time
from collections.abc import Callable
from datetime import timezone
from types import TracebackType

import httpx

__all__ = ["Schedule", "SocketAlarm", "loop_timer", "parse_retry_after", "thread_timer"]

#: an alarm further away than this (about 115 days) is not set: timers reject huge delays
_NEVER_S = 1e7
#: ``schedule(delay_s, fn)`` runs ``fn`` once after ``delay_s`` and returns a cancel function
Schedule = Callable[[float, Callable[[], None]], Callable[[], object]]


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


def thread_timer(delay_s: float, fn: Callable[[], None]) -> Callable[[], object]:
    """:data:`Schedule` on a daemon timer thread (blocking clients)."""
    timer = threading.Timer(delay_s, fn)
    timer.daemon = True
    timer.start()
    return timer.cancel


def loop_timer(delay_s: float, fn: Callable[[], None]) -> Callable[[], object]:
    """:data:`Schedule` on the running asyncio loop (a thread where there is none, e.g. trio)."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return thread_timer(delay_s, fn)
    return loop.call_later(delay_s, fn).cancel


def _socket_of(response: httpx.Response) -> socket.socket | None:
    stream = response.extensions.get("network_stream")
    get_info = getattr(stream, "get_extra_info", None)
    sock = get_info("socket") if callable(get_info) else None
    return sock if isinstance(sock, socket.socket) else None


class SocketAlarm:
    """``with`` / ``async with`` around reading a response: after ``delay_s`` it shuts the
    response's socket down, so that a read blocked inside httpx returns at once (as a broken
    connection, which the caller reports as the deadline). Disarmed on exit, before the
    connection can go back to the pool. Without a reachable socket (a mock transport) it does
    nothing; the per-chunk deadline check and the per-attempt read timeout still apply."""

    def __init__(self, response: httpx.Response, delay_s: float, schedule: Schedule) -> None:
        self._sock = _socket_of(response)
        self._delay_s = max(0.0, delay_s)
        self._schedule = schedule
        self._lock = threading.Lock()
        self._armed = False
        self._cancel: Callable[[], object] | None = None
        self.fired = False

    def _fire(self) -> None:
        with self._lock:
            if not self._armed or self._sock is None:
                return
            self._armed = False
            self.fired = True
            with contextlib.suppress(OSError):
                self._sock.shutdown(socket.SHUT_RDWR)

    def __enter__(self) -> SocketAlarm:
        if self._sock is not None and self._delay_s < _NEVER_S:  # total_timeout=math.inf: none
            self._armed = True
            self._cancel = self._schedule(self._delay_s, self._fire)
        return self

    def __exit__(self, typ: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        with self._lock:
            self._armed = False
        if self._cancel is not None:
            self._cancel()

    async def __aenter__(self) -> SocketAlarm:
        return self.__enter__()

    async def __aexit__(
        self, typ: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.__exit__(typ, exc, tb)
