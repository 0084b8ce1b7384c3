"""LoCoMo as a Chain-of-Agents workload with recurring documents.

Documents are LoCoMo *sessions* (one block per session: its date and every dialogue turn); questions are
the conversation's QA pairs (adversarial category 5 left out: their gold answer is a refusal). Each
question retrieves the top-``k`` sessions of its own conversation with a TF-IDF retriever, so the many
questions about one conversation keep drawing the same sessions: the recurring documents that
agent-aware routing is meant to serve from a worker's cache.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, replace

from benchmarks.common.locomo import Conversation
from cp_memory.core.blocks import ContextBlock

from ..retrieval import TfidfRetriever

__all__ = ["Item", "build_multiturn", "build_workload", "session_blocks"]


@dataclass(frozen=True)
class Item:
    """One question with its retrieved sessions. In a multi-turn workload ``chat`` names the chat
    (the CoA ``conversation_id``) and ``turn`` its 0-based position; single-turn items have ``chat=None``."""

    conversation: str
    question: str
    answer: str
    category: int
    blocks: tuple[ContextBlock, ...]
    chat: str | None = None
    turn: int = 0


def session_blocks(conv: Conversation) -> list[ContextBlock]:
    """One block per session: ``Session n (date):`` then ``Speaker: text`` lines. Id ``<sample>/s<n>``."""
    lines: dict[int, list[str]] = defaultdict(list)
    dates: dict[int, str] = {}
    for t in conv.turns:
        lines[t.session].append(f"{t.speaker}: {t.text}")
        dates.setdefault(t.session, t.date_time)
    return [
        ContextBlock(f"{conv.sample_id}/s{n}", f"Session {n} ({dates[n]}):\n" + "\n".join(lines[n]))
        for n in sorted(lines)
    ]


def build_workload(
    convs: Sequence[Conversation], *, questions_per_conversation: int, k: int, seed: int = 0
) -> list[Item]:
    """Questions of ``convs`` (sampled, then interleaved at random), each with its top-``k`` sessions."""
    rng = random.Random(seed)
    items: list[Item] = []
    for conv in convs:
        blocks = session_blocks(conv)
        retriever = TfidfRetriever([b.text for b in blocks])
        qa = [q for q in conv.qa if q.category != 5 and q.answer.strip()]
        rng.shuffle(qa)
        for q in qa[:questions_per_conversation]:
            top = retriever.search(q.question, min(k, len(blocks)))
            items.append(Item(conv.sample_id, q.question, q.answer, q.category, tuple(blocks[i] for i in top)))
    rng.shuffle(items)
    return items


def build_multiturn(
    convs: Sequence[Conversation], *, questions_per_conversation: int, k: int, turns: int, seed: int = 0
) -> list[Item]:
    """The same questions as :func:`build_workload`, grouped into chats of ``turns`` consecutive
    questions about one LoCoMo conversation (a user asking follow-ups): later turns retrieve sessions
    that earlier turns already sent, which the chain de-duplicates. Chats are listed in a random
    interleaving that keeps each chat's turns in order."""
    if turns < 1:
        raise ValueError(f"turns must be >= 1, got {turns}")
    rng = random.Random(seed)
    by_conv: dict[str, list[Item]] = defaultdict(list)
    for it in build_workload(convs, questions_per_conversation=questions_per_conversation, k=k, seed=seed):
        by_conv[it.conversation].append(it)
    chats: list[list[Item]] = []
    for conv, items in by_conv.items():
        for c, start in enumerate(range(0, len(items), turns)):
            chat = f"{conv}/chat{c}"
            chats.append([replace(it, chat=chat, turn=t) for t, it in enumerate(items[start : start + turns])])
    out: list[Item] = []
    queues = [list(c) for c in chats]
    while queues:
        q = rng.choice(queues)
        out.append(q.pop(0))
        if not q:
            queues.remove(q)
    return out
