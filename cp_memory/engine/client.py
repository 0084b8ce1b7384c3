"""Streaming client for OpenAI-compatible engines (llama.cpp server, SGLang, vLLM).

Every request is streamed (SSE) so the client can time the first generated token (TTFT) itself,
and asks for usage in the stream (``stream_options: {include_usage: true}``) so the engine can say
how many prompt tokens it served from its prefix cache:

* ``usage.prompt_tokens_details.cached_tokens`` — llama.cpp (always), SGLang (with
  ``--enable-cache-report``), vLLM (with ``--enable-prompt-tokens-details``);
* fallback: llama.cpp's ``timings.cache_n`` / ``timings.prompt_n`` in the final chunk.

The request id is sent as ``rid`` in the body (SGLang uses it as its internal request id; llama.cpp
and vLLM ignore unknown body fields) and as the ``X-Request-Id`` header.

Connection errors and 5xx/429 answers are retried a bounded number of times with exponential
backoff (tenacity), or after the server's ``Retry-After`` when that is longer; after that, or on a
4xx answer, a malformed stream, or an error event in the stream, an :class:`EngineError` with a
clear message is raised.

Every call is bounded: ``timeout`` caps each wait (connect, a read), ``total_timeout`` the whole
call — connect, the status line and headers, the body, retries and their waits (default
``timeout * (max_retries + 1)``; a retry that would start past it is not made) — and
``max_response_bytes`` the bytes of one answer, decoded and on the wire (default 16 MiB; an error
answer is read up to 64 KiB only). Hitting a bound raises :class:`EngineDeadlineExceeded` (a
:class:`TimeoutError`) or :class:`EngineResponseTooLarge`. How the deadline reaches a wait inside
httpx (whose read timeout restarts with every byte): :mod:`.deadline`; how a compressed answer
is capped: :mod:`.answers`. ``clock=`` (a :class:`~.deadline.Clock`, default ``time.monotonic``
and real sleeps) is what the deadline is measured on and the waits between attempts sleep on.

Layout: :mod:`.sse` parses the stream, :mod:`.transport` plans requests, attempts and errors,
:mod:`.admin` holds the admin endpoints as flows; the two clients below only do the I/O, the same
lines in both, one with ``await``.
"""

from __future__ import annotations

import logging
import math
import uuid
from collections.abc import Generator, Mapping, Sequence
from typing import Any, TypeVar
from urllib.parse import unquote, urlsplit, urlunsplit

import httpx
from tenacity import AsyncRetrying, Retrying

from ..core.drive import adrive_flow, drive_flow
from . import admin
from .deadline import MONOTONIC, CancelAtDeadline, Clock, SocketDeadlines
from .errors import (
    EngineConnectionError,
    EngineDeadlineExceeded,
    EngineError,
    EngineResponseTooLarge,
    EngineStatusError,
    EngineStreamError,
    EngineTimeout,
)
from .sse import CompletionResult
from .transport import DEFAULT_MAX_RESPONSE_BYTES, Call, ClientConfig, Reply, Request

logger = logging.getLogger(__name__)

__all__ = [
    "AsyncEngineClient",
    "CompletionResult",
    "EngineClient",
    "EngineConnectionError",
    "EngineDeadlineExceeded",
    "EngineError",
    "EngineResponseTooLarge",
    "EngineStatusError",
    "EngineStreamError",
    "EngineTimeout",
]

T = TypeVar("T")


