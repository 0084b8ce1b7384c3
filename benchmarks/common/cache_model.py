"""A deterministic model of an engine's prefix cache: what a prompt sequence would get from cache.

Machine-independent (no timing, no I/O), so two orderings of the same requests compare exactly. Two
policies, both fed token ids (from the engine's ``/tokenize``) or text (split by a tokenizer function,
:func:`regex_tokens` by default):

:class:`BlockPrefixCache` — SGLang RadixCache / vLLM automatic prefix caching: every prompt's tokens are
    cut into ``block_size`` blocks (vLLM: 16; SGLang: 1 = per token); a block is identified by its tokens
    *and its whole prefix* (a chained key: parent block + tokens), so it matches only at the same position
    after the same text. Only full blocks are cached. Capacity is in tokens with LRU eviction; the blocks of
    a request are touched deepest first, so the tail of a prompt is evicted before its head (both engines
    free tail blocks first) and a cached block's prefix is always cached too.

:class:`LlamaServerCache` — llama.cpp's ``llama-server`` with one slot and the host prompt cache
    (``--cache-ram``), after ``tools/server`` of the llama.cpp bundled in llama-cpp-python 0.3.36: the slot
    keeps its last prompt (plus generated tokens); a request whose longest common prefix with it is at most
    ``slot_similarity`` (0.1) of the prompt, or keeps less than half of the slot, saves the slot into the
    host cache and loads the cached prompt that keeps more of itself *and* covers more of the request
    (``f_keep`` >= 0.25). Cached tokens = common prefix with the slot after that swap. Exact per request
    on llama-server (tests/benchmarks/test_cache_model.py checks it against the reported ``cached_tokens``).

Both leave at least one prompt token to compute (an engine needs the last position's logits), and
``generated`` tokens appended after a prompt (unique, they never match a later prompt) are cached with it.

The hosted providers' caches (:class:`OpenAIPromptCache`, :class:`AnthropicPromptCache`, after their
documented rules) live in :mod:`benchmarks.common.provider_cache` and are importable from here too.
"""

from __future__ import annotations

import re
from collections import OrderedDict, deque
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .provider_cache import AnthropicPromptCache, OpenAIPromptCache

__all__ = [
    "AnthropicPromptCache",
    "BlockPrefixCache",
    "CacheStats",
    "LlamaServerCache",
    "OpenAIPromptCache",
    "PrefixCacheModel",
    "Served",
    "char_tokens",
    "common_prefix",
    "regex_tokens",
]

_HOSTED = ("AnthropicPromptCache", "OpenAIPromptCache")


