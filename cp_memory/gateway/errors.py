"""What the gateway's upstream side raises inside the app (:class:`UpstreamError` and its kinds, each a
:class:`~cp_memory.core.errors.CPMemoryError`). None reaches a client as an exception: the app answers each
one in the gateway's error shape (502 / 504, :func:`cp_memory.gateway.upstream.error_body`)."""

from __future__ import annotations

from ..core.errors import CPMemoryError

__all__ = ["UpstreamBroken", "UpstreamError", "UpstreamTimeout", "UpstreamUnreachable"]


class UpstreamError(CPMemoryError):
    """The upstream failed a forwarded request (the HTTP library's own error is ``__cause__``)."""


class UpstreamTimeout(UpstreamError):
    """The upstream did not connect or answer within the configured time (a 504)."""


class UpstreamUnreachable(UpstreamError):
    """The upstream could not be reached (refused, reset, DNS, TLS) before it answered (a 502)."""


class UpstreamBroken(UpstreamError):
    """The upstream's answer broke off while it was being read (a 502, or a stream that ends early)."""
