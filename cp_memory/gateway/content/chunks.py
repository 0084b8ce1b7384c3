"""Content-defined chunks of a long text, cut on line boundaries (a gear rolling hash over lines).

Each line is one symbol whose gear value is the first 8 bytes of its BLAKE2b digest (deterministic across
processes, no table to ship); the rolling value is ``h = (h << 1) + gear(line)`` modulo 2**64, so its low
``b`` bits depend on the last ``b`` lines only. A chunk ends after a line when it holds at least
:data:`MIN_CHUNK_CHARS` and the low bits of ``h`` are zero: :data:`HARD_MASK_BITS` of them while the chunk
is under :data:`AVG_CHUNK_CHARS` (rarer cuts), :data:`EASY_MASK_BITS` above it (FastCDC's normalisation);
it always ends before it would pass :data:`MAX_CHUNK_CHARS` (a single longer line is a chunk of its own).
An edit in the middle of a file changes the chunks around it only: the cut points before and after it
depend on the lines near them, not on offsets.
"""

from __future__ import annotations

import hashlib

__all__ = ["AVG_CHUNK_CHARS", "EASY_MASK_BITS", "HARD_MASK_BITS", "MAX_CHUNK_CHARS", "MIN_CHUNK_CHARS", "chunk_spans"]

MIN_CHUNK_CHARS = 256
AVG_CHUNK_CHARS = 1024
MAX_CHUNK_CHARS = 4096
HARD_MASK_BITS = 4
EASY_MASK_BITS = 2
_M64 = (1 << 64) - 1


def _gear(line: str) -> int:
    return int.from_bytes(hashlib.blake2b(line.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "little")


def chunk_spans(text: str) -> list[tuple[int, int]]:
    """``[start, end)`` spans covering ``text`` in order, each ending at a line end (or the text's end)."""
    spans: list[tuple[int, int]] = []
    start = pos = 0
    h = 0
    hard, easy = (1 << HARD_MASK_BITS) - 1, (1 << EASY_MASK_BITS) - 1
    for line in text.splitlines(keepends=True):
        size = pos - start
        if size and size + len(line) > MAX_CHUNK_CHARS:
            spans.append((start, pos))
            start, size = pos, 0
        pos += len(line)
        h = ((h << 1) + _gear(line)) & _M64
        size = pos - start
        mask = hard if size < AVG_CHUNK_CHARS else easy
        if size >= MIN_CHUNK_CHARS and h & mask == 0:
            spans.append((start, pos))
            start = pos
    if start < len(text):
        spans.append((start, len(text)))
    return spans
