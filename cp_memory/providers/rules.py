"""The documented prompt-cache rules of the hosted providers: one source for every number.

Each constant names the page it comes from (docs/hosted.md quotes and cites them). The cache models
(:mod:`benchmarks.common.provider_cache`) and the request builders (:mod:`cp_memory.providers`) read them from here.

OpenAI (developers.openai.com/api/docs/guides/prompt-caching; the Azure OpenAI copy of the same page for the
numbers the OpenAI page keeps in collapsed sections): automatic caching of exact prefixes from 1,024 tokens,
hits in 128-token steps after that; requests routed by a hash of about the first 256 tokens together with
``prompt_cache_key``; more than about 15 requests a minute for one prefix and key overflow to other machines;
in-memory retention 5-10 minutes idle, at most an hour; ``prompt_cache_retention="24h"`` up to 24 hours.
Cached input is billed at 0.1x (GPT-5 family), 0.25x (GPT-4.1) or 0.5x (GPT-4o, o-series) of input; cache
writes are free before GPT-5.6 and 1.25x from GPT-5.6 on (reported as ``cache_write_tokens``).

Anthropic (platform.claude.com/docs/en/build-with-claude/prompt-caching, .../about-claude/pricing): at most 4
``cache_control`` breakpoints per request, prefixes in the order tools -> system -> messages; a breakpoint
looks back about 20 content blocks for an earlier entry; TTL 5 minutes (refreshed on every hit) or
``"ttl": "1h"``, longer TTLs before shorter ones; writes 1.25x (5 min) or 2x (1 h), reads 0.1x of input; a
minimum cacheable prefix per model below which nothing is cached and no error is returned.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..core.checks import number_at_least

__all__ = [
    "ANTHROPIC_DEFAULT_MIN_TOKENS",
    "ANTHROPIC_LOOKBACK_BLOCKS",
    "ANTHROPIC_MAX_BREAKPOINTS",
    "ANTHROPIC_READ_RATIO",
    "ANTHROPIC_TTLS",
    "ANTHROPIC_TTL_SECONDS",
    "ANTHROPIC_WRITE_RATIO",
    "OPENAI_EXTENDED_TTL_S",
    "OPENAI_IDLE_TTL_S",
    "OPENAI_MAX_TTL_S",
    "OPENAI_MIN_TOKENS",
    "OPENAI_OVERFLOW_PER_MINUTE",
    "OPENAI_RETENTIONS",
    "OPENAI_ROUTING_TOKENS",
    "OPENAI_STEP_TOKENS",
    "PriceRatios",
    "anthropic_min_tokens",
    "default_prices",
    "openai_prices",
]

# ---------------------------------------------------------------- OpenAI
OPENAI_MIN_TOKENS = 1024  #: shorter prompts are never cached
OPENAI_STEP_TOKENS = 128  #: after the first 1,024 tokens, hits grow in 128-token steps
OPENAI_ROUTING_TOKENS = 256  #: "the hash typically uses the first 256 tokens"
OPENAI_OVERFLOW_PER_MINUTE = 15  #: about 15 requests/min per prefix + key before overflow to other machines
OPENAI_IDLE_TTL_S = 300.0  #: "5 to 10 minutes of inactivity": the model takes the short end
OPENAI_MAX_TTL_S = 3600.0  #: "always removed within one hour of the cache's last use"
OPENAI_EXTENDED_TTL_S = 86_400.0  #: prompt_cache_retention="24h"
OPENAI_RETENTIONS = ("in_memory", "24h")

# ---------------------------------------------------------------- Anthropic
ANTHROPIC_MAX_BREAKPOINTS = 4
ANTHROPIC_LOOKBACK_BLOCKS = 20
ANTHROPIC_TTLS = ("5m", "1h")
ANTHROPIC_TTL_SECONDS = {"5m": 300.0, "1h": 3600.0}
ANTHROPIC_WRITE_RATIO = {"5m": 1.25, "1h": 2.0}
ANTHROPIC_READ_RATIO = 0.1
#: the largest documented minimum: used for a model this table does not know (with a warning)
ANTHROPIC_DEFAULT_MIN_TOKENS = 4096

# model family (date suffix removed) -> minimum cacheable prefix, from the prompt-caching page's table.
# Claude Sonnet 4.6 is listed at 1,024 but reported (anthropic-sdk-python issue tracker) to cache only from
# 2,048; the larger figure is kept, a breakpoint placed too late costs less than one that never caches.
_ANTHROPIC_MINIMUMS = {
    "claude-opus-4-6": 4096,
    "claude-opus-4-5": 4096,
    "claude-haiku-4-5": 4096,
    "claude-sonnet-4-6": 2048,
    "claude-sonnet-4-5": 1024,
    "claude-opus-4-1": 1024,
    "claude-opus-4": 1024,
    "claude-sonnet-4": 1024,
    "claude-3-7-sonnet": 1024,
    "claude-3-5-sonnet": 1024,
    "claude-3-opus": 1024,
    "claude-3-5-haiku": 2048,
    "claude-3-haiku": 2048,
}
_ALIASES = {"claude-opus-4-0": "claude-opus-4", "claude-sonnet-4-0": "claude-sonnet-4"}
_DATE = re.compile(r"-(\d{8}|latest)$")


def _family(model: str) -> str:
    name = model.strip().lower()
    for prefix in ("anthropic/", "anthropic."):  # gateway-style ids
        if name.startswith(prefix):
            name = name[len(prefix) :]
    name = _DATE.sub("", name)
    name = re.sub(r"-v\d+(:\d+)?$", "", name)  # Bedrock-style "-v1:0"
    return _ALIASES.get(name, name)


def anthropic_min_tokens(model: str | None) -> tuple[int, bool]:
    """``(minimum cacheable prefix in tokens, known)`` for an Anthropic model id.

    An unknown model gets :data:`ANTHROPIC_DEFAULT_MIN_TOKENS` (the largest documented minimum) and
    ``known=False``; callers warn once. Never raises.
    """
    if not isinstance(model, str) or not model.strip():
        return ANTHROPIC_DEFAULT_MIN_TOKENS, False
    found = _ANTHROPIC_MINIMUMS.get(_family(model))
    return (found, True) if found is not None else (ANTHROPIC_DEFAULT_MIN_TOKENS, False)


# ---------------------------------------------------------------- prices
@dataclass(frozen=True)
class PriceRatios:
    """Prices of one model relative to its uncached input token (= 1.0).

    ``input_per_mtok``: the list price of an uncached input token in USD per million, when known; with it
    the savings account also reports dollars. Configure your own per model (``SavingsAccount(prices=...)``).
    """

    read: float
    write_5m: float = 1.0
    write_1h: float = 1.0
    input_per_mtok: float | None = None

    def __post_init__(self) -> None:
        for name in ("read", "write_5m", "write_1h"):
            number_at_least(getattr(self, name), f"PriceRatios.{name}", 0)
        if self.input_per_mtok is not None:
            number_at_least(self.input_per_mtok, "PriceRatios.input_per_mtok", 0)


ANTHROPIC_PRICES = PriceRatios(
    read=ANTHROPIC_READ_RATIO, write_5m=ANTHROPIC_WRITE_RATIO["5m"], write_1h=ANTHROPIC_WRITE_RATIO["1h"]
)
_GPT = re.compile(r"^(?:openai/)?gpt-(\d+)(?:\.(\d+))?")


def openai_prices(model: str | None) -> tuple[PriceRatios, bool]:
    """``(price ratios, known)`` for an OpenAI model id: cached reads 0.1x (GPT-5 family and later), 0.25x
    (GPT-4.1), 0.5x (GPT-4o, o-series, and any model not recognised: the smallest discount); cache writes
    free before GPT-5.6, 1.25x from GPT-5.6 on."""
    name = (model or "").strip().lower()
    m = _GPT.match(name)
    if m:
        major, minor = int(m.group(1)), int(m.group(2) or 0)
        if major >= 5:
            write = 1.25 if (major, minor) >= (5, 6) else 1.0
            return PriceRatios(read=0.1, write_5m=write, write_1h=write), True
        if name.startswith(("gpt-4.1", "openai/gpt-4.1")):
            return PriceRatios(read=0.25), True
        if name.startswith(("gpt-4o", "openai/gpt-4o")):
            return PriceRatios(read=0.5), True
    if re.match(r"^(?:openai/)?o\d", name):
        return PriceRatios(read=0.5), True
    return PriceRatios(read=0.5), False


def default_prices(provider: str, model: str | None) -> PriceRatios | None:
    """The documented list-price ratios for ``provider``'s ``model``; None where the project has none on
    record (Gemini, DeepSeek, self-hosted engines: configure them, or only tokens are counted)."""
    if provider == "anthropic":
        return ANTHROPIC_PRICES
    if provider == "openai":
        return openai_prices(model)[0]
    return None
