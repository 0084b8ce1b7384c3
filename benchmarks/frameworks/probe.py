"""What the engine received and reported, recorded under a framework's own OpenAI client.

Every framework here talks to the engine through the ``openai`` SDK, which takes an ``httpx`` client. The
probe is an httpx transport wrapped around the real one: it keeps each chat-completion request body (the
prompt exactly as the framework built it) and reads the response as it streams by, without changing it:

* ``ttft_s``: from handing the request to the transport to the first streamed chunk carrying generated
  text or a tool call (measured here, on the client; ``None`` for a non-streamed answer);
* ``prompt_tokens`` / ``cached_tokens``: the engine's ``usage`` (``prompt_tokens_details.cached_tokens``),
  else llama.cpp's ``timings`` (``cache_n`` + ``prompt_n``);
* ``server_prompt_ms``: llama.cpp's own prefill time (``timings.prompt_ms``).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

__all__ = ["EngineProbe", "Exchange"]


@dataclass
class Exchange:
    """One chat-completion request and what the engine said about it."""

    path: str
    body: dict[str, Any]
    status: int = 0
    ttft_s: float | None = None
    total_s: float | None = None
    prompt_tokens: int | None = None
    cached_tokens: int | None = None
    completion_tokens: int | None = None
    server_prompt_ms: float | None = None
    text: str = ""
    streamed: bool = False
    _t0: float = field(default=0.0, repr=False)

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.body.get("messages") or [])

    @property
    def prefilled(self) -> int | None:
        """Prompt tokens the engine computed (not served from its prefix cache)."""
        if self.prompt_tokens is None or self.cached_tokens is None:
            return None
        return self.prompt_tokens - self.cached_tokens


def _int(v: Any) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


class _Reader:
    """Parses a streamed (SSE) or plain JSON chat-completion answer as its bytes go by."""

    def __init__(self, ex: Exchange) -> None:
        self.ex = ex
        self.buf = b""
        self.parts: list[str] = []
        self.usage: dict[str, Any] = {}
        self.timings: dict[str, Any] = {}

    def feed(self, chunk: bytes) -> None:
        self.buf += chunk
        if not self.ex.streamed and self.buf.lstrip()[:5] == b"data:":
            self.ex.streamed = True
        if not self.ex.streamed:
            return
        while b"\n" in self.buf:
            line, self.buf = self.buf.split(b"\n", 1)
            self._line(line.strip())

    def _line(self, line: bytes) -> None:
        if not line.startswith(b"data:"):
            return
        data = line[5:].strip()
        if not data or data == b"[DONE]":
            return
        try:
            event = json.loads(data)
        except ValueError:
            return
        self._event(event, streamed=True)

    def _event(self, event: Any, *, streamed: bool) -> None:
        if not isinstance(event, dict):
            return
        for choice in event.get("choices") or []:
            part = (choice.get("delta") if streamed else choice.get("message")) or {}
            text = part.get("content") or part.get("reasoning_content")
            if (text or part.get("tool_calls")) and streamed and self.ex.ttft_s is None:
                self.ex.ttft_s = time.perf_counter() - self.ex._t0
            if isinstance(text, str):
                self.parts.append(text)
        if isinstance(event.get("usage"), dict):
            self.usage = event["usage"]
        if isinstance(event.get("timings"), dict):
            self.timings = event["timings"]

    def close(self) -> None:
        ex = self.ex
        ex.total_s = time.perf_counter() - ex._t0
        if ex.streamed:
            if self.buf.strip():
                self._line(self.buf.strip())
        else:
            try:
                self._event(json.loads(self.buf or b"null"), streamed=False)
            except ValueError:
                pass
        ex.text = "".join(self.parts)
        usage, timings = self.usage, self.timings
        ex.prompt_tokens = _int(usage.get("prompt_tokens"))
        ex.completion_tokens = _int(usage.get("completion_tokens"))
        details = usage.get("prompt_tokens_details")
        ex.cached_tokens = _int(details.get("cached_tokens")) if isinstance(details, dict) else None
        cache_n, prompt_n = _int(timings.get("cache_n")), _int(timings.get("prompt_n"))
        if ex.cached_tokens is None and cache_n is not None:
            ex.cached_tokens = cache_n
        if ex.prompt_tokens is None and cache_n is not None and prompt_n is not None:
            ex.prompt_tokens = cache_n + prompt_n
        ms = timings.get("prompt_ms")
        ex.server_prompt_ms = float(ms) if isinstance(ms, (int, float)) and not isinstance(ms, bool) else None


class _Stream(httpx.SyncByteStream, httpx.AsyncByteStream):
    """The response's bytes on their way to the framework (sync or async), fed to the reader as they pass."""

    def __init__(self, inner: Any, reader: _Reader, done: Callable[[_Reader], None]) -> None:
        self.inner, self.reader, self.done = inner, reader, done

    def __iter__(self) -> Iterator[bytes]:
        for chunk in self.inner:
            self.reader.feed(chunk)
            yield chunk

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self.inner:
            self.reader.feed(chunk)
            yield chunk

    def close(self) -> None:
        try:
            self.inner.close()
        finally:
            self.done(self.reader)

    async def aclose(self) -> None:
        try:
            await self.inner.aclose()
        finally:
            self.done(self.reader)