class _ClientBase:
    """Configuration and request planning, shared by the sync and async clients."""

    def __init__(
        self,
        base_url: str,
        *,
        model: str | None = None,
        api_key: str | None = None,
        timeout: float = 120.0,
        max_retries: int = 3,
        send_request_id: bool = True,
        extra_body: Mapping[str, Any] | None = None,
        retry_wait_s: float = 0.25,
        retry_wait_max_s: float = 4.0,
        total_timeout: float | None = None,
        max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES,
        clock: Clock = MONOTONIC,
    ) -> None:
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        if not 0 < timeout < math.inf:
            raise ValueError(f"timeout must be a positive number of seconds, got {timeout!r}")
        if total_timeout is None:
            total_timeout = timeout * (max_retries + 1)
        if not total_timeout > 0:  # math.inf: no deadline for the whole call
            raise ValueError(f"total_timeout must be > 0 (or None for the default), got {total_timeout!r}")
        if max_response_bytes <= 0:
            raise ValueError(f"max_response_bytes must be > 0, got {max_response_bytes!r}")
        base = base_url.rstrip("/").removesuffix("/v1")
        parts = urlsplit(base)
        secrets = [api_key] if api_key else []
        self._auth: tuple[str, str] | None = None
        if parts.username is not None or parts.password is not None:
            # credentials in the URL become basic auth: httpx logs request URLs in the clear
            self._auth = (unquote(parts.username or ""), unquote(parts.password or ""))
            secrets += [s for s in (parts.password, self._auth[1]) if s]
            base = urlunsplit(parts._replace(netloc=parts.netloc.rsplit("@", 1)[1]))
        self.base_url = base
        self.model = model
        self.timeout = timeout
        self.total_timeout = total_timeout
        self.max_response_bytes = max_response_bytes
        self.max_retries = max_retries
        self.send_request_id = send_request_id
        self.extra_body = dict(extra_body or {})
        # identity: nothing to inflate (a server that compresses anyway is decoded under the caps)
        headers = {"Accept": "text/event-stream", "Accept-Encoding": "identity"}
        headers.update({"Authorization": f"Bearer {api_key}"} if api_key else {})
        self._config = ClientConfig(
            base_url=base,
            headers=headers,
            timeout=timeout,
            total_timeout=total_timeout,
            max_retries=max_retries,
            retry_wait_s=retry_wait_s,
            retry_wait_max_s=retry_wait_max_s,
            max_response_bytes=max_response_bytes,
            secrets=tuple(secrets),
            clock=clock,
        )
        self._http = self._make_http()

    def _make_http(self) -> Any:
        raise NotImplementedError

    def __repr__(self) -> str:
        key = "***" if "Authorization" in self._config.headers else None
        return (
            f"{type(self).__name__}(base_url={self.base_url!r}, model={self.model!r}, "
            f"api_key={key!r}, timeout={self.timeout:g}, total_timeout="
            f"{self.total_timeout:g})"
        )

    def _completion(
        self,
        key: str,
        payload: Any,
        *,
        max_tokens: int,
        temperature: float,
        request_id: str | None,
        stop: str | Sequence[str] | None,
    ) -> Call[CompletionResult]:
        rid = str(request_id) if request_id is not None else uuid.uuid4().hex
        body: dict[str, Any] = {
            key: payload,
            "max_tokens": max_tokens,
            "temperature": temperature,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if self.model is not None:
            body["model"] = self.model
        if stop is not None:
            body["stop"] = [stop] if isinstance(stop, str) else list(stop)
        if self.send_request_id:
            body["rid"] = rid
        body.update(self.extra_body)
        chat = key == "messages"
        request = Request(
            "POST",
            "/v1/chat/completions" if chat else "/v1/completions",
            json=body,
            headers={"X-Request-Id": rid} if self.send_request_id else {},
            chat=chat,
            request_id=rid,
        )
        return Call.completion(request, self._config)

    def _admin(self, request: Request) -> Call[Reply]:
        return Call.admin(request, self._config)


class EngineClient(_ClientBase):
    """Synchronous streaming client; thread-safe (one pooled :class:`httpx.Client`).

    ``base_url`` is the server root (``http://127.0.0.1:8080``; a trailing ``/v1`` is accepted).
    ``max_retries`` extra attempts follow a failed connection or a 5xx/429 answer.
    ``send_request_id=False`` stops sending ``rid`` (for strict servers such as api.openai.com);
    ``extra_body`` is merged into every completion request body (e.g. ``{"ignore_eos": True}``).
    ``timeout`` bounds each wait, ``total_timeout`` each call (default ``timeout * (max_retries
    + 1)``), ``max_response_bytes`` each answer (default 16 MiB); ``clock`` is the
    :class:`~.deadline.Clock` they run on (default: ``time.monotonic``, real sleeps): see the
    module docstring. Every socket operation of a call is held to its deadline
    (:class:`~.deadline.SocketDeadlines`).
    """

    _http: httpx.Client

    def _make_http(self) -> httpx.Client:
        http = httpx.Client(base_url=self.base_url, auth=self._auth)
        self._sockets = SocketDeadlines()
        if not self._sockets.install(http):
            logger.warning(
                "httpx %s keeps its network backends out of reach: total_timeout bounds the "
                "answer's body, not the wait for its headers (each wait is still bounded by timeout)",
                httpx.__version__,
            )
        return http

    def complete(
        self,
        prompt: str,
        *,
        max_tokens: int = 64,
        temperature: float = 0.0,
        request_id: str | None = None,
        stop: str | Sequence[str] | None = None,
    ) -> CompletionResult:
        """Stream ``POST /v1/completions`` for a raw text prompt."""
        return self._send(
            self._completion(
                "prompt", prompt, max_tokens=max_tokens, temperature=temperature, request_id=request_id, stop=stop
            )
        )

    def chat(
        self,
        messages: list[dict[str, Any]],
        *,
        max_tokens: int = 64,
        temperature: float = 0.0,
        request_id: str | None = None,
        stop: str | Sequence[str] | None = None,
    ) -> CompletionResult:
        """Stream ``POST /v1/chat/completions``."""
        return self._send(
            self._completion(
                "messages", messages, max_tokens=max_tokens, temperature=temperature, request_id=request_id, stop=stop
            )
        )

    def flush_cache(self) -> bool:
        """Drop the engine's prefix cache; ``True`` only when the engine confirms a full flush
        (SGLang). llama.cpp: slots are erased but ``--cache-ram`` cannot be, so ``False``; restart
        the server (:meth:`LlamaServer.restart`) for a cold cache. See :func:`.admin.flush_cache`."""
        return self._run(admin.flush_cache())

    def slots(self) -> list[dict[str, Any]] | None:
        """llama.cpp's slot states (``GET /slots``), ``None`` where unsupported."""
        return self._run(admin.slots())

    def tokenize(self, text: str) -> list[int] | None:
        """Token ids of ``text`` via llama.cpp's ``POST /tokenize`` (``None`` if unsupported)."""
        return self._run(admin.tokenize(text))

    def metrics(self) -> str | None:
        """Prometheus text of ``GET /metrics``, ``None`` where off or unsupported."""
        return self._run(admin.metrics())

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> EngineClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the I/O ---------------------------------------------------------------------------
    def _run(self, flow: Generator[Request, Reply, T]) -> T:
        return drive_flow(flow, lambda request: self._send(self._admin(request)), throws=())

    def _send(self, call: Call[T]) -> T:
        result: T = Retrying(sleep=self._config.clock.sleep, **call.retrying())(self._attempt, call)
        return result

    def _attempt(self, call: Call[T]) -> T:
        with (
            call.attempt(),
            self._sockets.under(call.deadline),
            self._http.stream(**call.httpx_kwargs()) as response,
        ):
            handler = call.on_response(response.status_code, response.headers)
            for chunk in response.iter_raw():
                if handler.feed(chunk):
                    break
            return handler.finish()


class AsyncEngineClient(_ClientBase):
    """Asynchronous :class:`EngineClient` (one pooled :class:`httpx.AsyncClient`): the same
    methods, to be awaited. Each attempt runs in a cancel scope that expires at the call's
    deadline (:class:`~.deadline.CancelAtDeadline`); the waits between attempts await
    ``clock.asleep``."""

    _http: httpx.AsyncClient

    def _make_http(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.base_url, auth=self._auth)

    async def complete(
        self,
        prompt: str,
        *,
        max_tokens: int = 64,
        temperature: float = 0.0,
        request_id: str | None = None,
        stop: str | Sequence[str] | None = None,
    ) -> CompletionResult:
        """See :meth:`EngineClient.complete`."""
        return await self._send(
            self._completion(
                "prompt", prompt, max_tokens=max_tokens, temperature=temperature, request_id=request_id, stop=stop
            )
        )

    async def chat(
        self,
        messages: list[dict[str, Any]],
        *,
        max_tokens: int = 64,
        temperature: float = 0.0,
        request_id: str | None = None,
        stop: str | Sequence[str] | None = None,
    ) -> CompletionResult:
        """See :meth:`EngineClient.chat`."""
        return await self._send(
            self._completion(
                "messages", messages, max_tokens=max_tokens, temperature=temperature, request_id=request_id, stop=stop
            )
        )

    async def flush_cache(self) -> bool:
        """See :meth:`EngineClient.flush_cache`."""
        return await self._run(admin.flush_cache())

    async def slots(self) -> list[dict[str, Any]] | None:
        """See :meth:`EngineClient.slots`."""
        return await self._run(admin.slots())

    async def tokenize(self, text: str) -> list[int] | None:
        """See :meth:`EngineClient.tokenize`."""
        return await self._run(admin.tokenize(text))

    async def metrics(self) -> str | None:
        """See :meth:`EngineClient.metrics`."""
        return await self._run(admin.metrics())

    async def close(self) -> None:
        await self._http.aclose()

    async def aclose(self) -> None:
        await self.close()

    async def __aenter__(self) -> AsyncEngineClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- the I/O ---------------------------------------------------------------------------
    async def _run(self, flow: Generator[Request, Reply, T]) -> T:
        return await adrive_flow(flow, lambda request: self._send(self._admin(request)), throws=())

    async def _send(self, call: Call[T]) -> T:
        result: T = await AsyncRetrying(sleep=self._config.clock.asleep, **call.retrying())(self._attempt, call)
        return result

    async def _attempt(self, call: Call[T]) -> T:
        async with (
            call.attempt(),
            CancelAtDeadline(call.deadline),
            self._http.stream(**call.httpx_kwargs()) as response,
        ):
            handler = call.on_response(response.status_code, response.headers)
            async for chunk in response.aiter_raw():
                if handler.feed(chunk):
                    break
            return handler.finish()
