"""How much of a trace's traffic is repeated content: the ceiling for what context reuse can remove.

For each session (:func:`benchmarks.agents.trace.session_of`) the longest request holds the whole conversation;
its tool results are walked in order, line by line. A line of at least :data:`MIN_LINE_CHARS` characters (a
paragraph of a document, a table row) that an earlier tool result of the session — or an earlier line of the
same one — already held, byte for byte, is **repeated**; shorter lines are never counted (a blank line or a
heading says little). A tool result repeated as a whole (a re-read) is counted apart from repeated lines of a
new result (a part re-read, a paragraph two documents share).

The figures are characters (exact) and the share of the characters of every request's prompt they stand for
(``prompt_share``: summed over the requests, as the requests' prompt tokens are, so a paragraph repeated early
counts in every later request). :func:`repetition` gives one trace's record; the replay report sets it beside
what each arm removed.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from benchmarks.agents.trace import conversation_of, session_of

__all__ = ["MIN_LINE_CHARS", "Repetition", "repetition", "tool_texts"]

#: the shortest line counted as content (shorter ones are never repeated content)
MIN_LINE_CHARS = 64


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(_text_of(c.get("text", c.get("content")) if isinstance(c, dict) else c) for c in content)
    if isinstance(content, dict):
        return _text_of(content.get("text", content.get("content", "")))
    return ""


def tool_texts(item: Mapping[str, Any]) -> list[str]:
    """The tool results one conversation item carries (Anthropic ``tool_result`` blocks, a Chat ``tool`` message,
    a Responses ``function_call_output``), as text."""
    if str(item.get("type", "")).endswith("call_output"):
        return [_text_of(item.get("output"))]
    if item.get("role") == "tool":
        return [_text_of(item.get("content"))]
    content = item.get("content")
    if item.get("role") == "user" and isinstance(content, list):
        return [_text_of(b.get("content")) for b in content if isinstance(b, dict) and b.get("type") == "tool_result"]
    return []


@dataclass(frozen=True)
class Repetition:
    """One trace's repeated content (see the module docstring)."""

    sessions: int
    tool_results: int
    tool_result_chars: int
    reread_chars: int  # whole tool results the session had seen before
    repeated_line_chars: int  # repeated lines of tool results that were not whole re-reads
    prompt_chars: int  # every request's serialised body, summed
    repeated_prompt_chars: int  # the repeated characters every request carried, summed

    @property
    def repeated_chars(self) -> int:
        return self.reread_chars + self.repeated_line_chars

    def as_dict(self) -> dict[str, Any]:
        out = asdict(self)
        out["repeated_share_of_tool_results"] = (
            round(self.repeated_chars / self.tool_result_chars, 4) if self.tool_result_chars else None
        )
        out["prompt_share"] = round(self.repeated_prompt_chars / self.prompt_chars, 4) if self.prompt_chars else None
        return out


def _repeated_per_result(items: Sequence[Any]) -> list[tuple[int, int, int]]:
    """For each tool result of a conversation, in order: (its characters, whole re-read characters, repeated
    line characters)."""
    seen_whole: set[str] = set()
    seen_lines: set[str] = set()
    out = []
    for item in items:
        if not isinstance(item, dict):
            continue
        for text in tool_texts(item):
            whole = text.strip()
            if len(whole) >= MIN_LINE_CHARS and whole in seen_whole:
                out.append((len(text), len(text), 0))
                continue
            repeated = 0
            for line in text.splitlines():
                key = line.strip()
                if len(key) < MIN_LINE_CHARS:
                    continue
                if key in seen_lines:
                    repeated += len(line) + 1
                seen_lines.add(key)
            seen_whole.add(whole)
            out.append((len(text), 0, min(repeated, len(text))))
    return out


def repetition(records: Iterable[Mapping[str, Any]]) -> Repetition:
    """The repeated content of ``records`` (generation requests of one trace)."""
    by_session: dict[str, list[Mapping[str, Any]]] = {}
    for record in records:
        body = record.get("body")
        if isinstance(body, dict):
            by_session.setdefault(session_of(record), []).append(record)
    results = chars = reread = lines = prompt = repeated_prompt = 0
    for rows in by_session.values():
        longest = max(rows, key=lambda r: len(conversation_of(r["body"])[1]))
        per = _repeated_per_result(conversation_of(longest["body"])[1])
        results += len(per)
        chars += sum(p[0] for p in per)
        reread += sum(p[1] for p in per)
        lines += sum(p[2] for p in per)
        for row in rows:  # each request carries the repeats of the tool results it holds so far
            held = sum(1 for i in conversation_of(row["body"])[1] if isinstance(i, dict) for _ in tool_texts(i))
            prompt += len(json.dumps(row["body"], ensure_ascii=False))
            repeated_prompt += sum(p[1] + p[2] for p in per[:held])
    return Repetition(len(by_session), results, chars, reread, lines, prompt, repeated_prompt)
