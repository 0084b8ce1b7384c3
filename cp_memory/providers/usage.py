"""One :class:`CacheUsage` record from any provider's response, streamed or not.

:func:`read_usage` takes a response, its ``usage`` object, a stream event, a plain dict, or any SDK model
(anything with ``model_dump``/``to_dict`` or attributes) and recognises the shape by its fields:

===============================  =============================================================================
shape                            fields read
===============================  =============================================================================
OpenAI Chat Completions          ``prompt_tokens`` (cached included), ``prompt_tokens_details.cached_tokens``,
                                 ``prompt_tokens_details.cache_write_tokens`` (GPT-5.6+), ``completion_tokens``
OpenAI Responses                 ``input_tokens``, ``input_tokens_details.cached_tokens`` / ``cache_write_tokens``
Anthropic Messages               ``input_tokens`` (uncached only), ``cache_read_input_tokens``,
                                 ``cache_creation_input_tokens`` (+ ``cache_creation.ephemeral_1h_input_tokens``)
Gemini                           ``usage_metadata.prompt_token_count``, ``cached_content_token_count``
                                 (Interactions API: ``total_cached_tokens``)
DeepSeek                         ``prompt_cache_hit_tokens``, ``prompt_cache_miss_tokens``
self-hosted engines              :class:`cp_memory.engine.sse.CompletionResult` (``prompt_tokens``,
                                 ``cached_tokens``), llama.cpp ``timings.cache_n``
LangChain ``usage_metadata``     ``input_tokens`` (all), ``input_token_details.cache_read`` / ``cache_creation``
===============================  =============================================================================

``input_tokens`` of the record is always *every* prompt token (read + written + uncached), whatever the
provider counts in its own field of that name. Missing or odd fields give zeros and a debug log line, never
an exception: usage is read in the caller's request path. A count above :data:`MAX_USAGE_TOKENS` (10^9, a
thousand times the largest context window; a 400-digit number from a hostile stream) is clamped to it
with a warning, so no later arithmetic (costs in floats) can overflow.

Streams: :class:`UsageStream` is fed every event (``feed``) or wraps the iterator (``wrap``/``awrap``) and
merges what the events carry: OpenAI's final chunk (``stream_options={"include_usage": True}``), the
Responses API's ``response.completed``, Anthropic's ``message_start`` + cumulative ``message_delta``,
Gemini's per-chunk ``usage_metadata``.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator, Mapping
from dataclasses import dataclass, replace
from typing import Any, TypeVar

__all__ = ["MAX_USAGE_TOKENS", "PROVIDERS", "CacheUsage", "UsageStream", "clamp_tokens", "read_usage"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

PROVIDERS = ("openai", "anthropic", "gemini", "deepseek", "engine", "unknown")

#: the largest token count one usage field may carry; larger ones are clamped to it (with a warning)
MAX_USAGE_TOKENS = 10**9


def clamp_tokens(value: int, field: str = "tokens") -> int:
    """``value`` (a count >= 0) clamped to :data:`MAX_USAGE_TOKENS`, with a warning when it was larger."""
    if value <= MAX_USAGE_TOKENS:
        return value
    magnitude = value.bit_length() * 30103 // 100000  # log10, without str() (refused past 4300 digits)
    logger.warning("usage: a token count of ~10^%d clamped to %d (%s)", magnitude, MAX_USAGE_TOKENS, field)
    return MAX_USAGE_TOKENS


@dataclass(frozen=True)
class CacheUsage:
    """Prompt-cache usage of one model call, the same for every provider.

    ``input_tokens``: every prompt token; ``cache_read_tokens`` came from the cache; ``cache_write_tokens``
    were written to it (billed above input on Anthropic and GPT-5.6+), of which ``cache_write_1h_tokens`` at
    Anthropic's 1-hour TTL; the rest (:attr:`uncached_tokens`) was billed as plain input.
    """

    provider: str = "unknown"
    input_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    output_tokens: int = 0
    cache_write_1h_tokens: int = 0
    model: str | None = None

    @property
    def uncached_tokens(self) -> int:
        return max(0, self.input_tokens - self.cache_read_tokens - self.cache_write_tokens)

    @property
    def cached_share(self) -> float:
        """Share of the prompt read from the cache (0.0 for an empty prompt)."""
        return self.cache_read_tokens / self.input_tokens if self.input_tokens else 0.0

    def __add__(self, other: CacheUsage) -> CacheUsage:
        if not isinstance(other, CacheUsage):
            return NotImplemented
        return CacheUsage(
            provider=self.provider if self.provider == other.provider else "mixed",
            input_tokens=self.input_tokens + other.input_tokens,
            cache_read_tokens=self.cache_read_tokens + other.cache_read_tokens,
            cache_write_tokens=self.cache_write_tokens + other.cache_write_tokens,
            output_tokens=self.output_tokens + other.output_tokens,
            cache_write_1h_tokens=self.cache_write_1h_tokens + other.cache_write_1h_tokens,
            model=self.model if self.model == other.model else None,
        )


# ------------------------------------------------------------------ plain data from anything
def _plain(obj: Any, depth: int = 0) -> Any:
    """Dicts, lists and scalars from SDK objects (pydantic ``model_dump``, ``to_dict``, dataclasses,
    attribute objects), without calling anything that does I/O."""
    if depth > 6 or obj is None or isinstance(obj, (str, int, float, bool)):
        return obj
    if isinstance(obj, Mapping):
        return {_snake(str(k)): _plain(v, depth + 1) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_plain(v, depth + 1) for v in obj]
    for name in ("model_dump", "to_dict"):
        fn = getattr(obj, name, None)
        if callable(fn):
            try:
                return _plain(fn(), depth + 1)
            except Exception:  # an SDK object that cannot dump itself: fall back to its attributes
                logger.debug("%s.%s() failed", type(obj).__name__, name, exc_info=True)
    fields = getattr(obj, "__dict__", None)
    if isinstance(fields, dict):
        return {k: _plain(v, depth + 1) for k, v in fields.items() if not k.startswith("_")}
    return None


_CAMEL = re.compile(r"(?<=[a-z0-9])([A-Z])")


def _snake(key: str) -> str:
    """``promptTokenCount`` -> ``prompt_token_count`` (REST JSON of Gemini); snake_case keys unchanged."""
    return _CAMEL.sub(r"_\1", key).lower() if any(c.isupper() for c in key) else key


def _int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return clamp_tokens(value) if value >= 0 else None
    if isinstance(value, float) and value.is_integer() and value >= 0:
        return clamp_tokens(int(value))
    return None


def _get(d: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(d, Mapping):
            return None
        d = d.get(key)
    return d


_USAGE_KEYS = ("usage", "usage_metadata")


def _usage_part(data: Any) -> tuple[Mapping[str, Any] | None, str | None]:
    """The usage mapping inside a response / event / usage object, and the model name when present."""
    if not isinstance(data, Mapping):
        return None, None
    model = data.get("model") if isinstance(data.get("model"), str) else None
    for key in _USAGE_KEYS:
        inner = data.get(key)
        if isinstance(inner, Mapping):
            return inner, model
    for key in ("message", "response"):  # Anthropic message_start, Responses API response.completed
        inner = data.get(key)
        if isinstance(inner, Mapping):
            found, inner_model = _usage_part(inner)
            if found is not None:
                return found, model or inner_model
    if "prompt_tokens" in data and "choices" not in data or "cached_tokens" in data or "timings" in data:
        return data, model  # an engine CompletionResult / a usage object passed directly
    if any(k in data for k in _FIELD_HINTS):
        return data, model
    return None, model


_FIELD_HINTS = (
    "prompt_tokens",
    "input_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
    "prompt_token_count",
    "prompt_cache_hit_tokens",
    "total_cached_tokens",
)


def _fields(usage: Mapping[str, Any], outer: Mapping[str, Any]) -> tuple[str, dict[str, int]]:
    """(provider, the fields this usage object carries) — partial: a stream event may carry some only."""
    f: dict[str, int] = {}

    def put(name: str, value: Any) -> None:
        v = _int(value)
        if v is not None:
            f[name] = v

    if "prompt_cache_hit_tokens" in usage or "prompt_cache_miss_tokens" in usage:
        hit, miss = _int(usage.get("prompt_cache_hit_tokens")), _int(usage.get("prompt_cache_miss_tokens"))
        put("read", hit)
        total = _int(usage.get("prompt_tokens"))
        put("input", total if total is not None else (hit or 0) + (miss or 0))
        put("output", usage.get("completion_tokens"))
        return "deepseek", f
    if "cache_read_input_tokens" in usage or "cache_creation_input_tokens" in usage or "cache_creation" in usage:
        read = _int(usage.get("cache_read_input_tokens"))
        write = _int(usage.get("cache_creation_input_tokens"))
        plain = _int(usage.get("input_tokens"))
        put("read", read)
        put("write", write)
        put("write_1h", _get(usage, "cache_creation", "ephemeral_1h_input_tokens"))
        if plain is not None:  # Anthropic's input_tokens counts the uncached tokens only
            f["uncached"] = plain
        put("output", usage.get("output_tokens"))
        return "anthropic", f
    if "input_token_details" in usage:  # LangChain's normalised usage_metadata: input_tokens is every token
        put("input", usage.get("input_tokens"))
        put("read", _get(usage, "input_token_details", "cache_read"))
        put("write", _get(usage, "input_token_details", "cache_creation"))
        put("output", usage.get("output_tokens"))
        return "unknown", f
    if "prompt_token_count" in usage or "cached_content_token_count" in usage or "total_cached_tokens" in usage:
        put("input", usage.get("prompt_token_count", usage.get("total_input_tokens")))
        put("read", usage.get("cached_content_token_count", usage.get("total_cached_tokens")))
        put("output", usage.get("candidates_token_count", usage.get("total_output_tokens")))
        return "gemini", f
    if "timings" in outer or ("cached_tokens" in usage and "prompt_tokens_details" not in usage):
        put("input", usage.get("prompt_tokens"))
        put("read", usage.get("cached_tokens"))
        if "read" not in f:
            put("read", _get(outer, "timings", "cache_n"))
        put("output", usage.get("completion_tokens", usage.get("generated_tokens")))
        return "engine", f
    if "prompt_tokens" in usage:  # OpenAI Chat Completions (and compatible servers)
        put("input", usage.get("prompt_tokens"))
        put("read", _get(usage, "prompt_tokens_details", "cached_tokens"))
        put("write", _get(usage, "prompt_tokens_details", "cache_write_tokens"))
        put("output", usage.get("completion_tokens"))
        return "openai", f
    if "input_tokens" in usage:  # OpenAI Responses API
        put("input", usage.get("input_tokens"))
        put("read", _get(usage, "input_tokens_details", "cached_tokens"))
        put("write", _get(usage, "input_tokens_details", "cache_write_tokens"))
        put("output", usage.get("output_tokens"))
        return "openai", f
    if "output_tokens" in usage:  # Anthropic's message_delta: the output count alone (prompt counts in message_start)
        put("output", usage.get("output_tokens"))
    return "unknown", f


def _record(provider: str, f: Mapping[str, int], model: str | None) -> CacheUsage:
    read, write = f.get("read", 0), f.get("write", 0)
    if "uncached" in f:  # Anthropic: total = uncached + read + written
        total = f["uncached"] + read + write
    else:
        total = f.get("input", read + write)
    if read + write > total:  # inconsistent counts: trust the parts
        logger.debug("usage: cached %d + written %d exceed the prompt's %d tokens", read, write, total)
        total = read + write
    return CacheUsage(
        provider=provider,
        input_tokens=total,
        cache_read_tokens=read,
        cache_write_tokens=write,
        output_tokens=f.get("output", 0),
        cache_write_1h_tokens=min(f.get("write_1h", 0), write),
        model=model,
    )


def _parse(obj: Any) -> tuple[str, dict[str, int], str | None]:
    data = _plain(obj)
    usage, model = _usage_part(data)
    if usage is None:
        return "unknown", {}, model
    provider, fields = _fields(usage, data if isinstance(data, Mapping) else {})
    return provider, fields, model


def read_usage(obj: Any, *, provider: str | None = None, model: str | None = None) -> CacheUsage:
    """The :class:`CacheUsage` of a response, a usage object, a stream event or a dict; zeros (and a debug
    log) for anything it cannot read. ``provider``/``model`` override what the shape says."""
    try:
        found, fields, seen_model = _parse(obj)
        if not fields:
            logger.debug("no usage found in a %s", type(obj).__name__)
        record = _record(found, fields, model or seen_model)
        return replace(record, provider=provider) if provider else record
    except Exception:  # never in the caller's way: usage is bookkeeping
        logger.debug("could not read usage from a %s", type(obj).__name__, exc_info=True)
        return CacheUsage(provider=provider or "unknown", model=model)


class UsageStream:
    """Merges the usage carried by a stream's events (see the module docstring). Never raises."""

    def __init__(self, *, provider: str | None = None, model: str | None = None) -> None:
        self.provider = provider
        self.model = model
        self._found = "unknown"
        self._fields: dict[str, int] = {}
        self.events = 0

    def feed(self, event: Any) -> None:
        """One stream event (chunk). Later values of a field replace earlier ones (Anthropic's
        ``message_delta`` counts are cumulative; OpenAI sends usage once, in the last chunk)."""
        self.events += 1
        try:
            found, fields, seen_model = _parse(event)
        except Exception:
            logger.debug("could not read usage from a stream event", exc_info=True)
            return
        if fields:
            if self._found == "unknown":
                self._found = found
            self._fields.update(fields)
        if seen_model and not self.model:
            self.model = seen_model

    @property
    def usage(self) -> CacheUsage:
        """What the events fed so far carried (zeros before any usage arrived)."""
        try:
            record = _record(self._found, self._fields, self.model)
        except Exception:
            logger.debug("could not merge stream usage", exc_info=True)
            record = CacheUsage(model=self.model)
        return replace(record, provider=self.provider) if self.provider else record

    def wrap(self, stream: Iterable[T]) -> Iterator[T]:
        """Yield the stream's events unchanged, feeding each one; read :attr:`usage` afterwards."""
        for event in stream:
            self.feed(event)
            yield event

    async def awrap(self, stream: AsyncIterable[T]) -> AsyncIterator[T]:
        """:meth:`wrap` for an async stream."""
        async for event in stream:
            self.feed(event)
            yield event
