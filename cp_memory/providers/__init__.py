"""Hosted LLM providers' prompt caches: shape cp_memory's prompts for them, read what they report, count it.

cp_memory's layout (stable system and history first, memories late, dedup pointers) is what a provider's
prefix cache rewards; this package adapts it to each provider's rules (:mod:`cp_memory.provider_rules`)
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

from ..provider_rules import PriceRatios
from .account import Savings, SavingsAccount
from .anthropic import AnthropicRequest, Breakpoint, anthropic_request
from .openai import PromptCacheKeys, openai_request
from .tokens import Counting, default_counting
from .usage import CacheUsage, UsageStream, read_usage

__all__ = [
    "AnthropicRequest",
    "Breakpoint",
    "CacheUsage",
    "Counting",
    "PriceRatios",
    "PromptCacheKeys",
    "Savings",
    "SavingsAccount",
    "UsageStream",
    "anthropic_request",
    "default_counting",
    "openai_request",
    "read_usage",
]
