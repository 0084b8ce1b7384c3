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
backoff (tenacity); after that, or on a 4xx answer, a malformed stream, or an error event in the
stream, an :class:`EngineError` with a clear message is raised.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx
from tenacity import (
    AsyncRetrying,
    RetryError,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
)

logger = logging.getLogger(__name__)

__all__ = ["AsyncEngineClient", "CompletionResult", "EngineClient", "EngineError"]


class EngineError(RuntimeError):
    """The engine could not be reached, answered with an error, or sent a malformed stream."""


@dataclass(frozen=True)
class CompletionResult:
    """One streamed completion, timed on the client.

    ``ttft_s`` is the time from sending the request to the first streamed chunk carrying generated
    text (falls back to the first chunk with a choice when the model generated no text, e.g. an
    immediate end-of-sequence). ``cached_tokens`` is the number of prompt tokens the engine reused
    from its prefix cache, ``None`` when the engine does not report it. ``server_prompt_ms`` is the
    prefill time the engine itself reports (llama.cpp ``timings.prompt_ms``; ``None`` elsewhere):
    unlike ``ttft_s`` it excludes HTTP, queueing and client overhead, so it is the steadier number
    on a loaded machine.
    """

    text: str
    ttft_s: float
    total_s: float
    prompt_tokens: int | None
    cached_tokens: int | None
    completion_tokens: int | None
    request_id: str | None
    finish_reason: str | None
    server_prompt_ms: float | None = None

    @property
    def cache_hit_ratio(self) -> float | None:
        """``cached_tokens / prompt_tokens`` when both are known."""
        if self.cached_tokens is None or not self.prompt_tokens:
            return None
        return self.cached_tokens / self.prompt_tokens


# ---------------------------------------------------------------------------------------------
# shared, transport-independent pieces
# ---------------------------------------------------------------------------------------------


class _RetryableStatus(Exception):
    """A 5xx / 429 answer: worth another attempt."""

    def __init__(self, status: int, body: str) -> None:
        super().__init__(f"HTTP {status}: {body}")
        self.status = status
        self.body = body


_RETRYABLE_TRANSPORT = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.ReadError,
    httpx.WriteError,
    httpx.RemoteProtocolError,
    httpx.PoolTimeout,
)


def _is_retryable(exc: BaseException) -> bool:
    return isinstance(exc, (_RetryableStatus, *_RETRYABLE_TRANSPORT))


def _error_detail(body: str, limit: int = 500) -> str:
    """Pull the message out of an OpenAI-style / llama.cpp / SGLang error body."""
    try:
        data = json.loads(body)
    except ValueError:
        return body.strip()[:limit]
    if isinstance(data, dict):
        err = data.get("error", data)
        if isinstance(err, dict):
            msg = err.get("message") or err.get("detail") or err
            return str(msg)[:limit]
        if isinstance(err, str):
            return err[:limit]
        if "detail" in data:
            return str(data["detail"])[:limit]
    return body.strip()[:limit]


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


