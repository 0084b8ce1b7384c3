"""What can go wrong talking to an engine. Every error the client raises is an :class:`EngineError`;
the subclasses say which kind, so a caller can tell a dead server from a bad answer or a bound that
was hit. Messages name the request (method and URL), the attempt count where retries happened, and
never carry a secret (API keys are redacted, see :mod:`cp_memory.engine.redact`)."""

from __future__ import annotations

__all__ = [
    "EngineConnectionError",
    "EngineDeadlineExceeded",
    "EngineError",
    "EngineResponseTooLarge",
    "EngineStatusError",
    "EngineStreamError",
    "EngineTimeout",
]


class EngineError(RuntimeError):
    """The engine could not be reached, answered with an error, or sent a malformed stream."""


class EngineConnectionError(EngineError):
    """No connection to the engine, or the connection broke, on every attempt."""


class EngineStatusError(EngineError):
    """The engine answered with an HTTP error: a 4xx at once, a 5xx/429 after the last attempt.

    ``status`` is the HTTP status; ``retry_after`` the server's ``Retry-After`` in seconds, if any.
    """

    def __init__(self, message: str, *, status: int, retry_after: float | None = None) -> None:
        super().__init__(message)
        self.status = status
        self.retry_after = retry_after

    def __reduce__(self) -> tuple[object, ...]:
        return (_rebuild_status_error, (str(self), self.status, self.retry_after))


def _rebuild_status_error(message: str, status: int, retry_after: float | None) -> EngineStatusError:
    return EngineStatusError(message, status=status, retry_after=retry_after)


class EngineStreamError(EngineError):
    """A malformed answer (not SSE, not JSON, cut short) or an error event inside the stream."""


class EngineTimeout(EngineError, TimeoutError):
    """One read waited longer than the client's ``timeout``."""


class EngineDeadlineExceeded(EngineTimeout):
    """The call's total deadline (``total_timeout``, retries and waits included) passed."""


class EngineResponseTooLarge(EngineError):
    """The answer exceeded ``max_response_bytes`` (e.g. a server ignoring ``max_tokens``)."""
