"""Deterministic models of the hosted providers' prompt caches, after their documented rules.

Beside the engine policies of :mod:`benchmarks.common.cache_model` (also importable from there). No I/O, no clock of
their own: every request passes its simulated time ``now`` (seconds), so TTLs, idle eviction and request
rates are exact and machine-independent. The numbers are :mod:`cp_memory.providers.rules`'.

:class:`OpenAIPromptCache` — automatic prefix caching: prompts of 1,024 tokens or more; a hit is the longest
    cached prefix, counted from 1,024 in 128-token steps; requests are routed to one of ``machines`` by a hash
    of the first 256 tokens and the ``prompt_cache_key``, and past ~15 requests a minute for one prefix + key
    the surplus overflows to other machines (whose caches do not hold the prefix); an entry lives
    ``idle_ttl_s`` after its last use (default 5 min, the short end of "5-10 minutes"; at most the documented
    hour), or 24 h with ``retention="24h"``. With
    ``report_writes`` (GPT-5.6 and later) the tokens newly cached are reported as writes.

:class:`AnthropicPromptCache` — explicit breakpoints: a request is a list of content blocks (tools, system,
    messages, in that order), some marked with a breakpoint (TTL ``"5m"`` or ``"1h"``), or a top-level
    automatic breakpoint on the last block; at most 4. Each breakpoint looks for an entry at its own block
    and up to 20 blocks before it; the longest found is read (and refreshed). Every breakpoint past the read
    whose prefix reaches the model's minimum writes an entry; shorter ones silently cache nothing. Usage
    splits the prompt into read, written (5 min / 1 h) and uncached tokens, as the API reports them.
"""

from __future__ import annotations

import hashlib
from collections import deque
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

from cp_memory.providers.rules import (
    ANTHROPIC_LOOKBACK_BLOCKS,
    ANTHROPIC_MAX_BREAKPOINTS,
    ANTHROPIC_TTL_SECONDS,
    ANTHROPIC_TTLS,
    OPENAI_EXTENDED_TTL_S,
    OPENAI_IDLE_TTL_S,
    OPENAI_MAX_TTL_S,
    OPENAI_MIN_TOKENS,
    OPENAI_OVERFLOW_PER_MINUTE,
    OPENAI_RETENTIONS,
    OPENAI_ROUTING_TOKENS,
    OPENAI_STEP_TOKENS,
)

__all__ = [
    "AnthropicPromptCache",
    "AnthropicServed",
    "CacheBlock",
    "OpenAIPromptCache",
    "OpenAIServed",
]

Tokens = Sequence[Hashable]


def _chain(parent: bytes, tokens: Tokens) -> bytes:
    """A prefix digest: the parent prefix's digest + these tokens (so equal digests mean equal prefixes)."""
    h = hashlib.blake2b(parent, digest_size=16)
    h.update(repr(tuple(tokens)).encode("utf-8", "surrogatepass"))
    return h.digest()


def _check_now(now: float) -> float:
    if not isinstance(now, (int, float)) or isinstance(now, bool):
        raise TypeError(f"now must be a number of seconds, got {type(now).__name__}")
    return float(now)


# ====================================================================== OpenAI
@dataclass(frozen=True)
class OpenAIServed:
    """One request: ``cached`` of ``prompt`` tokens read from the cache, ``written`` newly cached
    (reported only with ``report_writes``), on ``machine`` (``overflow``: not the prefix's home machine)."""

    prompt: int
    cached: int
    written: int
    machine: int
    overflow: bool


@dataclass
class _Entry:
    used: float
    ttl: float


