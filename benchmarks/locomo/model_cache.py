"""The model-cache engine: no LLM, every prompt served by :mod:`benchmarks.common.cache_model` (deterministic,
machine-independent hit ratios; TTFT, answers and F1 are n/a)."""

from __future__ import annotations

from typing import Any

from benchmarks.common.cache_model import BlockPrefixCache, LlamaServerCache, PrefixCacheModel

from .engines import BenchEngine, Reply, library_default, messages_text

__all__ = ["CACHE_BLOCK", "CACHE_POLICIES", "CACHE_TOKENS", "ModelCacheEngine", "make_cache_model"]

#: ``--cache-policy`` choices: the engine each one models
CACHE_POLICIES = ("radix", "llama.cpp")
#: ``--cache-tokens`` and ``--cache-block``: the radix cache model's own defaults
CACHE_TOKENS: int = library_default(BlockPrefixCache, "capacity_tokens")
CACHE_BLOCK: int = library_default(BlockPrefixCache, "block_size")


def make_cache_model(
    policy: str = "radix", *, capacity_tokens: int | None = CACHE_TOKENS, block_size: int = CACHE_BLOCK
) -> PrefixCacheModel:
    """A fresh :mod:`benchmarks.common.cache_model` cache: ``radix`` (SGLang/vLLM: chained blocks of ``block_size``
    tokens, LRU over ``capacity_tokens``) or ``llama.cpp`` (one slot + host prompt cache of
    ``capacity_tokens``). Both on regex tokens (no tokenizer needed)."""
    if policy == "radix":
        return BlockPrefixCache(capacity_tokens, block_size=block_size)
    if policy == "llama.cpp":
        return LlamaServerCache(capacity_tokens)
    raise ValueError(f"unknown cache policy {policy!r}: choose from {CACHE_POLICIES}")


class ModelCacheEngine(BenchEngine):
    """No LLM: every prompt is served by :mod:`benchmarks.common.cache_model` (deterministic, machine-independent).
    Gives the hit ratio only (regex tokens); TTFT, answers and F1 are n/a."""

    kind = "model-cache"
    measures_ttft = False

    def __init__(
        self, *, capacity_tokens: int = CACHE_TOKENS, policy: str = "radix", block_size: int = CACHE_BLOCK
    ) -> None:
        super().__init__(f"benchmarks.common.cache_model {policy} (no LLM)")
        self.capacity_tokens = capacity_tokens
        self.policy = policy
        self.block_size = block_size
        self.cache = make_cache_model(policy, capacity_tokens=capacity_tokens, block_size=block_size)

    def _flush(self) -> str:
        self.cache = make_cache_model(self.policy, capacity_tokens=self.capacity_tokens, block_size=self.block_size)
        return "new-cache"

    def warmup(self, n: int) -> None:
        return None

    def complete(self, prompt: str, *, max_tokens: int) -> Reply:
        served = self.cache.serve(prompt)
        return Reply("", None, None, served.prompt, served.cached)

    def chat(self, messages: list[dict[str, Any]], *, max_tokens: int) -> Reply:
        return self.complete(messages_text(messages), max_tokens=max_tokens)

    def describe(self) -> dict[str, Any]:
        return {
            **super().describe(),
            "capacity_tokens": self.capacity_tokens,
            "policy": self.policy,
            "block_tokens": self.block_size if self.policy == "radix" else 1,
            "note": "hit ratio from benchmarks.common.cache_model (regex tokens); no LLM, TTFT not measured",
        }
