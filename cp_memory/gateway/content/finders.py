"""Context blocks found in one holder's text, by one rule each, only where the rule is unambiguous.

==================  ==================================================================  ===============
rule                unambiguous when                                                    may be reordered
==================  ==================================================================  ===============
``exec_output``     the text starts with a shell tool's run header (Codex's: lines      no (one block:
                    ``Chunk ID: ...``, ``Wall time: 0.1 seconds``, ``Process exited     the output)
                    with code 0``, ``Original token count: 477``, ``Exit code: 0``,
                    ``Total output lines: 9``; ``Wall time`` among them) and then a
                    line ``Output:``; the body is everything after it, non-empty
``json_results``    the whole text is a JSON array of >= 2 objects that all share a     yes (no object
                    non-empty string field ``text``, ``content`` or ``snippet``, or a   has ``index``,
                    JSON object whose member ``results`` is such an array               ``rank``,
                                                                                        ``position``)
``xml_tag``         >= 2 well-formed, non-nested ``<document>``, ``<doc>``, ``<file>``,  yes, when no tag
                    ``<source>``, ``<search_result>`` or ``<result>`` elements of one   carries a number
                    name, every opening tag of that name closed                         (``index="2"``)
                                                                                        and only white
                                                                                        space separates
                                                                                        them
``numbered``        lines starting ``[1] ``, ``[2] ``, ... numbered from 1 without a    no (the numbers
                    gap, >= 2, and no other line starts with ``[n]``                    are labels)
``markdown``        >= 2 headings of the shallowest level present (outside code fences)  no
``tool_result``     a whole tool result (found by the stage, not here)                  no
==================  ==================================================================  ===============

The first rule (in this order) that finds blocks owns the holder; the others are not asked. A block's
*body* is the part a pointer may replace: a shell run's output after its header (the header changes on
every run: chunk id, wall time; the output it carries is what an agent re-reads), the element's inner text
(the tags stay), a passage after its ``[n] `` marker, a section after its heading line, a JSON element whole
(replaced by a JSON string).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from enum import Enum

__all__ = ["BlockRule", "FoundBlock", "FoundContext", "find_context"]


class BlockRule(str, Enum):
    """The rule that found a block (module doc)."""

    EXEC_OUTPUT = "exec_output"
    JSON_RESULTS = "json_results"
    XML_TAG = "xml_tag"
    NUMBERED = "numbered"
    MARKDOWN = "markdown"
    TOOL_RESULT = "tool_result"


@dataclass(frozen=True)
class FoundBlock:
    """One block: the rule, its span ``[start, end)`` in the holder, its body span, and its ``label``
    (``[2]``, ``document 2``, ``<file path="a.py">``, ``result 2``, ``## Setup``; empty for a whole result)."""

    rule: BlockRule
    start: int
    end: int
    body_start: int
    body_end: int
    label: str

    def body(self, text: str) -> str:
        return text[self.body_start : self.body_end]


@dataclass(frozen=True)
class FoundContext:
    """The blocks one rule found in a holder (prompt order) and whether they may be reordered."""

    rule: BlockRule
    blocks: tuple[FoundBlock, ...]
    orderable: bool


_XML_NAMES = ("document", "doc", "file", "source", "search_result", "result")
_POSITIONAL_ATTR = re.compile(r"\b(?:index|id|n|num|rank|position)\s*=\s*[\"']?\d", re.I)
_TEXT_FIELDS = ("text", "content", "snippet")
_RANK_FIELDS = ("index", "rank", "position")
_NUMBERED = re.compile(r"^\[(\d+)\][ \t]", re.M)
_HEADING = re.compile(r"^(#{1,6})[ \t]+\S[^\n]*", re.M)
_FENCE = re.compile(r"^```", re.M)
_LABEL_MAX = 80
_EXEC_LINE = (
    r"(?:Chunk ID: [^\n]{1,64}|Wall time: \d+(?:\.\d+)? seconds|Process exited with code -?\d+"
    r"|Process running with session ID \d+|Original token count: \d+|Exit code: -?\d+|Total output lines: \d+)\n"
)
_EXEC_HEADER = re.compile(rf"\A(?:{_EXEC_LINE}){{1,8}}\n?Output:\n")
_WRAPPER_KEY = "results"


def find_context(text: str) -> FoundContext | None:
    """The blocks of the first rule that finds any (module doc), or None."""
    for rule in (_exec_output, _json_results, _xml_tags, _numbered, _markdown):
        found = rule(text)
        if found is not None:
            return found
    return None


# ------------------------------------------------------------------ exec_output
def _exec_output(text: str) -> FoundContext | None:
    header = _EXEC_HEADER.match(text)
    if header is None or "\nWall time: " not in "\n" + header.group(0) or header.end() >= len(text):
        return None
    block = FoundBlock(BlockRule.EXEC_OUTPUT, 0, len(text), header.end(), len(text), "")
    return FoundContext(BlockRule.EXEC_OUTPUT, (block,), False)


# ------------------------------------------------------------------ json_results
def _skip(text: str, i: int) -> int:
    while i < len(text) and text[i] in " \t\r\n":
        i += 1
    return i


def _json_spans(text: str, start: int = 0, stop: int | None = None) -> list[tuple[int, int, object]] | None:
    """The spans of the elements of the JSON array that is exactly ``text[start:stop]`` (exact offsets in
    ``text``; white space around it allowed), or None when that is not one."""
    stop = len(text) if stop is None else stop
    decoder = json.JSONDecoder()
    i = _skip(text, start)
    if i >= stop or text[i] != "[":
        return None
    i, spans = i + 1, []
    while True:
        i = _skip(text, i)
        try:
            value, end = decoder.raw_decode(text, i)
        except ValueError:
            return None
        spans.append((i, end, value))
        i = _skip(text, end)
        if i < stop and text[i] == ",":
            i += 1
            continue
        if i < stop and text[i] == "]" and _skip(text, i + 1) >= stop:
            return spans
        return None


def _wrapped_array(text: str) -> tuple[int, int] | None:
    """The span of the value of member ``results`` of the JSON object that is the whole text, when it is an
    array, or None (not an object, no such member, or the member twice)."""
    try:
        whole = json.loads(text)
    except ValueError:
        return None
    if not isinstance(whole, dict) or not isinstance(whole.get(_WRAPPER_KEY), list):
        return None
    decoder, i, found = json.JSONDecoder(), _skip(text, 0) + 1, None
    while True:
        i = _skip(text, i)
        if text[i] == "}":
            return found
        key, i = decoder.raw_decode(text, i)
        i = _skip(text, _skip(text, i) + 1)  # past the colon
        _, end = decoder.raw_decode(text, i)
        if key == _WRAPPER_KEY:
            if found is not None:
                return None
            found = (i, end)
        i = _skip(text, end)
        i += 1 if text[i] == "," else 0


def _json_results(text: str) -> FoundContext | None:
    head = text.lstrip()[:1]
    if head == "[":
        spans = _json_spans(text)
    elif head == "{" and f'"{_WRAPPER_KEY}"' in text:
        wrapped = _wrapped_array(text)
        spans = _json_spans(text, *wrapped) if wrapped is not None else None
    else:
        return None
    if spans is None or len(spans) < 2 or not all(isinstance(v, dict) for _, _, v in spans):
        return None
    objects = [v for _, _, v in spans if isinstance(v, dict)]
    if not any(all(isinstance(o.get(f), str) and o.get(f) for o in objects) for f in _TEXT_FIELDS):
        return None
    blocks = tuple(
        FoundBlock(BlockRule.JSON_RESULTS, s, e, s, e, f"result {k}") for k, (s, e, _) in enumerate(spans, 1)
    )
    orderable = not any(f in o for o in objects for f in _RANK_FIELDS)
    return FoundContext(BlockRule.JSON_RESULTS, blocks, orderable)


# ------------------------------------------------------------------ xml_tag
def _elements(text: str, name: str) -> list[FoundBlock] | None:
    """Well-formed, non-nested elements of ``name``; None when any opening tag is not closed cleanly."""
    opens = list(re.finditer(rf"<{name}(?:\s[^<>]*)?>", text))
    closes = list(re.finditer(rf"</{name}\s*>", text))
    if len(opens) != len(closes) or not opens:
        return None
    blocks, last_end = [], 0
    for k, (o, c) in enumerate(zip(opens, closes), 1):
        if o.start() < last_end or c.start() < o.end():
            return None
        if k < len(opens) and opens[k].start() < c.end():  # nested or interleaved
            return None
        tag = o.group(0)
        label = tag if len(tag) <= _LABEL_MAX and " " in tag else f"{name} {k}"
        blocks.append(FoundBlock(BlockRule.XML_TAG, o.start(), c.end(), o.end(), c.start(), label))
        last_end = c.end()
    return blocks


def _xml_tags(text: str) -> FoundContext | None:
    if "</" not in text:
        return None
    best: list[FoundBlock] | None = None
    for name in _XML_NAMES:
        found = _elements(text, name) if f"<{name}" in text else None
        if found is not None and len(found) >= 2 and (best is None or found[0].start < best[0].start):
            best = found
    if best is None:
        return None
    positional = any(_POSITIONAL_ATTR.search(text[b.start : b.body_start]) for b in best)
    gaps = (text[a.end : b.start] for a, b in zip(best, best[1:]))
    orderable = not positional and all(not g.strip() for g in gaps)
    return FoundContext(BlockRule.XML_TAG, tuple(best), orderable)


# ------------------------------------------------------------------ numbered
def _numbered(text: str) -> FoundContext | None:
    marks = list(_NUMBERED.finditer(text))
    if len(marks) < 2 or [int(m.group(1)) for m in marks] != list(range(1, len(marks) + 1)):
        return None
    blocks = []
    for k, m in enumerate(marks):
        end = marks[k + 1].start() if k + 1 < len(marks) else _paragraph_end(text, m.end())
        end = len(text[:end].rstrip())
        if end <= m.end():
            return None
        blocks.append(FoundBlock(BlockRule.NUMBERED, m.start(), end, m.end(), end, f"[{k + 1}]"))
    return FoundContext(BlockRule.NUMBERED, tuple(blocks), False)


def _paragraph_end(text: str, start: int) -> int:
    blank = text.find("\n\n", start)
    return len(text) if blank < 0 else blank


# ------------------------------------------------------------------ markdown
def _outside_fences(text: str, positions: list[re.Match[str]]) -> list[re.Match[str]]:
    fences = [m.start() for m in _FENCE.finditer(text)]
    return [m for m in positions if sum(f < m.start() for f in fences) % 2 == 0]


def _markdown(text: str) -> FoundContext | None:
    headings = _outside_fences(text, list(_HEADING.finditer(text)))
    if len(headings) < 2:
        return None
    level = min(len(h.group(1)) for h in headings)
    top = [h for h in headings if len(h.group(1)) == level]
    if len(top) < 2:
        return None
    blocks = []
    for k, h in enumerate(top):
        end = top[k + 1].start() if k + 1 < len(top) else len(text)
        end = len(text[:end].rstrip())
        body = min(h.end() + 1, end)
        label = h.group(0).strip()[:_LABEL_MAX]
        blocks.append(FoundBlock(BlockRule.MARKDOWN, h.start(), end, body, end, label))
    return FoundContext(BlockRule.MARKDOWN, tuple(blocks), False)
