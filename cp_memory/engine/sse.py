"""The completion stream, parsed without any I/O: bytes in, :class:`CompletionResult` out.

:class:`StreamDecoder` takes the body of an OpenAI-compatible streamed completion chunk by chunk as
it arrives (Server-Sent Events: ``data: {json}`` lines, blank line between events, ``: comment``
keep-alives, ``data: [DONE]`` at the end) and accumulates text, usage and llama.cpp timings. A
server that ignored ``stream: true`` and answered one JSON document is accepted too. Anything else
is an :class:`~cp_memory.engine.errors.EngineStreamError` starting with ``malformed stream from``.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .errors import EngineStreamError

__all__ = ["CompletionResult", "LineBuffer", "StreamDecoder", "as_int", "error_detail"]


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


def as_int(value: Any) -> int | None:
    """``value`` as an int when it is one (booleans and fractional floats are not)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def error_detail(body: str, limit: int = 500) -> str:
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


_EOL = re.compile(rb"\r\n|\r|\n")


class LineBuffer:
    """Splits a byte stream into SSE lines (``\\r\\n``, ``\\r`` or ``\\n``), decoded as UTF-8.

    A line may arrive across many chunks; the buffer only rescans what is new.
    """

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes) -> list[str]:
        scan_from = max(0, len(self._buf) - 1)  # a held-back '\r' may pair with a leading '\n'
        self._buf += data
        lines: list[str] = []
        start = 0
        for match in _EOL.finditer(self._buf, scan_from):
            if match.group() == b"\r" and match.end() == len(self._buf):
                break  # maybe the first half of '\r\n': wait for the next chunk
            lines.append(self._buf[start : match.start()].decode("utf-8", "replace"))
            start = match.end()
        del self._buf[:start]
        return lines

    def close(self) -> list[str]:
        """The last line when the stream ended without a line break."""
        rest, self._buf = bytes(self._buf).rstrip(b"\r"), bytearray()
        return [rest.decode("utf-8", "replace")] if rest else []


class StreamDecoder:
    """Accumulates one completion from its body (SSE, or one JSON document when
    ``event_stream`` is false). ``feed`` returns ``True`` once the stream said ``[DONE]``."""

    def __init__(
        self,
        url: str,
        t0: float,
        *,
        chat: bool,
        event_stream: bool = True,
        clock: Callable[[], float] = time.perf_counter,
    ) -> None:
        self.url = url
        self.t0 = t0
        self.chat = chat
        self.event_stream = event_stream
        self._clock = clock
        self._lines = LineBuffer()
        self._raw = bytearray()  # the JSON document of a non-SSE answer
        self.parts: list[str] = []
        self.ttft: float | None = None
        self.t_first_choice: float | None = None
        self.usage: dict[str, Any] | None = None
        self.timings: dict[str, Any] | None = None
        self.finish_reason: str | None = None
        self.done = False
        self.n_events = 0
        self._data: list[str] = []

    # -- bytes -----------------------------------------------------------------------------
    def feed(self, data: bytes) -> bool:
        if self.done:
            return True
        if not self.event_stream:
            self._raw += data
            return False
        for line in self._lines.feed(data):
            self.feed_line(line)
            if self.done:
                break
        return self.done

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
            raise self.malformed(f"line without a field name: {line[:200]!r}")
        value = value.removeprefix(" ")
        if field == "data":
            self._data.append(value)
        # other fields (event, id, retry, unknown) carry nothing we need: ignored, as SSE says

    def _finish_input(self) -> None:
        if not self.event_stream:
            if not self.done:
                self._accept_json(self._raw.decode("utf-8", "replace"))
            return
        for line in self._lines.close():
            self.feed_line(line)
        self._dispatch()

    def _accept_json(self, text: str) -> None:
        """A server that ignored ``stream: true`` and answered one JSON document."""
        try:
            data = json.loads(text)
        except ValueError:
            raise self.malformed(f"expected an SSE stream (text/event-stream), got: {text.strip()[:200]!r}") from None
        self._handle(data)
        self.done = True

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
                    raise self.malformed(f"data is not JSON: {item[:200]!r}") from None
        for event in events:
            self._handle(event)
        if "[DONE]" in lines:
            self.done = True

    # -- payload ---------------------------------------------------------------------------
    def _handle(self, event: Any) -> None:
        now = self._clock()
        if not isinstance(event, dict):
            raise self.malformed(f"event is not a JSON object: {str(event)[:200]!r}")
        if "error" in event and "choices" not in event:
            raise EngineStreamError(f"engine error in stream from {self.url}: {error_detail(json.dumps(event))}")
        self.n_events += 1
        choices = event.get("choices")
        if choices is None:
            choices = []
        if not isinstance(choices, list):
            raise self.malformed(f"'choices' is not a list: {str(choices)[:200]!r}")
        for choice in choices:
            if not isinstance(choice, dict):
                raise self.malformed(f"choice is not an object: {str(choice)[:200]!r}")
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
            raise self.malformed(f"event has no choices, usage or id: {json.dumps(event)[:200]}")

    def _choice_text(self, choice: dict[str, Any]) -> str:
        if self.chat:
            delta = choice.get("delta") or choice.get("message") or {}
            if not isinstance(delta, dict):
                raise self.malformed(f"delta is not an object: {str(delta)[:200]!r}")
            content = delta.get("content")
            reasoning = delta.get("reasoning_content")
            return "".join(x for x in (reasoning, content) if isinstance(x, str))
        text = choice.get("text")
        return text if isinstance(text, str) else ""

    def malformed(self, what: str) -> EngineStreamError:
        return EngineStreamError(f"malformed stream from {self.url}: {what}")

    # -- result ----------------------------------------------------------------------------
    def result(self, request_id: str | None) -> CompletionResult:
        self._finish_input()
        t_end = self._clock()
        if self.n_events == 0:
            raise self.malformed("the stream ended without any completion event")
        if not self.done and self.finish_reason is None:
            raise self.malformed("the stream ended before [DONE] and without a finish_reason")
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
        prompt_tokens = as_int(usage.get("prompt_tokens"))
        completion = as_int(usage.get("completion_tokens"))
        cached = None
        details = usage.get("prompt_tokens_details")
        if isinstance(details, dict):
            cached = as_int(details.get("cached_tokens"))
        timings = self.timings or {}
        cache_n = as_int(timings.get("cache_n"))
        prompt_n = as_int(timings.get("prompt_n"))
        if cached is None and cache_n is not None:
            cached = cache_n  # llama.cpp: tokens reused from the slot / host prompt cache
        if prompt_tokens is None and cache_n is not None and prompt_n is not None:
            prompt_tokens = cache_n + prompt_n
        if completion is None:
            completion = as_int(timings.get("predicted_n"))
        return prompt_tokens, cached, completion