def __getattr__(name: str) -> Any:
    """The hosted providers' cache models, from :mod:`benchmarks.common.provider_cache` (imported on first use)."""
    if name in _HOSTED:
        from . import provider_cache

        return getattr(provider_cache, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_TOKEN = re.compile(r"\w+|[^\w\s]")

Tokens = Sequence[Hashable]
Tokenizer = Callable[[str], Sequence[Hashable]]


def regex_tokens(text: str) -> list[str]:
    """Words and single punctuation marks: a tokenizer-free stand-in (about 1.3 BPE tokens each)."""
    return _TOKEN.findall(text)


def char_tokens(text: str) -> list[str]:
    """One token per character (the finest granularity: bytes-like prefixes)."""
    return list(text)


def common_prefix(a: Sequence[Hashable], b: Sequence[Hashable]) -> int:
    """Length of the longest common prefix of two token sequences."""
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


@dataclass(frozen=True)
class Served:
    """One request: ``cached`` of its ``prompt`` tokens came from the cache."""

    cached: int
    prompt: int


@dataclass(frozen=True)
class CacheStats:
    requests: int
    cached_tokens: int
    prompt_tokens: int

    @property
    def hit_ratio(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0

    @property
    def prefill_tokens(self) -> int:
        return self.prompt_tokens - self.cached_tokens


class PrefixCacheModel:
    """Common driver: tokenize, serve, count. Subclasses implement :meth:`_serve` on token sequences."""

    def __init__(self, tokenizer: Tokenizer = regex_tokens) -> None:
        if not callable(tokenizer):
            raise TypeError(f"tokenizer must be callable (text -> tokens), got {type(tokenizer).__name__}")
        self.tokenizer = tokenizer
        self._requests = 0
        self._cached = 0
        self._prompt = 0
        self._generated = 0  # counter for unique generated-token sentinels

    def serve(self, prompt: str | Tokens, *, generated: int = 0) -> Served:
        """Serve one prompt (text or token ids); ``generated`` tokens follow it in the cache."""
        if isinstance(prompt, str):
            tokens: Tokens = self.tokenizer(prompt)
        elif isinstance(prompt, Sequence):
            tokens = prompt
        else:
            raise TypeError(f"prompt must be a str or a sequence of tokens, got {type(prompt).__name__}")
        if not isinstance(generated, int) or isinstance(generated, bool) or generated < 0:
            raise ValueError(f"generated must be an int >= 0, got {generated!r}")
        tail = [("<generated>", self._generated + i) for i in range(generated)]
        self._generated += generated
        cached = self._serve(tokens, tail) if tokens else 0
        out = Served(cached, len(tokens))
        self._requests += 1
        self._cached += out.cached
        self._prompt += out.prompt
        return out

    def _serve(self, tokens: Tokens, tail: list[tuple[str, int]]) -> int:
        raise NotImplementedError

    @property
    def stats(self) -> CacheStats:
        return CacheStats(self._requests, self._cached, self._prompt)

    @property
    def ratio(self) -> float:
        """Cached / prompt tokens over every request so far."""
        return self.stats.hit_ratio


class BlockPrefixCache(PrefixCacheModel):
    """Chained-block prefix cache with LRU over blocks (SGLang RadixCache: ``block_size=1``; vLLM: 16)."""

    def __init__(
        self, capacity_tokens: int | None = 65_536, *, block_size: int = 16, tokenizer: Tokenizer = regex_tokens
    ) -> None:
        super().__init__(tokenizer)
        if not isinstance(block_size, int) or isinstance(block_size, bool) or block_size < 1:
            raise ValueError(f"block_size must be an int >= 1, got {block_size!r}")
        if capacity_tokens is not None and (not isinstance(capacity_tokens, int) or capacity_tokens < block_size):
            raise ValueError(f"capacity_tokens must be None or an int >= block_size, got {capacity_tokens!r}")
        self.block_size = block_size
        self.capacity_tokens = capacity_tokens
        self._capacity = None if capacity_tokens is None else capacity_tokens // block_size
        self._ids: dict[tuple[int, tuple[Hashable, ...]], int] = {}  # (parent id, block tokens) -> id
        self._key_of: dict[int, tuple[int, tuple[Hashable, ...]]] = {}
        self._lru: OrderedDict[int, None] = OrderedDict()  # least recent first
        self._next = 1  # 0 = the empty prefix

    @property
    def cached_blocks(self) -> int:
        return len(self._lru)

    def _serve(self, tokens: Tokens, tail: list[tuple[str, int]]) -> int:
        seq = list(tokens) + list(tail)
        b = self.block_size
        parent, path, matched, matching = 0, [], 0, True
        for start in range(0, len(seq) - len(seq) % b, b):
            key = (parent, tuple(seq[start : start + b]))
            node = self._ids.get(key)
            if node is None:
                matching = False
                node = self._ids[key] = self._next
                self._key_of[node] = key
                self._next += 1
            elif matching and start + b <= len(tokens):
                matched += b
            path.append(node)
            parent = node
        for node in reversed(path):  # deepest first: the head of the prompt stays most recent
            self._lru[node] = None
            self._lru.move_to_end(node)
        if self._capacity is not None:
            while len(self._lru) > self._capacity:
                old, _ = self._lru.popitem(last=False)
                del self._ids[self._key_of.pop(old)]
        return min(matched, len(tokens) - 1)


class LlamaServerCache(PrefixCacheModel):
    """llama-server, one slot, host prompt cache (see the module docstring for the policy)."""

    def __init__(
        self,
        host_capacity_tokens: int | None = None,
        *,
        host_cache: bool = True,
        slot_similarity: float = 0.1,
        tokenizer: Tokenizer = regex_tokens,
    ) -> None:
        super().__init__(tokenizer)
        if host_capacity_tokens is not None and (not isinstance(host_capacity_tokens, int) or host_capacity_tokens < 1):
            raise ValueError(f"host_capacity_tokens must be None or an int >= 1, got {host_capacity_tokens!r}")
        if not 0.0 <= slot_similarity <= 1.0:
            raise ValueError(f"slot_similarity must be in [0, 1], got {slot_similarity!r}")
        self.host_cache = host_cache
        self.host_capacity_tokens = host_capacity_tokens
        self.slot_similarity = slot_similarity
        self.slot: tuple[Hashable, ...] = ()
        self.states: deque[tuple[Hashable, ...]] = deque()  # host prompt cache, oldest first

    def _serve(self, tokens: Tokens, tail: list[tuple[str, int]]) -> int:
        new = tuple(tokens)
        update = True  # no slot selected by similarity: "selected by LRU"
        if self.slot_similarity != 0.0 and self.slot:
            lcp = common_prefix(self.slot, new)
            if lcp / len(new) > self.slot_similarity:
                update = lcp / len(self.slot) < 0.5  # about to lose most of the slot: save it first
        if update and self.host_cache:
            self._save()
            self._load(new)
            self._trim()
        n_past = common_prefix(self.slot, new)
        if n_past == len(new):
            n_past -= 1  # at least one token is evaluated
        self.slot = new + tuple(tail)
        return n_past

    def _size(self) -> int:
        return sum(len(s) for s in self.states)

    def _save(self) -> None:
        slot = self.slot
        if not slot:
            return
        if any(common_prefix(s, slot) == len(slot) for s in self.states):
            return  # already held by a longer cached prompt
        cap = self.host_capacity_tokens
        if cap is not None and len(slot) > cap:
            return
        self.states = deque(s for s in self.states if common_prefix(s, slot) != len(s))
        while cap is not None and self.states and self._size() + len(slot) > cap:
            self.states.popleft()
        self.states.append(slot)

    def _load(self, new: tuple[Hashable, ...]) -> None:
        lcp = common_prefix(self.slot, new)
        keep_best = lcp / len(self.slot) if self.slot else -1.0
        sim_best = lcp / len(new)
        best = None
        for i, state in enumerate(self.states):
            cur = common_prefix(state, new)
            keep, sim = cur / len(state), cur / len(new)
            if keep < 0.25:
                continue
            if keep_best < keep and sim_best < sim:
                keep_best, sim_best, best = keep, sim, i
        if best is not None:
            self.slot = self.states[best]
            del self.states[best]

    def _trim(self) -> None:
        cap = self.host_capacity_tokens
        while cap is not None and self.states and self._size() > cap:
            self.states.popleft()
