"""A running savings account of prompt-cache usage: tokens read from cache, written, uncached, and cost.

Fed with :class:`~cp_memory.providers.usage.CacheUsage` records (or anything :func:`read_usage` reads) by
``ContextPilotMemory.commit(response, usage=...)``, the integrations, or your own code. Cost is the *input*
cost, in units of one uncached input token (so ratios to list prices, the same for any currency) and, where
a model's USD list price is configured, in dollars. ``without_cache`` is what the same prompts would have
cost with no prompt cache at all (every token at the input price); ``saved`` the difference (negative when
cache writes cost more than the reads recovered). No network call, thread-safe.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from ..core.checks import non_negative_int
from .rules import PriceRatios, default_prices, openai_prices
from .usage import CacheUsage, clamp_tokens, read_usage

__all__ = ["Savings", "SavingsAccount"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Savings:
    """Totals of the account so far. ``cost``/``without_cache``/``saved``: input-token units (uncached input
    token = 1); ``*_usd``: dollars, None unless every priced call's model has ``input_per_mtok``; calls with
    no known prices (``unpriced_calls``) count in the token totals only."""

    calls: int
    input_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    uncached_tokens: int
    output_tokens: int
    cost: float
    without_cache: float
    unpriced_calls: int = 0
    cost_usd: float | None = None
    without_cache_usd: float | None = None

    @property
    def saved(self) -> float:
        return self.without_cache - self.cost

    @property
    def saved_share(self) -> float:
        """Share of the no-cache input cost saved (0.0 when nothing was priced)."""
        return self.saved / self.without_cache if self.without_cache else 0.0

    @property
    def cached_share(self) -> float:
        return self.cache_read_tokens / self.input_tokens if self.input_tokens else 0.0

    def line(self) -> str:
        """One log line."""
        usd = f", ${self.cost_usd:.4f} vs ${self.without_cache_usd:.4f}" if self.cost_usd is not None else ""
        return (
            f"prompt cache: {self.calls} calls, {self.input_tokens} input tokens: {self.cache_read_tokens} read "
            f"({self.cached_share:.0%}), {self.cache_write_tokens} written, {self.uncached_tokens} uncached; "
            f"input cost {self.cost:.0f} vs {self.without_cache:.0f} without cache (saved {self.saved_share:.0%})"
            f"{usd}" + (f"; {self.unpriced_calls} calls without prices" if self.unpriced_calls else "")
        )


def _clamped(usage: CacheUsage) -> CacheUsage:
    """``usage`` with every count a non-negative int of at most ``MAX_USAGE_TOKENS`` (a record built by hand
    may carry anything)."""

    def count(value: Any, name: str) -> int:
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
        return clamp_tokens(value, name) if ok else 0

    return CacheUsage(
        usage.provider,
        count(usage.input_tokens, "input_tokens"),
        count(usage.cache_read_tokens, "cache_read_tokens"),
        count(usage.cache_write_tokens, "cache_write_tokens"),
        count(usage.output_tokens, "output_tokens"),
        count(usage.cache_write_1h_tokens, "cache_write_1h_tokens"),
        usage.model,
    )


def call_cost(usage: CacheUsage, prices: PriceRatios) -> float:
    """Input cost of one call in input-token units."""
    write_1h = usage.cache_write_1h_tokens
    return (
        usage.uncached_tokens
        + usage.cache_read_tokens * prices.read
        + (usage.cache_write_tokens - write_1h) * prices.write_5m
        + write_1h * prices.write_1h
    )


class SavingsAccount:
    """Running totals over calls. ``prices``: model name -> :class:`PriceRatios` (overrides the documented
    defaults of :func:`cp_memory.providers.rules.default_prices`); ``log_every``: log the totals at INFO
    every that many calls (0: only when :meth:`log` is called)."""

    def __init__(self, prices: Mapping[str, PriceRatios] | None = None, *, log_every: int = 0) -> None:
        non_negative_int(log_every, "log_every")
        self._prices: dict[str, PriceRatios] = {}
        for model, p in (prices or {}).items():
            self.set_prices(model, p)
        self.log_every = log_every
        self._lock = threading.Lock()
        self._total = CacheUsage()
        self._calls = 0
        self._unpriced = 0
        self._cost = 0.0
        self._without = 0.0
        self._usd: float | None = 0.0
        self._usd_without: float | None = 0.0
        self._warned: set[str] = set()

    def set_prices(self, model: str, prices: PriceRatios) -> None:
        if not isinstance(model, str) or not model:
            raise ValueError("model must be a non-empty str")
        if not isinstance(prices, PriceRatios):
            raise TypeError(f"prices must be a PriceRatios, got {type(prices).__name__}")
        self._prices[model] = prices

    def prices_for(self, usage: CacheUsage) -> PriceRatios | None:
        if usage.model and usage.model in self._prices:
            return self._prices[usage.model]
        if usage.provider == "openai" and usage.model and not openai_prices(usage.model)[1]:
            if usage.model not in self._warned:
                self._warned.add(usage.model)
                logger.warning(
                    "no price ratios known for OpenAI model %r: assuming cached input at 0.5x (the smallest "
                    "documented discount); set SavingsAccount.set_prices(...) for exact figures",
                    usage.model,
                )
        return default_prices(usage.provider, usage.model)

    def add(self, usage: Any, *, model: str | None = None, provider: str | None = None) -> CacheUsage:
        """Record one call's usage (a :class:`CacheUsage`, or anything :func:`read_usage` reads); returns
        the record added. Never raises: odd usage counts as zeros, a count over
        :data:`~cp_memory.providers.usage.MAX_USAGE_TOKENS` is clamped to it (logged), and an internal
        failure is logged and the call left out of the totals."""
        try:
            record = _clamped(
                usage if isinstance(usage, CacheUsage) else read_usage(usage, provider=provider, model=model)
            )
            if model and record.model != model:
                record = replace(record, model=model)
            calls = self._count(record, self.prices_for(record))
        except Exception:  # bookkeeping must never fail the caller's committed turn
            logger.warning("usage left out of the savings account: it could not be added", exc_info=True)
            return CacheUsage(provider=provider or "unknown", model=model)
        if self.log_every and calls % self.log_every == 0:
            self.log()
        return record

    def _count(self, record: CacheUsage, prices: PriceRatios | None) -> int:
        """Add one record to the totals; returns the number of calls counted so far."""
        with self._lock:
            self._calls += 1
            self._total = self._total + record
            if prices is None:
                self._unpriced += 1
                return self._calls
            cost = call_cost(record, prices)
            self._cost += cost
            self._without += record.input_tokens
            if prices.input_per_mtok is None or self._usd is None or self._usd_without is None:
                self._usd = self._usd_without = None
            else:
                self._usd += cost * prices.input_per_mtok / 1e6
                self._usd_without += record.input_tokens * prices.input_per_mtok / 1e6
            return self._calls

    def summary(self) -> Savings:
        with self._lock:
            t = self._total
            priced = self._calls - self._unpriced
            return Savings(
                calls=self._calls,
                input_tokens=t.input_tokens,
                cache_read_tokens=t.cache_read_tokens,
                cache_write_tokens=t.cache_write_tokens,
                uncached_tokens=t.uncached_tokens,
                output_tokens=t.output_tokens,
                cost=self._cost,
                without_cache=self._without,
                unpriced_calls=self._unpriced,
                cost_usd=self._usd if priced else None,
                without_cache_usd=self._usd_without if priced else None,
            )

    def log(self, level: int = logging.INFO) -> Savings:
        """Log the totals (one line, INFO by default) and return them."""
        s = self.summary()
        logger.log(level, "%s", s.line())
        return s

    def reset(self) -> None:
        with self._lock:
            self._total = CacheUsage()
            self._calls = self._unpriced = 0
            self._cost = self._without = 0.0
            self._usd = self._usd_without = 0.0