class _SSEAccumulator:
    """Parses SSE lines of an OpenAI-compatible completion stream and accumulates the result."""

    def __init__(self, url: str, t0: float, chat: bool) -> None:
        self.url = url
        self.t0 = t0
        self.chat = chat
        self.parts: list[str] = []
        self.ttft: float | None = None
        self.t_first_choice: float | None = None
        self.usage: dict[str, Any] | None = None
        self.timings: dict[str, Any] | None = None
        self.finish_reason: str | None = None
        self.done = False
        self.n_events = 0
        self._data: list[str] = []

    # -- SSE framing -----------------------------------------------------------------------
    def feed_line(self, line: str) -> None:
        if self.done:
            return
        if line == "":
            self._dispatch()
            return
        if line.startswith(":"):
            return  # SSE comment / keep-alive ping
        field, sep, value = line.partition(":")
        if not sep:
            raise self._malformed(f"line without a field name: {line[:200]!r}")
        if value.startswith(" "):
            value = value[1:]
        if field == "data":
            self._data.append(value)
        # other fields (event, id, retry, unknown) carry nothing we need: ignored, as SSE says

    def finish(self) -> None:
        self._dispatch()

    def _dispatch(self) -> None:
        if not self._data:
            return
        lines, self._data = self._data, []
        payload = "\n".join(lines)
        try:
            events = [json.loads(payload)] if payload != "[DONE]" else []
        except ValueError:
            # a server that omits the blank line between events: one JSON document per line
            events = []
            for item in lines:
                if item == "[DONE]":
                    continue
                try:
                    events.append(json.loads(item))
                except ValueError:
                    raise self._malformed(f"data is not JSON: {item[:200]!r}") from None
        for event in events:
            self._handle(event)
        if "[DONE]" in lines:
            self.done = True

    # -- payload ---------------------------------------------------------------------------
    def _handle(self, event: Any) -> None:
        now = time.perf_counter()
        if not isinstance(event, dict):
            raise self._malformed(f"event is not a JSON object: {str(event)[:200]!r}")
        if "error" in event and "choices" not in event:
            raise EngineError(f"engine error in stream from {self.url}: {_error_detail(json.dumps(event))}")
        self.n_events += 1
        choices = event.get("choices")
        if choices is None:
            choices = []
        if not isinstance(choices, list):
            raise self._malformed(f"'choices' is not a list: {str(choices)[:200]!r}")
        for choice in choices:
            if not isinstance(choice, dict):
                raise self._malformed(f"choice is not an object: {str(choice)[:200]!r}")
            if self.t_first_choice is None:
                self.t_first_choice = now
            text = self._choice_text(choice)
            if text:
                if self.ttft is None:
                    self.ttft = now - self.t0
                self.parts.append(text)
            reason = choice.get("finish_reason")
            if reason:
                self.finish_reason = str(reason)
        usage = event.get("usage")
        if isinstance(usage, dict):
            self.usage = usage
        timings = event.get("timings")
        if isinstance(timings, dict):
            self.timings = timings
        if not choices and usage is None and timings is None and "id" not in event:
            raise self._malformed(f"event has no choices, usage or id: {json.dumps(event)[:200]}")

    def _choice_text(self, choice: dict[str, Any]) -> str:
        if self.chat:
            delta = choice.get("delta") or choice.get("message") or {}
            if not isinstance(delta, dict):
                raise self._malformed(f"delta is not an object: {str(delta)[:200]!r}")
            content = delta.get("content")
            reasoning = delta.get("reasoning_content")
            return "".join(x for x in (reasoning, content) if isinstance(x, str))
        text = choice.get("text")
        return text if isinstance(text, str) else ""

    def _malformed(self, what: str) -> EngineError:
        return EngineError(f"malformed stream from {self.url}: {what}")

    # -- result ----------------------------------------------------------------------------
    def result(self, request_id: str) -> CompletionResult:
        self.finish()
        t_end = time.perf_counter()
        if self.n_events == 0:
            raise self._malformed("the stream ended without any completion event")
        if not self.done and self.finish_reason is None:
            raise self._malformed("the stream ended before [DONE] and without a finish_reason")
        if self.ttft is None:  # no text generated (e.g. immediate EOS): first choice chunk
            ref = self.t_first_choice if self.t_first_choice is not None else t_end
            self.ttft = ref - self.t0
        prompt_tokens, cached, completion = self._counts()
        return CompletionResult(
            text="".join(self.parts),
            ttft_s=self.ttft,
            total_s=t_end - self.t0,
            prompt_tokens=prompt_tokens,
            cached_tokens=cached,
            completion_tokens=completion,
            request_id=request_id,
            finish_reason=self.finish_reason,
            server_prompt_ms=self._prompt_ms(),
        )

    def _prompt_ms(self) -> float | None:
        value = (self.timings or {}).get("prompt_ms")
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        return None

    def _counts(self) -> tuple[int | None, int | None, int | None]:
        usage = self.usage or {}
        prompt_tokens = _as_int(usage.get("prompt_tokens"))
        completion = _as_int(usage.get("completion_tokens"))
        cached = None
        details = usage.get("prompt_tokens_details")
        if isinstance(details, dict):
            cached = _as_int(details.get("cached_tokens"))
        timings = self.timings or {}
        cache_n = _as_int(timings.get("cache_n"))
        prompt_n = _as_int(timings.get("prompt_n"))
        if cached is None and cache_n is not None:
            cached = cache_n  # llama.cpp: tokens reused from the slot / host prompt cache
        if prompt_tokens is None and cache_n is not None and prompt_n is not None:
            prompt_tokens = cache_n + prompt_n
        if completion is None:
            completion = _as_int(timings.get("predicted_n"))
        return prompt_tokens, cached, completion


# ---------------------------------------------------------------------------------------------
# base: configuration and request building, shared by the sync and async clients
# ---------------------------------------------------------------------------------------------


