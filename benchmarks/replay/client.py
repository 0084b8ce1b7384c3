"""A streaming OpenAI-compatible client on the standard library only (``http.client``): TTFT, usage,
cached tokens; and the cache flushes SGLang, vLLM and llama.cpp offer over HTTP.

TTFT is timed as ``cp_memory.engine`` does: from sending the request to the first streamed chunk that
carries generated text (the first chunk with a choice when no text came). Cached tokens come from
``usage.prompt_tokens_details.cached_tokens``, else llama.cpp's ``timings.cache_n``.
"""

from __future__ import annotations

import http.client
import json
import logging
import time
import urllib.parse
from typing import Any

from benchmarks.common.reply import Reply

logger = logging.getLogger(__name__)

__all__ = ["Reply", "StreamingClient"]


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class StreamingClient:
    """One keep-alive connection to ``base_url`` (``http://host:port``, an optional ``/v1`` is dropped)."""

    def __init__(
        self,
        base_url: str,
        *,
        model: str | None = None,
        api_key: str | None = None,
        timeout: float = 600.0,
        retries: int = 3,
    ) -> None:
        url = urllib.parse.urlsplit(base_url.rstrip("/").removesuffix("/v1"))
        if url.scheme not in ("http", "https") or not url.hostname:
            raise ValueError(f"engine URL must be http(s)://host:port, got {base_url!r}")
        self.base_url = f"{url.scheme}://{url.netloc}"
        self._scheme, self._host, self._port = url.scheme, url.hostname, url.port
        self.model = model
        self.timeout = timeout
        self.retries = retries
        self._headers = {"Content-Type": "application/json"}
        if api_key:
            self._headers["Authorization"] = f"Bearer {api_key}"
        self._conn: http.client.HTTPConnection | None = None

    # -- plumbing --------------------------------------------------------------------------
    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            cls = http.client.HTTPSConnection if self._scheme == "https" else http.client.HTTPConnection
            self._conn = cls(self._host, self._port, timeout=self.timeout)
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def request(self, method: str, path: str, body: Any = None, timeout: float | None = None) -> tuple[int, bytes]:
        """A plain request; ``(status, body)``; connection errors retried ``retries`` times, then raised."""
        data = None if body is None else json.dumps(body).encode("utf-8")
        for attempt in range(self.retries + 1):
            conn = self._connection()
            try:
                if timeout is not None:
                    conn.timeout = timeout
                conn.request(method, path, body=data, headers=self._headers)
                resp = conn.getresponse()
                return resp.status, resp.read()
            except (OSError, http.client.HTTPException) as exc:
                self.close()
                if attempt == self.retries:
                    raise ConnectionError(f"{method} {self.base_url}{path} failed: {exc}") from exc
                time.sleep(0.2 * 2**attempt)
            finally:
                if self._conn is not None:
                    self._conn.timeout = self.timeout
        raise AssertionError("unreachable")

    def get_json(self, path: str) -> Any:
        status, body = self.request("GET", path, timeout=10.0)
        return json.loads(body) if status == 200 else None

    # -- probing and flushing ------------------------------------------------------------------
    def probe(self) -> str:
        """``sglang`` | ``llama.cpp`` | ``openai-compatible``; fills ``model`` from ``/v1/models``."""
        kind = "openai-compatible"
        if self.request("GET", "/get_model_info", timeout=10.0)[0] == 200:
            kind = "sglang"
        elif self.request("GET", "/props", timeout=10.0)[0] == 200:
            kind = "llama.cpp"
        if not self.model:
            models = self.get_json("/v1/models") or {}
            data = models.get("data") or []
            self.model = str(data[0]["id"]) if data else None
        return kind

    def flush(self, kind: str) -> str:
        """Empty the prefix cache over HTTP; returns how (recorded with every request)."""
        if self.request("POST", "/flush_cache", timeout=60.0)[0] == 200:
            return "flush_cache"
        if kind == "llama.cpp":
            slots = self.get_json("/slots") or []
            for slot in slots if isinstance(slots, list) else []:
                self.request("POST", f"/slots/{slot.get('id', 0)}?action=erase", timeout=30.0)
            logger.warning(
                "llama.cpp at %s: slots erased, but its host prompt cache (--cache-ram) cannot be "
                "cleared over HTTP; launch it with --llama-server for a restart per mode",
                self.base_url,
            )
            return "slots-erased (host prompt cache kept)"
        if self.request("POST", "/reset_prefix_cache", timeout=60.0)[0] == 200:
            return "reset_prefix_cache"
        logger.warning("%s has no cache flush endpoint: modes are NOT separated by a cold cache", self.base_url)
        return "none (no flush endpoint)"

    # -- completions ---------------------------------------------------------------------------
    def complete(self, prompt: str, *, max_tokens: int) -> Reply:
        return self._stream("/v1/completions", {"prompt": prompt}, max_tokens, chat=False)

    def chat(self, messages: list[dict[str, Any]], *, max_tokens: int) -> Reply:
        return self._stream("/v1/chat/completions", {"messages": messages}, max_tokens, chat=True)

    def _stream(self, path: str, payload: dict[str, Any], max_tokens: int, *, chat: bool) -> Reply:
        body = {
            **payload,
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
        if self.model:
            body["model"] = self.model
        data = json.dumps(body).encode("utf-8")
        last = ""
        for attempt in range(self.retries + 1):
            conn = self._connection()
            t0 = time.perf_counter()
            try:
                conn.request("POST", path, body=data, headers=self._headers)
                resp = conn.getresponse()
                if resp.status != 200:
                    detail = resp.read()[:500].decode("utf-8", "replace")
                    if resp.status < 500:
                        return Reply("", None, None, None, None, error=f"HTTP {resp.status}: {detail}")
                    raise http.client.HTTPException(f"HTTP {resp.status}: {detail}")
                return _read_stream(resp, t0, chat)
            except (OSError, http.client.HTTPException, ValueError) as exc:
                self.close()
                last = str(exc)
                if attempt < self.retries:
                    time.sleep(0.2 * 2**attempt)
        return Reply("", None, None, None, None, error=f"{path}: {last}"[:500])


def _read_stream(resp: http.client.HTTPResponse, t0: float, chat: bool) -> Reply:
    ttft = first_choice = None
    parts: list[str] = []
    usage: dict[str, Any] = {}
    timings: dict[str, Any] = {}
    while True:
        raw = resp.readline()
        if not raw:
            break
        line = raw.decode("utf-8").strip()
        if not line.startswith("data:"):
            continue
        item = line[5:].strip()
        if item == "[DONE]":
            break
        event = json.loads(item)
        if "error" in event and "choices" not in event:
            raise ValueError(f"engine error: {json.dumps(event)[:300]}")
        now = time.perf_counter()
        for choice in event.get("choices") or []:
            first_choice = first_choice if first_choice is not None else now
            delta = (choice.get("delta") or {}) if chat else {}
            text = (delta.get("content") or "") if chat else (choice.get("text") or "")
            if text:
                ttft = ttft if ttft is not None else now - t0
                parts.append(text)
        usage = event.get("usage") or usage
        timings = event.get("timings") or timings
    resp.read()  # drain, keep the connection reusable
    t_end = time.perf_counter()
    if ttft is None:
        ttft = (first_choice if first_choice is not None else t_end) - t0
    details = usage.get("prompt_tokens_details") or {}
    cached = _int(details.get("cached_tokens")) if isinstance(details, dict) else None
    if cached is None:
        cached = _int(timings.get("cache_n"))
    prompt_tokens = _int(usage.get("prompt_tokens"))
    if prompt_tokens is None and _int(timings.get("cache_n")) is not None and _int(timings.get("prompt_n")) is not None:
        prompt_tokens = int(timings["cache_n"]) + int(timings["prompt_n"])
    prompt_ms = timings.get("prompt_ms")
    return Reply(
        "".join(parts),
        ttft,
        t_end - t0,
        prompt_tokens,
        cached,
        completion_tokens=_int(usage.get("completion_tokens")),
        server_prompt_ms=float(prompt_ms) if isinstance(prompt_ms, (int, float)) else None,
    )
