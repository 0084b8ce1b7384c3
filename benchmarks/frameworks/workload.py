"""The workload: one LoCoMo conversation's memories in mem0 and its questions as multi-turn chats.

Memories: LoCoMo's observation facts of the conversation, one mem0 memory each (``infer=False``, dated),
exactly as ``python -m benchmarks.locomo`` ingests them, for one user. Questions: the conversation's QA
questions in file order, cut into ``chats`` chats of ``turns`` turns.

Answers: ``"model"`` keeps the model's own (short) answer in the history; ``"fixed"`` replaces it, after
the turn, by a fixed-length answer (:func:`fixed_answer`, ~120 words) so the history grows as it would
with a real assistant's answers.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from benchmarks.common.locomo import Conversation, load_locomo

__all__ = ["ANSWER_MODES", "Chat", "TurnRecord", "count_shown", "fixed_answer", "load_workload"]

ANSWER_MODES = ("model", "fixed")

_FILLER = (
    "Based on what you have told me in earlier conversations, here is what I can say. The memories I found "
    "mention the people, places and dates involved, and I have tried to keep to what they actually state "
    "rather than guess. Where two memories disagree I prefer the more recent one, and where none of them "
    "answers the question directly I say so instead of inventing details. If you want, I can look further "
    "back, compare this with what you mentioned before, or keep a note of anything new you tell me now, "
    "so that next time the answer is quicker and more precise. Let me know if any of this is out of date."
)


def fixed_answer(question: str) -> str:
    """A fixed ~120-word assistant answer (the question quoted first, so answers are not all identical)."""
    return f'About "{question.strip()}": {_FILLER}'


@dataclass(frozen=True)
class Chat:
    index: int
    questions: tuple[str, ...]


@dataclass
class TurnRecord:
    """One turn, as the engine saw it (the answer call)."""

    framework: str
    arm: str
    answers: str
    chat: int
    turn: int
    prompt_tokens: int | None
    cached_tokens: int | None
    prefilled: int | None
    server_prompt_ms: float | None
    ttft_s: float | None
    total_s: float | None
    messages: int
    prompt_chars: int
    memories: int  # memories shown in full this turn
    pointers: int  # memories shown as pointers to an earlier turn
    answer: str

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def load_workload(locomo: str | None, conversation: int, chats: int, turns: int) -> tuple[Conversation, list[Chat]]:
    convs = load_locomo(locomo)
    if not 0 <= conversation < len(convs):
        raise ValueError(f"--conversation must be in 0..{len(convs) - 1}, got {conversation}")
    conv = convs[conversation]
    questions = [qa.question.strip() for qa in conv.qa if qa.question and qa.question.strip()]
    need = chats * turns
    if len(questions) < need:
        raise ValueError(f"conversation {conversation} has {len(questions)} questions; {chats}x{turns} need {need}")
    return conv, [Chat(c, tuple(questions[c * turns : (c + 1) * turns])) for c in range(chats)]


_BLOCK_LINE = re.compile(r"(?:\[Doc \d+\]|\d+\.?|-) ")
_POINTED = re.compile(r"items? ((?:\d+, )*\d+)")


def count_shown(text: str) -> tuple[int, int]:
    """(memories shown in full, pointers) in a context text of any label style: ``[Doc i]`` / ``i`` / ``-``
    block lines; one ``Please refer to`` line per pointer, or the numbered style's one grouped line."""
    section, _, notes = text.partition("\n\n")
    if section.startswith("Context:\n"):
        section = section[len("Context:\n") :]
    lines = section.splitlines() + notes.splitlines()
    memories = sum(1 for line in section.splitlines() if _BLOCK_LINE.match(line))
    pointers = 0
    for line in lines:
        if line.startswith("Please refer to") or line.endswith("above has the same content."):
            pointers += 1
        elif line.startswith("Also relevant, shown before:"):
            pointers += sum(len(m.split(", ")) for m in _POINTED.findall(line))
    return memories, pointers