class _ClientBase:
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
    ) -> None:
        if max_retries < 0:
            raise ValueError("max_retries must be >= 0")
        base = base_url.rstrip("/")
        if base.endswith("/v1"):
            base = base[: -len("/v1")]
        self.base_url = base
        self.model = model
        self.timeout = timeout
        self.max_retries = max_retries
        self.send_request_id = send_request_id
        self.extra_body = dict(extra_body or {})
        self._retry_wait_s = retry_wait_s
        self._retry_wait_max_s = retry_wait_max_s
        self._headers = {"Accept": "text/event-stream"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        # connect fast, read with the caller's timeout (prefill of a long prompt can be slow)
        self._timeout = httpx.Timeout(timeout, connect=min(timeout, 10.0))
        self._http = self._make_http()

    def _make_http(self) -> Any:
        raise NotImplementedError

    def _retry_kwargs(self) -> dict[str, Any]:
        return {
            "stop": stop_after_attempt(self.max_retries + 1),
            "wait": wait_exponential(multiplier=self._retry_wait_s, max=self._retry_wait_max_s),
            "retry": retry_if_exception(_is_retryable),
            "reraise": True,
            "before_sleep": self._log_retry,
        }

    @staticmethod
    def _log_retry(state: Any) -> None:
        exc = state.outcome.exception() if state.outcome is not None else None
        logger.warning("engine request attempt %d failed (%s); retrying", state.attempt_number, exc)

    def _body(
        self,
        key: str,
        payload: Any,
        *,
        max_tokens: int,
        temperature: float,
        request_id: str,
        stop: str | Sequence[str] | None,
    ) -> dict[str, Any]:
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
            body["rid"] = request_id
        body.update(self.extra_body)
        return body

    def _request_headers(self, request_id: str) -> dict[str, str]:
        headers = dict(self._headers)
        if self.send_request_id:
            headers["X-Request-Id"] = request_id
        return headers

    def _wrap(self, exc: BaseException, method: str, url: str) -> EngineError:
        attempts = self.max_retries + 1
        if isinstance(exc, _RetryableStatus):
            return EngineError(
                f"{method} {url} failed after {attempts} attempt(s): HTTP {exc.status}: "
                f"{_error_detail(exc.body)}"
            )
        if isinstance(exc, (httpx.ConnectError, httpx.ConnectTimeout)):
            return EngineError(
                f"cannot connect to the engine at {self.base_url} ({method} {url}) after "
                f"{attempts} attempt(s): {exc or type(exc).__name__}. Is the server running?"
            )
        if isinstance(exc, httpx.TimeoutException):
            return EngineError(
                f"{method} {url} timed out after {self.timeout:g}s: {exc or type(exc).__name__}"
            )
        if isinstance(exc, httpx.HTTPError):
            return EngineError(
                f"{method} {url} failed after {attempts} attempt(s): "
                f"{type(exc).__name__}: {exc}"
            )
        return EngineError(f"{method} {url} failed: {exc}")

    @staticmethod
    def _check_status(status: int, body: str, url: str) -> None:
        if status >= 500 or status == 429:
            raise _RetryableStatus(status, body)
        if status >= 400:
            raise EngineError(f"POST {url} was rejected: HTTP {status}: {_error_detail(body)}")


def _new_request_id(request_id: str | None) -> str:
    return str(request_id) if request_id is not None else uuid.uuid4().hex


def _is_event_stream(response: httpx.Response) -> bool:
    return "text/event-stream" in response.headers.get("content-type", "")


def _accumulate_json(acc: _SSEAccumulator, text: str) -> None:
    """A server that ignored ``stream: true`` and answered one JSON document."""
    try:
        data = json.loads(text)
    except ValueError:
        raise acc._malformed(
            f"expected an SSE stream (text/event-stream), got: {text.strip()[:200]!r}"
        ) from None
    acc._handle(data)
    acc.done = True


# ---------------------------------------------------------------------------------------------
# sync client
# ---------------------------------------------------------------------------------------------


class EngineClient(_ClientBase):
    """Synchronous streaming client; thread-safe (one pooled :class:`httpx.Client`).

    ``base_url`` is the server root (``http://127.0.0.1:8080``; a trailing ``/v1`` is accepted).
    ``max_retries`` extra attempts follow a failed connection or a 5xx/429 answer.
    ``send_request_id=False`` stops sending ``rid`` (for strict servers such as api.openai.com);
    ``extra_body`` is merged into every completion request body (e.g. ``{"ignore_eos": True}``).
    """

    _http: httpx.Client

    def _make_http(self) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, timeout=self._timeout)

    # -- public API ------------------------------------------------------------------------
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
        rid = _new_request_id(request_id)
        body = self._body("prompt", prompt, max_tokens=max_tokens, temperature=temperature,
                          request_id=rid, stop=stop)
        return self._stream("/v1/completions", body, rid, chat=False)

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
        rid = _new_request_id(request_id)
        body = self._body("messages", messages, max_tokens=max_tokens, temperature=temperature,
                          request_id=rid, stop=stop)
        return self._stream("/v1/chat/completions", body, rid, chat=True)

    def flush_cache(self) -> bool:
        """Drop the engine's prefix cache; ``True`` only when the engine confirms a full flush.

        SGLang: ``POST /flush_cache`` (refused while requests are running → ``False``).
        llama.cpp has no global flush: erasing every slot (``POST /slots/{id}?action=erase``,
        needs ``--slot-save-path``) does not clear the host prompt cache (``--cache-ram``), which
        can still serve the same prefix, so this returns ``False`` for llama.cpp after erasing
        what it can; restart the server (:meth:`LlamaServer.restart`) for a cold cache.
        """
        try:
            resp = self._http.post("/flush_cache", headers=self._headers)
            if resp.status_code == 405:
                resp = self._http.get("/flush_cache", headers=self._headers)
            if resp.status_code == 200:
                return True
            if resp.status_code != 404:
                logger.warning("flush_cache refused: HTTP %d: %s", resp.status_code,
                               _error_detail(resp.text))
                return False
            slots = self._http.get("/slots", headers=self._headers)
            if slots.status_code != 200:
                return False
            ids = _slot_ids(slots)
            ok = bool(ids)
            for slot_id in ids:
                r = self._http.post(f"/slots/{slot_id}", params={"action": "erase"},
                                    headers=self._headers)
                ok = ok and r.status_code == 200
            _log_llamacpp_flush(ok)
            return False
        except httpx.HTTPError as exc:
            raise self._wrap(exc, "POST", f"{self.base_url}/flush_cache") from exc

    def tokenize(self, text: str) -> list[int] | None:
        """Token ids of ``text`` via llama.cpp's ``POST /tokenize`` (``None`` if unsupported)."""
        try:
            resp = self._http.post("/tokenize", json={"content": text, "add_special": False},
                                   headers=self._headers)
        except httpx.HTTPError as exc:
            raise self._wrap(exc, "POST", f"{self.base_url}/tokenize") from exc
        return _parse_tokens(resp)

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> EngineClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- internals -------------------------------------------------------------------------
    def _stream(self, path: str, body: dict[str, Any], rid: str, *, chat: bool) -> CompletionResult:
        url = f"{self.base_url}{path}"
        headers = self._request_headers(rid)
        try:
            for attempt in Retrying(**self._retry_kwargs()):
                with attempt:
                    return self._attempt(path, url, body, headers, rid, chat)
        except EngineError:
            raise
        except (RetryError, httpx.HTTPError, _RetryableStatus) as exc:
            raise self._wrap(exc, "POST", url) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    def _attempt(self, path: str, url: str, body: dict[str, Any], headers: dict[str, str],
                 rid: str, chat: bool) -> CompletionResult:
        t0 = time.perf_counter()
        with self._http.stream("POST", path, json=body, headers=headers) as resp:
            if resp.status_code >= 400:
                self._check_status(resp.status_code, resp.read().decode(errors="replace"), url)
            acc = _SSEAccumulator(url, t0, chat)
            if not _is_event_stream(resp):
                _accumulate_json(acc, resp.read().decode(errors="replace"))
            else:
                for line in resp.iter_lines():
                    acc.feed_line(line)
                    if acc.done:
                        break
            return acc.result(rid)