class OpenAIPromptCache:
    """OpenAI's automatic prompt cache (see the module docstring). ``serve(tokens, key=..., now=...)``."""

    def __init__(
        self,
        *,
        machines: int = 8,
        min_tokens: int = OPENAI_MIN_TOKENS,
        step_tokens: int = OPENAI_STEP_TOKENS,
        routing_tokens: int = OPENAI_ROUTING_TOKENS,
        overflow_per_minute: int = OPENAI_OVERFLOW_PER_MINUTE,
        idle_ttl_s: float = OPENAI_IDLE_TTL_S,
        report_writes: bool = False,
    ) -> None:
        for name, value in (
            ("machines", machines),
            ("min_tokens", min_tokens),
            ("step_tokens", step_tokens),
            ("routing_tokens", routing_tokens),
            ("overflow_per_minute", overflow_per_minute),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        if not isinstance(idle_ttl_s, (int, float)) or not 0 < idle_ttl_s <= OPENAI_MAX_TTL_S:
            raise ValueError(f"idle_ttl_s must be in (0, {OPENAI_MAX_TTL_S:.0f}] seconds, got {idle_ttl_s!r}")
        self.machines = machines
        self.min_tokens = min_tokens
        self.step_tokens = step_tokens
        self.routing_tokens = routing_tokens
        self.overflow_per_minute = overflow_per_minute
        self.idle_ttl_s = float(idle_ttl_s)
        self.report_writes = report_writes
        self._caches: list[dict[bytes, _Entry]] = [{} for _ in range(machines)]
        self._recent: dict[bytes, deque[float]] = {}  # routing group -> request times of the last minute

    def boundaries(self, n: int) -> list[int]:
        """Prefix lengths a prompt of ``n`` tokens can hit at: 1024, 1152, ... <= n."""
        return list(range(self.min_tokens, n + 1, self.step_tokens)) if n >= self.min_tokens else []

    def route(self, tokens: Tokens, key: str | None, now: float) -> tuple[int, bool]:
        """(machine, overflow) for a request: home machine by hash of the first tokens and the key; past
        ``overflow_per_minute`` requests in the last 60 s of that group, the surplus spills round-robin."""
        group = _chain(repr(key).encode("utf-8"), tokens[: self.routing_tokens])
        home = int.from_bytes(group[:8], "big") % self.machines
        recent = self._recent.setdefault(group, deque())
        while recent and recent[0] <= now - 60.0:
            recent.popleft()
        recent.append(now)
        surplus = len(recent) - self.overflow_per_minute
        if surplus <= 0 or self.machines == 1:
            return home, False
        return (home + 1 + (surplus - 1) % (self.machines - 1)) % self.machines, True

    def serve(
        self, tokens: Tokens, *, key: str | None = None, retention: str | None = None, now: float
    ) -> OpenAIServed:
        """Serve one prompt (its tokens in order: tools, then messages) at simulated time ``now``."""
        now = _check_now(now)
        if isinstance(tokens, str) or not isinstance(tokens, Sequence):
            raise TypeError(f"tokens must be a sequence of tokens, got {type(tokens).__name__}")
        if retention is not None and retention not in OPENAI_RETENTIONS:
            raise ValueError(f"prompt_cache_retention must be one of {OPENAI_RETENTIONS} or None, got {retention!r}")
        if key is not None and not isinstance(key, str):
            raise TypeError(f"prompt_cache_key must be a str or None, got {type(key).__name__}")
        ttl = OPENAI_EXTENDED_TTL_S if retention == "24h" else self.idle_ttl_s
        machine, overflow = self.route(tokens, key, now)
        cache = self._caches[machine]
        cached, digest, start, matching = 0, b"", 0, True
        bounds = self.boundaries(len(tokens))
        for end in bounds:
            digest = _chain(digest, tokens[start:end])
            start = end
            entry = cache.get(digest)
            alive = entry is not None and now - entry.used <= entry.ttl
            if matching and alive:
                cached = end
            else:
                matching = False
            if entry is None or not alive:
                cache[digest] = _Entry(used=now, ttl=ttl)
            else:
                entry.used, entry.ttl = now, max(entry.ttl, ttl)
        written = (bounds[-1] - cached) if (bounds and self.report_writes) else 0
        return OpenAIServed(len(tokens), cached, written, machine, overflow)


# ====================================================================== Anthropic
@dataclass(frozen=True)
class CacheBlock:
    """One content block of an Anthropic request (a tool, a system text block, a message's block): its
    tokens and, when marked, the TTL of its ``cache_control`` breakpoint (``"5m"`` or ``"1h"``)."""

    tokens: Tokens
    breakpoint: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.tokens, str) or not isinstance(self.tokens, Sequence):
            raise TypeError(f"CacheBlock.tokens must be a sequence of tokens, got {type(self.tokens).__name__}")
        if self.breakpoint is not None and self.breakpoint not in ANTHROPIC_TTLS:
            raise ValueError(f"breakpoint TTL must be one of {ANTHROPIC_TTLS} or None, got {self.breakpoint!r}")


@dataclass(frozen=True)
class AnthropicServed:
    """Usage of one request, as the API reports it: ``cache_read_input_tokens`` = ``read``,
    ``cache_creation_input_tokens`` = ``written`` (of which ``written_1h`` at the 1 h TTL), and
    ``input_tokens`` = ``uncached`` (after the last breakpoint, or below the minimum)."""

    prompt: int
    read: int
    written: int
    written_1h: int
    uncached: int
    breakpoints: tuple[int, ...] = field(default=())  # block indexes that carried one


@dataclass
class _Written:
    expires: float
    ttl: float


