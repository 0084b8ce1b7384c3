"""What can go wrong talking to an engine or starting one: the engine side's one error tree. Every error
the client, a managed server's ``start()`` or the KV-event decoder raises for an engine fault is an
:class:`EngineError` (a :class:`~cp_memory.core.errors.CPMemoryError`); the subclasses say which kind, so a
caller can tell a dead server from a bad answer or a bound that was hit. Messages name the request (method
and URL), the attempt count where retries happened, and never carry a secret (API keys are redacted, see
:mod:`cp_memory.engine.redact`). Every class is exported by :mod:`cp_memory.engine` but
:class:`RetryableStatus`, which never leaves the client's retry loop."""

from __future__ import annotations

from ..core.errors import CPMemoryError

__all__ = [
    "EngineConnectionError",
    "EngineDeadlineExceeded",
    "EngineError",
    "EngineResponseTooLarge",
    "EngineStatusError",
    "EngineStreamError",
    "EngineTimeout",
    "LlamaServerNotFound",
    "MalformedEvents",
    "RetryableStatus",
    "SGLangRouterUnavailable",
    "SGLangUnavailable",
    "ServerStartError",
    "VLLMModelError",
    "VLLMUnavailable",
]


class EngineError(CPMemoryError, RuntimeError):
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


class RetryableStatus(EngineError):
    """A 5xx / 429 answer: worth another attempt. Raised and caught inside the client's retry loop, which
    turns the last one into an :class:`EngineStatusError`; a caller never sees it."""

    def __init__(self, status: int, detail: str, retry_after: float | None) -> None:
        super().__init__(f"HTTP {status}: {detail}")
        self.status = status
        self.detail = detail
        self.retry_after = retry_after


class MalformedEvents(EngineError, ValueError):
    """A message of the feed is not a KV-event batch (an engine fault: an ``EngineError``; a ``ValueError``
    for callers of the decoder that catch bad input as such)."""


class ServerStartError(EngineError):
    """The engine process exited or never became healthy."""


class VLLMUnavailable(ServerStartError):
    """vLLM is not installed in the interpreter that would run it."""


class VLLMModelError(ServerStartError, ValueError):
    """The model directory cannot be served (missing, no ``config.json``, no tokenizer)."""


class SGLangUnavailable(ServerStartError):
    """sglang is not installed (or no GPU is visible) in the interpreter that would run it."""


class SGLangRouterUnavailable(ServerStartError):
    """The ``sglang-router`` package is not installed in the interpreter that would run it."""


class LlamaServerNotFound(EngineError, FileNotFoundError):
    """No usable ``llama-server`` binary."""