class EngineProbe:
    """Records every ``.../chat/completions`` exchange that goes through :meth:`client`/:meth:`async_client`.

    >>> probe = EngineProbe()
    >>> llm = ChatOpenAI(base_url=url, api_key="none", http_client=probe.client())   # doctest: +SKIP
    >>> llm.invoke("hi"); probe.last.cached_tokens                                    # doctest: +SKIP
    """

    def __init__(self) -> None:
        self.exchanges: list[Exchange] = []
        self._lock = threading.Lock()

    @property
    def last(self) -> Exchange:
        if not self.exchanges:
            raise LookupError("no chat-completion request went through the probe yet")
        return self.exchanges[-1]

    def mark(self) -> int:
        """Index to pass to :meth:`since` (exchanges recorded after this call)."""
        return len(self.exchanges)

    def since(self, mark: int) -> list[Exchange]:
        return self.exchanges[mark:]

    def _start(self, request: httpx.Request) -> Exchange | None:
        if not request.url.path.endswith("/chat/completions"):
            return None
        try:
            body = json.loads(request.content or b"{}")
        except ValueError:
            body = {}
        ex = Exchange(path=request.url.path, body=body if isinstance(body, dict) else {})
        ex._t0 = time.perf_counter()
        return ex

    def _done(self, reader: _Reader) -> None:
        if reader.ex.total_s is not None:
            return
        reader.close()
        with self._lock:
            self.exchanges.append(reader.ex)

    def client(self, **kwargs: Any) -> httpx.Client:
        """An ``httpx.Client`` for the framework's OpenAI client (``http_client=``)."""
        return httpx.Client(transport=_Transport(self, httpx.HTTPTransport()), timeout=600, **kwargs)

    def async_client(self, **kwargs: Any) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=_Transport(self, httpx.AsyncHTTPTransport()), timeout=600, **kwargs)


class _Transport(httpx.BaseTransport, httpx.AsyncBaseTransport):
    """The real transport (sync or async) with every chat-completion exchange recorded by ``probe``."""

    def __init__(self, probe: EngineProbe, inner: Any) -> None:
        self.probe, self.inner = probe, inner

    def _recorded(self, ex: Exchange | None, response: httpx.Response) -> httpx.Response:
        if ex is None:
            return response
        ex.status = response.status_code
        stream = _Stream(response.stream, _Reader(ex), self.probe._done)
        return httpx.Response(
            response.status_code, headers=response.headers, stream=stream, extensions=response.extensions
        )

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        ex = self.probe._start(request)  # the clock starts before the request goes out
        return self._recorded(ex, self.inner.handle_request(request))

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        ex = self.probe._start(request)
        return self._recorded(ex, await self.inner.handle_async_request(request))

    def close(self) -> None:
        self.inner.close()

    async def aclose(self) -> None:
        await self.inner.aclose()
