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
from dataclasses import dataclass

from cp_memory.blocks import ContextBlock
from cp_memory.locomo import Conversation

from ..locomo.metrics import token_f1
from ..retrieval import TfidfRetriever

__all__ = ["Item", "session_blocks", "build_workload", "f1_score"]


@dataclass(frozen=True)
class Item:
    conversation: str
    question: str
    answer: str
    category: int
    blocks: tuple[ContextBlock, ...]


def session_blocks(conv: Conversation) -> list[ContextBlock]:
    """One block per session: ``Session n (date):`` then ``Speaker: text`` lines. Id ``<sample>/s<n>``."""
    lines: dict[int, list[str]] = defaultdict(list)
    dates: dict[int, str] = {}
    for t in conv.turns:
        lines[t.session].append(f"{t.speaker}: {t.text}")
        dates.setdefault(t.session, t.date_time)
    return [ContextBlock(f"{conv.sample_id}/s{n}", f"Session {n} ({dates[n]}):\n" + "\n".join(lines[n]))
            for n in sorted(lines)]


def build_workload(convs: Sequence[Conversation], *, questions_per_conversation: int, k: int,
                   seed: int = 0) -> list[Item]:
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
            items.append(Item(conv.sample_id, q.question, q.answer, q.category,
                              tuple(blocks[i] for i in top)))
    rng.shuffle(items)
    return items


def f1_score(prediction: str, gold: str) -> float:
    """SQuAD/LoCoMo-style token F1 (shared with the LoCoMo benchmark)."""
    return token_f1(prediction, gold)
