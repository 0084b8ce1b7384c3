"""The drop-in part of the wrappers: a subclass of the mem0 class that forwards everything it does not own.

A wrapper *is* a ``mem0.Memory`` (``AsyncMemory``, ``MemoryClient``...) for ``isinstance`` checks and type
hints, but it never runs mem0's ``__init__``: every attribute read, write and delete that is not one of the
wrapper's own names goes to the wrapped instance, so ``wrapper.embedding_model = x`` reaches mem0 and
``wrapper.add`` *is* mem0's bound method (same signature, same docstring, same behaviour). Writing one
of the wrapper's own names (``wrapper.search = traced(wrapper.search)``) sets it on the wrapper instance,
as on any Python object, so instrumentation wraps the wrapper's method and never loops through mem0.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable
from typing import Any, TypeVar

__all__ = ["ForwardingProxy", "retrying", "transient_errors", "with_conversation"]

logger = logging.getLogger(__name__)

F = TypeVar("F", bound=Callable[..., Any])

#: the wrapper's own public names (everything else is mem0's)
OWN_NAMES = frozenset(
    {
        "search",
        "commit",
        "rollback",
        "acommit",
        "arollback",
        "sending",
        "index_for",
        "save",
        "close",
        "delete_all",
        "reset",
        "forget_conversation",
        "follow_engine",
        "savings",
        "savings_account",
        "scopes",
        "wrapped",
        "cp_config",
        "deduplicator",
        "from_config",
        "__enter__",
        "__exit__",
        "__aenter__",
        "__aexit__",
    }
)


class ForwardingProxy:
    """Attribute access forwarding. Subclasses list extra own names in ``_OWN``."""

    _OWN: frozenset[str] = OWN_NAMES

    def _cp_owns(self, name: str) -> bool:
        """``name`` is the wrapper's: its state (``_cp_*``), a dunder, or one of its own methods/properties."""
        return name.startswith("_cp_") or (name.startswith("__") and name.endswith("__")) or name in type(self)._OWN

    def __getattribute__(self, name: str) -> Any:
        if ForwardingProxy._cp_owns(self, name):
            return object.__getattribute__(self, name)
        return getattr(object.__getattribute__(self, "_cp_wrapped"), name)

    def __setattr__(self, name: str, value: Any) -> None:
        # an own name stays on the wrapper: ``w.search = traced(w.search)`` (hand-written tracing, wrapt,
        # OpenTelemetry) must not reach mem0, whose ``search`` the wrapper's own calls (that would recurse)
        if ForwardingProxy._cp_owns(self, name):
            object.__setattr__(self, name, value)
        else:
            setattr(object.__getattribute__(self, "_cp_wrapped"), name, value)

    def __delattr__(self, name: str) -> None:
        if ForwardingProxy._cp_owns(self, name):
            object.__delattr__(self, name)
        else:
            delattr(object.__getattribute__(self, "_cp_wrapped"), name)

    def __dir__(self) -> list[str]:
        wrapped = object.__getattribute__(self, "_cp_wrapped")
        own = {n for n in type(self)._OWN if hasattr(type(self), n)}  # names this class really has
        return sorted(set(dir(wrapped)) | own)

    def __repr__(self) -> str:
        wrapped = object.__getattribute__(self, "_cp_wrapped")
        return f"{type(self).__name__}({wrapped!r})"


_CONVERSATION_DOC = """

ContextPilot (cp_memory) adds one keyword argument:

    conversation_id (str, optional): multi-turn dedup. Memories this conversation already sent (committed
        turns) are left out of ``results`` and listed in ``context_pilot["sent"]`` with the location
        annotation the rendered context carries instead; mem0 is asked for that many more results, so
        ``results`` still holds up to ``top_k`` fresh memories. Commit the turn once its prompt was sent
        (``wrapper.commit(response)`` / ``with wrapper.sending(response): ...``).

Everything else is passed to mem0 unchanged. The response is mem0's, with ``results`` in the aligned
(prefix-cache-friendly) order (``results_order="mem0"`` keeps mem0's order), each result gaining
``rank`` (its 0-based mem0 rank), plus ``context_pilot`` (see cp_memory.memory.ContextPilotInfo).
"""


def with_conversation(mem0_method: Callable[..., Any]) -> Callable[[F], F]:
    """Give ``search`` mem0's signature plus ``conversation_id`` (keyword-only) and mem0's docstring."""
    sig = inspect.signature(mem0_method)

    def decorate(fn: F) -> F:
        params = list(sig.parameters.values())
        extra = inspect.Parameter(
            "conversation_id", inspect.Parameter.KEYWORD_ONLY, default=None, annotation="str | None"
        )
        at = next((i for i, p in enumerate(params) if p.kind is inspect.Parameter.VAR_KEYWORD), len(params))
        params.insert(at, extra)
        fn.__signature__ = sig.replace(parameters=params)  # type: ignore[attr-defined]
        fn.__doc__ = (inspect.getdoc(mem0_method) or "") + _CONVERSATION_DOC
        return fn

    return decorate


def transient_errors() -> tuple[type[BaseException], ...]:
    """Failures of a mem0 call worth retrying: network, timeouts, rate limits. Validation errors are not."""
    errors: list[type[BaseException]] = [ConnectionError, TimeoutError]
    try:
        from mem0.exceptions import NetworkError, RateLimitError

        errors += [NetworkError, RateLimitError]
    except ImportError:  # pragma: no cover
        pass
    try:
        import httpx

        errors.append(httpx.TransportError)
    except ImportError:  # pragma: no cover
        pass
    return tuple(errors)


def retrying(
    fn: Callable[..., Any], attempts: int, wait_s: float, retry_on: tuple[type[BaseException], ...]
) -> Callable[..., Any]:
    """``fn`` with bounded tenacity retries (works for sync and async callables alike)."""
    from tenacity import (
        before_sleep_log,
        retry,
        retry_if_exception_type,
        stop_after_attempt,
        wait_exponential,
    )

    return retry(
        stop=stop_after_attempt(attempts),
        wait=wait_exponential(multiplier=wait_s, max=2.0),
        retry=retry_if_exception_type(retry_on),
        reraise=True,
        before_sleep=before_sleep_log(logger, logging.WARNING),
    )(fn)
