"""The upstream side: one connection pool (aiohttp's client), the headers that cross, the errors a client sees.

Request headers cross unchanged except hop-by-hop ones, ``host``, ``content-length`` (recomputed), the
gateway's own ``x-cp-*`` headers and ``accept-encoding`` (the gateway asks for plain bytes so it can read
usage; the client still gets the whole answer). The client's key crosses as it came and is never kept.
Response headers cross unchanged except hop-by-hop ones and ``content-length``/``content-encoding``.

:class:`Upstream` is the app's one owner of upstream I/O: it sends a request (the path and query as the
client wrote them, after the configured base URL), hands back an :class:`Answer` whose body is read as it
arrives, and turns the HTTP library's failures into three errors of the gateway's own
(:mod:`cp_memory.gateway.errors`: a timeout or an unreachable upstream before an answer, a broken one while
reading it). aiohttp rather than httpx: the same request costs the proxy ~0.2 ms of CPU instead of ~0.7 ms
(its parser is C), a third of what the gateway spent per request before (docs/gateway.md, "The gateway's own
cost per request"). A proxy named by ``HTTP_PROXY`` / ``HTTPS_PROXY`` (and ``NO_PROXY``) at start is used as
httpx used it; TLS is verified against ``SSL_CERT_FILE`` or certifi's bundle. Bounds: ``connect_timeout_s``
to connect, ``read_timeout_s`` of silence while waiting for or reading an answer, ``max_concurrency``
connections at once.
"""

from __future__ import annotations

import asyncio
import os
import ssl
import urllib.request
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass

import aiohttp
from yarl import URL

from .config import GatewayConfig
from .errors import UpstreamBroken, UpstreamTimeout, UpstreamUnreachable

__all__ = ["Answer", "Upstream", "error_body", "request_headers", "response_headers"]


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


@dataclass
class Answer:
    """An upstream answer: status and headers at once, the body as it arrives (:meth:`chunks`)."""

    status_code: int
    headers: dict[str, str]
    _response: aiohttp.ClientResponse

    @property
    def is_success(self) -> bool:
        return 200 <= self.status_code < 300

    async def chunks(self) -> AsyncIterator[bytes]:
        """The body's bytes as they arrive (chunked transfer decoded, nothing decompressed)."""
        try:
            async for chunk in self._response.content.iter_any():
                yield chunk
        except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
            raise UpstreamBroken(type(exc).__name__) from exc

    async def aclose(self) -> None:
        """The connection back to the pool when the body was read whole, else closed (the upstream stops)."""
        self._response.release()


def _tls() -> ssl.SSLContext:
    """Certificates from ``SSL_CERT_FILE`` when set, else certifi's bundle (what httpx used), else the system's."""
    cafile = os.environ.get("SSL_CERT_FILE")
    if not cafile:
        try:
            import certifi

            cafile = certifi.where()
        except ImportError:
            cafile = None
    return ssl.create_default_context(cafile=cafile)


def _env_proxy(base: str) -> str | None:
    """``HTTP_PROXY`` / ``HTTPS_PROXY`` for the upstream's scheme unless ``NO_PROXY`` names its host, read once
    at start (aiohttp's ``trust_env`` would read them, and ``~/.netrc``, in a worker thread on every request)."""
    url = URL(base)
    if not url.host or urllib.request.proxy_bypass(url.host):
        return None
    return urllib.request.getproxies().get(url.scheme)


def _merged(raw: Iterable[tuple[bytes, bytes]]) -> dict[str, str]:
    """The answer's headers, names in lower case; a header repeated is one value, comma-separated."""
    out: dict[str, str] = {}
    for name, value in raw:
        k, v = name.decode("latin-1").lower(), value.decode("latin-1")
        out[k] = f"{out[k]}, {v}" if k in out else v
    return out


class Upstream:
    """The pool of connections to the configured upstream (opened in the app's lifespan, on its loop)."""

    def __init__(self, config: GatewayConfig) -> None:
        self.base = config.upstream_base.rstrip("/")
        self._timeout = aiohttp.ClientTimeout(
            total=None,
            connect=config.connect_timeout_s,
            sock_connect=config.connect_timeout_s,
            sock_read=config.read_timeout_s,
        )
        self._limit = config.max_concurrency
        self._proxy = _env_proxy(self.base)
        self._session: aiohttp.ClientSession | None = None

    async def open(self) -> None:
        connector = aiohttp.TCPConnector(limit=self._limit, limit_per_host=0, ttl_dns_cache=300, ssl=_tls())
        self._session = aiohttp.ClientSession(
            connector=connector,
            timeout=self._timeout,
            auto_decompress=False,
            cookie_jar=aiohttp.DummyCookieJar(),  # a proxy keeps no cookies: each client's go through as sent
        )

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def send(self, method: str, target: str, headers: list[tuple[str, str]], content: bytes) -> Answer:
        """``target`` (path and query, as the client sent them) after the base URL; the answer once its status
        and headers are in."""
        assert self._session is not None, "the app's lifespan did not run"
        url = URL(self.base + target, encoded=True)
        try:
            response = await self._session.request(
                method,
                url,
                data=content or None,
                headers=headers,
                allow_redirects=False,
                skip_auto_headers=("Content-Type",),
                proxy=self._proxy,
            )
        except asyncio.TimeoutError as exc:  # aiohttp's connect and read timeouts are TimeoutErrors too
            raise UpstreamTimeout(type(exc).__name__) from exc
        except aiohttp.ClientError as exc:
            raise UpstreamUnreachable(type(exc).__name__) from exc
        return Answer(response.status, _merged(response.raw_headers), response)


def request_headers(headers: Iterable[tuple[str, str]]) -> list[tuple[str, str]]:
    out = [(k, v) for k, v in headers if k.lower() not in _DROP_REQUEST and not k.lower().startswith("x-cp-")]
    out.append(("accept-encoding", "identity"))
    return out


def response_headers(headers: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in headers.items() if k.lower() not in _DROP_RESPONSE}


def error_body(kind: str, message: str) -> dict[str, object]:
    """The gateway's own error answers: the shape both OpenAI's and Anthropic's SDKs read a message from."""
    return {"type": "error", "error": {"type": kind, "message": message}}
