"""Pointers instead of text the model already sees: whole blocks (location annotations) and unchanged
chunks of long blocks.

A block (a whole tool result, or the body of a found block) whose exact text the session forwarded in full
before is replaced by the core's location annotation (:func:`cp_memory.core.annotations.location_annotation`:
``Please refer to the result of tool call toolu_01 in the previous conversation.``; a copy earlier in the
same request reads ``... above has the same content.``). A long text most of whose content-defined chunks
(:mod:`cp_memory.gateway.content.chunks`) the history shows becomes, run by run, ``Please refer to lines
12-40 of the result of tool call toolu_01 in the previous conversation.`` lines plus its new lines. Inside a
chunk the history does not show whole, a long line (a paragraph of at least :data:`MIN_LINE_POINTER_CHARS`)
it shows byte for byte is pointed to on its own (``Please refer to line 7 of ...``): two documents that share
paragraphs word for word, or a part re-read whose chunk edges moved, send the shared paragraphs once. A line a
read tool numbered keeps its own number, and only the text after it is compared and replaced.

**Never a pointer to text the model does not see**: every candidate location is checked against the request
being forwarded (after prefix replay: what the model sees), and must hold the byte-identical text in an
earlier segment (a committed location: before the new part; one from this request: an earlier holder). A
client that compacted or edited its history simply gets no pointer.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ...core.annotations import SAME_TURN_TEMPLATE, location_annotation
from .chunks import chunk_spans
from .finders import BlockRule, FoundBlock
from .holders import text_at
from .records import Where, text_key

__all__ = [
    "CHUNK_TEMPLATE",
    "MIN_BLOCK_CHARS",
    "MIN_CHUNKED_CHARS",
    "MIN_CHUNK_SAVING_CHARS",
    "MIN_LINE_POINTER_CHARS",
    "Found",
    "Lookup",
    "block_pointer",
    "chunk_rewrite",
    "long_lines",
    "shown_text",
]

#: the shortest text replaced by a pointer (a pointer costs ~20 tokens), and a pointer must halve it
MIN_BLOCK_CHARS = 200
#: the shortest text cut into chunks (shorter ones are whole blocks or nothing)
MIN_CHUNKED_CHARS = 1024
#: a chunked rewrite must save at least this many characters (~30 tokens), each of its pointers halving what it
#: replaces: one paragraph a new document shares with one already sent is enough (a share of the text is not
#: asked for: a 9,000-character report quoting three known paragraphs saves them as surely as a short one)
MIN_CHUNK_SAVING_CHARS = 120
#: the pointer to a run of unchanged chunks (lines of the text it points to, 1-based)
CHUNK_TEMPLATE = "Please refer to lines {first}-{last} of {label} in the previous conversation."
LINE_TEMPLATE = "Please refer to line {first} of {label} in the previous conversation."
#: the shortest line pointed to on its own (a pointer line is ~90 characters: it must at least halve the line)
MIN_LINE_POINTER_CHARS = 240
#: a read tool's line number in front of a line (``cat -n``, Claude Code's ``Read``)
_LINE_LABEL = re.compile(r" *\d{1,7}(?:\t|\u2192)")


@dataclass(frozen=True)
class Found:
    """A verified location: ``where`` it is and whether it is earlier in this same request."""

    where: Where
    same_request: bool


#: text key -> a verified location of that exact text, or None
Lookup = Callable[[str, str], Found | None]


def shown_text(segs: list[Any], where: Where) -> str | None:
    """The text the forwarded request shows at ``where`` (None when the path leads nowhere)."""
    if not 0 <= where.segment < len(segs):
        return None
    holder = text_at(segs[where.segment], where.path)
    return None if holder is None or where.end > len(holder) else holder[where.start : where.end]


def block_pointer(block: FoundBlock | None, body: str, lookup: Lookup) -> str | None:
    """The replacement of ``body`` (a block's body, or a whole tool result when ``block`` is None), or None
    when it is too short, not shown earlier, or its pointer would not halve it."""
    if len(body) < MIN_BLOCK_CHARS:
        return None
    found = lookup(text_key(body), body)
    if found is None:
        return None
    key = text_key(body)
    if found.same_request:
        pointer = SAME_TURN_TEMPLATE.format(label=found.where.label)
    else:
        pointer = location_annotation(key, label=found.where.label)
    if block is not None and block.rule is BlockRule.JSON_RESULTS:
        pointer = json.dumps(pointer, ensure_ascii=False)
    return pointer if 2 * len(pointer) <= len(body) else None


def _pointer_line(source: str, run: tuple[Where, int, int], text: str) -> str:
    where, start, end = run
    piece = text[start:end]
    first = source.count("\n", 0, where.start) + 1
    last = first + piece.count("\n") - (1 if piece.endswith("\n") else 0)
    template = LINE_TEMPLATE if last == first else CHUNK_TEMPLATE
    line = template.format(first=first, last=last, label=where.label)
    return line + "\n" if piece.endswith("\n") else line


def long_lines(text: str, start: int, end: int) -> list[tuple[int, int]]:
    """The ``[start, end)`` spans of the lines of ``text[start:end]`` of at least :data:`MIN_LINE_POINTER_CHARS`
    characters: the whole line with its newline, or, for a line a read tool numbered (``12\t`` or ``12→``, as
    Claude Code's ``Read`` shows files), only the text after its number (the number stays: the same paragraph
    of another file, or of another part of the file, has another one)."""
    out = []
    pos = start
    for line in text[start:end].splitlines(keepends=True):
        label = _LINE_LABEL.match(line)
        if label is not None:
            body = line[label.end() :].rstrip("\r\n")
            if len(body) >= MIN_LINE_POINTER_CHARS:
                out.append((pos + label.end(), pos + label.end() + len(body)))
        elif len(line.rstrip("\r\n")) >= MIN_LINE_POINTER_CHARS:
            out.append((pos, pos + len(line)))
        pos += len(line)
    return out


def _pieces(text: str, lookup: Lookup) -> list[tuple[Found | None, int, int]]:
    """Chunk by chunk, and line by line inside a chunk not shown whole: (its verified location or None, start,
    end)."""
    out: list[tuple[Found | None, int, int]] = []
    for start, end in chunk_spans(text):
        piece = text[start:end]
        found = lookup(text_key(piece), piece) if piece.strip() else None
        if found is not None:
            out.append((found, start, end))
            continue
        pos = start
        for first, last in long_lines(text, start, end):
            line = lookup(text_key(text[first:last]), text[first:last])
            if line is None:
                continue
            if pos < first:
                out.append((None, pos, first))
            out.append((line, first, last))
            pos = last
        if pos < end:
            out.append((None, pos, end))
    return out


def _runs(text: str, lookup: Lookup) -> list[tuple[Where | None, int, int]]:
    """Piece by piece: (source location or None, start, end), contiguous pointed pieces merged."""
    out: list[tuple[Where | None, int, int]] = []
    for found, start, end in _pieces(text, lookup):
        where = found.where if found is not None else None
        last = out[-1] if out else None
        if where is not None and last is not None and last[0] is not None:
            prev = last[0]
            if (prev.segment, prev.path, prev.end) == (where.segment, where.path, where.start):
                merged = Where(prev.segment, prev.path, prev.start, where.end, prev.label)
                out[-1] = (merged, last[1], end)
                continue
        if where is None and last is not None and last[0] is None:
            out[-1] = (None, last[1], end)
            continue
        out.append((where, start, end))
    return out


def chunk_rewrite(text: str, lookup: Lookup, source: Callable[[Where], str | None]) -> str | None:
    """``text`` as pointers to the runs of its chunks the history shows plus its new lines (a run whose pointer
    would not halve it stays text), or None when that saves less than :data:`MIN_CHUNK_SAVING_CHARS`.
    ``source(where)`` is the whole string a location lies in (for its line numbers)."""
    if len(text) < MIN_CHUNKED_CHARS:
        return None
    pieces: list[str] = []
    saved = 0
    for where, start, end in _runs(text, lookup):
        whole = source(where) if where is not None else None
        if where is None or whole is None:
            pieces.append(text[start:end])
            continue
        line = _pointer_line(whole, (where, start, end), text)
        if 2 * len(line) > end - start:  # the pointer would not halve the text: the text stays
            pieces.append(text[start:end])
            continue
        saved += (end - start) - len(line)
        pieces.append(line)
    if saved < MIN_CHUNK_SAVING_CHARS:
        return None
    return "".join(pieces)