# ---------------------------------------------------------------------------------------------
# async client
# ---------------------------------------------------------------------------------------------


class AsyncEngineClient(_ClientBase):
    """Asynchronous twin of :class:`EngineClient` (one pooled :class:`httpx.AsyncClient`)."""

    _http: httpx.AsyncClient

    def _make_http(self) -> httpx.AsyncClient:
        return httpx.AsyncClient(base_url=self.base_url, timeout=self._timeout)

    async def complete(
        self,
        prompt: str,
        *,
        max_tokens: int = 64,
        temperature: float = 0.0,
        request_id: str | None = None,
        stop: str | Sequence[str] | None = None,
    ) -> CompletionResult:
        rid = _new_request_id(request_id)
        body = self._body("prompt", prompt, max_tokens=max_tokens, temperature=temperature,
                          request_id=rid, stop=stop)
        return await self._stream("/v1/completions", body, rid, chat=False)

    async def chat(
        self,
        messages: list[dict[str, Any]],
        *,
        max_tokens: int = 64,
        temperature: float = 0.0,
        request_id: str | None = None,
        stop: str | Sequence[str] | None = None,
    ) -> CompletionResult:
        rid = _new_request_id(request_id)
        body = self._body("messages", messages, max_tokens=max_tokens, temperature=temperature,
                          request_id=rid, stop=stop)
        return await self._stream("/v1/chat/completions", body, rid, chat=True)

    async def flush_cache(self) -> bool:
        """See :meth:`EngineClient.flush_cache`."""
        try:
            resp = await self._http.post("/flush_cache", headers=self._headers)
            if resp.status_code == 405:
                resp = await self._http.get("/flush_cache", headers=self._headers)
            if resp.status_code == 200:
                return True
            if resp.status_code != 404:
                logger.warning("flush_cache refused: HTTP %d: %s", resp.status_code,
                               _error_detail(resp.text))
                return False
            slots = await self._http.get("/slots", headers=self._headers)
            if slots.status_code != 200:
                return False
            ids = _slot_ids(slots)
            ok = bool(ids)
            for slot_id in ids:
                r = await self._http.post(f"/slots/{slot_id}", params={"action": "erase"},
                                          headers=self._headers)
                ok = ok and r.status_code == 200
            _log_llamacpp_flush(ok)
            return False
        except httpx.HTTPError as exc:
            raise self._wrap(exc, "POST", f"{self.base_url}/flush_cache") from exc

    async def tokenize(self, text: str) -> list[int] | None:
        try:
            resp = await self._http.post("/tokenize", json={"content": text, "add_special": False},
                                         headers=self._headers)
        except httpx.HTTPError as exc:
            raise self._wrap(exc, "POST", f"{self.base_url}/tokenize") from exc
        return _parse_tokens(resp)

    async def close(self) -> None:
        await self._http.aclose()

    async def aclose(self) -> None:
        await self.close()

    async def __aenter__(self) -> AsyncEngineClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _stream(self, path: str, body: dict[str, Any], rid: str, *,
                      chat: bool) -> CompletionResult:
        url = f"{self.base_url}{path}"
        headers = self._request_headers(rid)
        try:
            async for attempt in AsyncRetrying(**self._retry_kwargs()):
                with attempt:
                    return await self._attempt(path, url, body, headers, rid, chat)
        except EngineError:
            raise
        except (RetryError, httpx.HTTPError, _RetryableStatus) as exc:
            raise self._wrap(exc, "POST", url) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    async def _attempt(self, path: str, url: str, body: dict[str, Any], headers: dict[str, str],
                       rid: str, chat: bool) -> CompletionResult:
        t0 = time.perf_counter()
        async with self._http.stream("POST", path, json=body, headers=headers) as resp:
            if resp.status_code >= 400:
                raw = await resp.aread()
                self._check_status(resp.status_code, raw.decode(errors="replace"), url)
            acc = _SSEAccumulator(url, t0, chat)
            if not _is_event_stream(resp):
                raw = await resp.aread()
                _accumulate_json(acc, raw.decode(errors="replace"))
            else:
                async for line in resp.aiter_lines():
                    acc.feed_line(line)
                    if acc.done:
                        break
            return acc.result(rid)


