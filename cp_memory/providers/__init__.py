"""Hosted LLM providers' prompt caches: shape cp_memory's prompts for them, read what they report, count it.

cp_memory's layout (stable system and history first, memories late, dedup pointers) is what a provider's
prefix cache rewards; this package adapts it to each provider's rules (:mod:`cp_memory.providers.rules`)
without any framework and without a network call of its own:

====================================================  =====================================================
:func:`anthropic_request`                             ``cache_control`` breakpoints where the cached prefix
                                                      ends (at most 4, the caller's counted, per-model
                                                      minimum, 20-block lookback, TTL option)
:class:`PromptCacheKeys`, :func:`openai_request`      a keyed-hash ``prompt_cache_key`` per scope and the
                                                      ``prompt_cache_retention`` option
:func:`read_usage`, :class:`UsageStream`              one :class:`CacheUsage` from any provider's response,
                                                      streamed or not
:class:`SavingsAccount`                               running totals: read / written / uncached tokens and
                                                      the input cost at configurable prices
====================================================  =====================================================

docs/hosted.md has examples, the documented rules with their sources, and the benchmark.
"""

from __future__ import annotations

import importlib
from typing import Any

# loaded on first use: the mem0 wrappers import only the account (usage + prices, standard library)
_LAZY = {
    "AnthropicRequest": "cp_memory.providers.anthropic",
    "Breakpoint": "cp_memory.providers.anthropic",
    "anthropic_request": "cp_memory.providers.anthropic",
    "CacheUsage": "cp_memory.providers.usage",
    "UsageStream": "cp_memory.providers.usage",
    "read_usage": "cp_memory.providers.usage",
    "Counting": "cp_memory.providers.tokens",
    "default_counting": "cp_memory.providers.tokens",
    "PriceRatios": "cp_memory.providers.rules",
    "PromptCacheKeys": "cp_memory.providers.openai",
    "openai_request": "cp_memory.providers.openai",
    "Savings": "cp_memory.providers.account",
    "SavingsAccount": "cp_memory.providers.account",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'cp_memory.providers' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)