class AnthropicPromptCache:
    """Anthropic's prompt cache for one model (see the module docstring). ``serve(blocks, now=...)``."""

    def __init__(
        self,
        min_tokens: int,
        *,
        lookback_blocks: int = ANTHROPIC_LOOKBACK_BLOCKS,
        max_breakpoints: int = ANTHROPIC_MAX_BREAKPOINTS,
    ) -> None:
        for name, value in (
            ("min_tokens", min_tokens),
            ("lookback_blocks", lookback_blocks),
            ("max_breakpoints", max_breakpoints),
        ):
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be an int >= 1, got {value!r}")
        self.min_tokens = min_tokens
        self.lookback_blocks = lookback_blocks
        self.max_breakpoints = max_breakpoints
        self._entries: dict[bytes, _Written] = {}

    def serve(self, blocks: Sequence[CacheBlock], *, automatic: str | None = None, now: float) -> AnthropicServed:
        """Serve one request at simulated time ``now``; ``automatic``: the TTL of a top-level
        ``cache_control`` (a breakpoint on the last block). Raises ``ValueError`` for more than 4
        breakpoints or a 1 h breakpoint after a 5 min one, as the API rejects them."""
        now = _check_now(now)
        if isinstance(blocks, (str, bytes)) or not isinstance(blocks, Sequence):
            raise TypeError("blocks must be a sequence of CacheBlock")
        if not all(isinstance(b, CacheBlock) for b in blocks):
            raise TypeError("blocks must be CacheBlock records")
        if automatic is not None and automatic not in ANTHROPIC_TTLS:
            raise ValueError(f"automatic TTL must be one of {ANTHROPIC_TTLS} or None, got {automatic!r}")
        marks = self._breakpoints(blocks, automatic)
        ordered = sorted(marks)
        self._expire(now)
        digests: list[bytes] = []
        cum: list[int] = []
        digest, total = b"", 0
        for block in blocks:
            digest = _chain(digest, block.tokens)
            total += len(block.tokens)
            digests.append(digest)
            cum.append(total)
        read_at = -1
        for bp in ordered:  # each breakpoint: its own block, then up to lookback_blocks before it
            for i in range(bp, max(-1, bp - self.lookback_blocks - 1), -1):
                if digests[i] in self._entries:
                    read_at = max(read_at, i)
                    break
        if read_at >= 0:
            hit = self._entries[digests[read_at]]
            hit.expires = now + hit.ttl  # a hit refreshes the entry's TTL
        written = written_1h = 0
        done = cum[read_at] if read_at >= 0 else 0
        for bp in ordered:
            if bp <= read_at:
                old = self._entries.get(digests[bp])
                if old is not None:
                    old.expires = now + old.ttl
                continue
            if cum[bp] < self.min_tokens:
                continue  # below the model's minimum: not cached, no error
            ttl = ANTHROPIC_TTL_SECONDS[marks[bp]]
            self._entries[digests[bp]] = _Written(expires=now + ttl, ttl=ttl)
            segment = cum[bp] - done
            written += segment
            if marks[bp] == "1h":
                written_1h += segment
            done = cum[bp]
        read = cum[read_at] if read_at >= 0 else 0
        return AnthropicServed(total, read, written, written_1h, total - read - written, tuple(ordered))

    def _breakpoints(self, blocks: Sequence[CacheBlock], automatic: str | None) -> dict[int, str]:
        """Block index -> TTL of every breakpoint (the automatic one on the last block), checked as the API
        checks them: at most ``max_breakpoints``, no 1 h breakpoint after a 5 min one."""
        marks: dict[int, str] = {i: b.breakpoint for i, b in enumerate(blocks) if b.breakpoint is not None}
        count = len(marks) + (1 if automatic is not None and blocks else 0)
        if count > self.max_breakpoints:
            raise ValueError(
                f"A maximum of {self.max_breakpoints} blocks with cache_control may be provided. Found {count}."
            )
        if automatic is not None and blocks:
            last = len(blocks) - 1
            marks[last] = max(marks.get(last, automatic), automatic, key=ANTHROPIC_TTL_SECONDS.__getitem__)
        ordered = sorted(marks)
        for first, later in zip(ordered, ordered[1:]):
            if ANTHROPIC_TTL_SECONDS[marks[first]] < ANTHROPIC_TTL_SECONDS[marks[later]]:
                raise ValueError("a cache_control TTL of 1h must not come after one of 5m (longer TTLs first)")
        return marks

    def _expire(self, now: float) -> None:
        for k in [k for k, e in self._entries.items() if e.expires <= now]:
            del self._entries[k]

    def __len__(self) -> int:
        return len(self._entries)