# ---------------------------------------------------------------------------------------------
# helpers shared by flush_cache / tokenize
# ---------------------------------------------------------------------------------------------


def _slot_ids(resp: httpx.Response) -> list[int]:
    try:
        data = resp.json()
    except ValueError:
        return []
    if not isinstance(data, list):
        return []
    ids = [_as_int(s.get("id")) for s in data if isinstance(s, dict)]
    return [i for i in ids if i is not None]


def _log_llamacpp_flush(erased_all: bool) -> None:
    if erased_all:
        logger.warning(
            "llama.cpp: erased every slot's KV cache, but the host prompt cache (--cache-ram) "
            "cannot be cleared over HTTP; restart the server for a guaranteed cold cache"
        )
    else:
        logger.warning(
            "llama.cpp: slot erase unavailable (start llama-server with --slot-save-path) and "
            "there is no global flush endpoint; restart the server for a cold cache"
        )


def _parse_tokens(resp: httpx.Response) -> list[int] | None:
    if resp.status_code != 200:
        return None
    try:
        data = resp.json()
    except ValueError:
        return None
    tokens = data.get("tokens") if isinstance(data, dict) else None
    if not isinstance(tokens, list):
        return None
    out: list[int] = []
    for tok in tokens:
        # with_pieces=true returns objects; plain ids otherwise
        tid = _as_int(tok.get("id")) if isinstance(tok, dict) else _as_int(tok)
        if tid is None:
            return None
        out.append(tid)
    return out
