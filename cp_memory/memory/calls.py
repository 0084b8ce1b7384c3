"""The caller's ``search`` arguments, read without changing them, for mem0's two call shapes.

* the open-source ``Memory``/``AsyncMemory``: ``search(query, *, top_k=20, filters=None, threshold=...,
  show_expired=False, ...)``;
* the hosted ``MemoryClient``/``AsyncMemoryClient``: ``search(query, options=None, **kwargs)`` where
  ``options`` is a ``SearchMemoryOptions`` and keyword arguments win over it.

:class:`SearchCall` keeps the exact arguments and knows the few values the pipeline needs (filters, top_k,
what narrows the result set). :meth:`SearchCall.with_top_k` is the only change ever made to a call: a
larger ``top_k`` when multi-turn dedup must make up for memories already sent.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..core.scope import Scope, scope_of

__all__ = ["SearchCall", "hosted_call", "local_call", "valid_top_k"]

#: hosted ``search`` options that narrow the result set (part of the scope; extras are refused with them)
_HOSTED_NARROWING = ("categories", "metadata", "show_expired", "latest_only", "fields")


def valid_top_k(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


@dataclass(frozen=True)
class SearchCall:
    """One ``search`` call as the caller made it."""

    query: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    filters: Mapping[str, Any] | None
    top_k: int | None  # None: invalid or unknown (mem0 validates; no over-fetch)
    scope: Scope | None
    show_expired: bool = False
    extras_allowed: bool = True  # False: arguments narrow results in ways extras cannot be checked for
    top_k_key: str = "top_k"
    meta: dict[str, Any] = field(default_factory=dict)

    def with_top_k(self, top_k: int | None) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Positional and keyword arguments for mem0: the caller's, with ``top_k`` replaced if given."""
        if top_k is None or top_k == self.top_k:
            return (self.query, *self.args), dict(self.kwargs)
        return (self.query, *self.args), {**self.kwargs, self.top_k_key: top_k}


def local_call(query: Any, args: tuple[Any, ...], kwargs: dict[str, Any], default_top_k: int | None) -> SearchCall:
    """``Memory.search(query, *, top_k=..., filters=..., ...)``: keyword-only after the query (positional
    extras are passed on for mem0 to refuse)."""
    filters = kwargs.get("filters")
    top_k = valid_top_k(kwargs.get("top_k", default_top_k))
    show_expired = kwargs.get("show_expired") is True
    return SearchCall(
        query=query,
        args=tuple(args),
        kwargs=dict(kwargs),
        filters=filters if isinstance(filters, Mapping) else None,
        top_k=top_k,
        scope=scope_of(filters) if isinstance(filters, Mapping) else None,
        show_expired=show_expired,
    )


def hosted_call(query: Any, args: tuple[Any, ...], kwargs: dict[str, Any], default_top_k: int | None) -> SearchCall:
    """``MemoryClient.search(query, options=None, **kwargs)``: kwargs win over ``options`` (as in mem0)."""
    options = args[0] if args else kwargs.get("options")
    merged: dict[str, Any] = {}
    if options is not None:
        dump = getattr(options, "model_dump", None)
        if callable(dump):
            merged.update(dump(exclude_unset=True))
        elif isinstance(options, Mapping):
            merged.update(options)
    merged.update({k: v for k, v in kwargs.items() if k != "options"})
    filters = merged.get("filters")
    top_k = valid_top_k(merged.get("top_k", default_top_k))
    narrowing = {k: merged[k] for k in _HOSTED_NARROWING if merged.get(k) is not None}
    scope = scope_of(filters, **narrowing) if isinstance(filters, Mapping) else None
    return SearchCall(
        query=query,
        args=tuple(args),
        kwargs=dict(kwargs),
        filters=filters if isinstance(filters, Mapping) else None,
        top_k=top_k,
        scope=scope,
        show_expired=merged.get("show_expired") is True,
        extras_allowed=not narrowing,
    )
