"""The upstream side: one ``httpx.AsyncClient``, the headers that cross, the errors a client sees.

Request headers cross unchanged except hop-by-hop ones, ``host``, ``content-length`` (recomputed), the
gateway's own ``x-cp-*`` headers and ``accept-encoding`` (the gateway asks for plain bytes so it can read
usage; the client still gets the whole answer). The client's key crosses as it came and is never kept.
Response headers cross unchanged except hop-by-hop ones and ``content-length``/``content-encoding``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import httpx

from .config import GatewayConfig

__all__ = ["error_body", "make_client", "request_headers", "response_headers"]

_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "trailers",
        "transfer-encoding",
        "upgrade",
    }
)
_DROP_REQUEST = _HOP | {"host", "content-length", "accept-encoding"}
_DROP_RESPONSE = _HOP | {"content-length", "content-encoding"}


def make_client(config: GatewayConfig) -> httpx.AsyncClient:
    timeout = httpx.Timeout(
        connect=config.connect_timeout_s,
        read=config.read_timeout_s,
        write=config.body_timeout_s,
        pool=config.connect_timeout_s,
    )
    limits = httpx.Limits(max_connections=config.max_concurrency, max_keepalive_connections=32)
    return httpx.AsyncClient(base_url=config.upstream_base, timeout=timeout, limits=limits, follow_redirects=False)


def request_headers(headers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    out = [(k, v) for k, v in headers if k.lower() not in _DROP_REQUEST and not k.lower().startswith("x-cp-")]
    out.append(("accept-encoding", "identity"))
    return out


def response_headers(headers: Mapping[str, str] | httpx.Headers) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k.lower() not in _DROP_RESPONSE}


def error_body(kind: str, message: str) -> dict[str, object]:
    """The gateway's own error answers: the shape both OpenAI's and Anthropic's SDKs read a message from."""
    return {"type": "error", "error": {"type": kind, "message": message}}
