"""The workload: LoCoMo memories in embedded mem0, chats of 8 turns and one-shot questions, searched once.

Memories: each selected conversation's observation facts, one mem0 memory each (``infer=False``, dated),
for its own user, exactly as ``python -m benchmarks.locomo`` ingests them (:mod:`benchmarks.common.ingest`).
Chats: the conversation's questions in file order, ``chats`` chats of ``turns`` turns. One-shot QA: the first
``questions`` questions, each alone, at every ``k``.

Every arm's searches are made once, in order, and replayed for every provider and system prompt: the mem0
arm calls ``Memory.search`` (mem0's documented pattern); the cp arms use a fresh ``ContextPilotMemory`` per
chat / question sequence: ``cp-append`` (dedup conversation, turns committed once "sent"), ``cp-late`` (no
dedup: the memories leave the history), and for one-shot questions ``cp`` (aligned) and ``cp-swap``.
Nothing of LoCoMo leaves this module except through prompts sent to the (local) server: records carry
question digests, never text.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from benchmarks.common.locomo import Conversation, load_locomo
from benchmarks.frameworks.workload import fixed_answer  # the assistant answer kept in the history: ~120 words
from cp_memory.core.blocks import text_digest

__all__ = ["SWAP_BUDGET", "SWAP_PROTECT", "Searched", "Workload", "build_workload", "fixed_answer"]

#: swap alignment of the ``cp-swap`` arm (docs/locomo.md's Pareto front: swap@0.25 protecting the top half)
SWAP_BUDGET = 0.25
SWAP_PROTECT = 0.5

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Searched:
    """One question and what each arm's search returned for it."""

    question: str
    digest: str
    mem0: Any  # mem0's own response
    cp: dict[str, Any]  # cp arm -> ContextPilotMemory's response (context_pilot entry included)


@dataclass
class Workload:
    """``chats[(conv, chat)]`` = its turns; ``qa[k][conv]`` = the one-shot questions at ``k``."""

    chats: dict[tuple[int, int], list[Searched]] = field(default_factory=dict)
    qa: dict[int, dict[int, list[Searched]]] = field(default_factory=dict)
    users: dict[int, str] = field(default_factory=dict)
    memories: dict[int, int] = field(default_factory=dict)


def _questions(conv: Conversation) -> list[str]:
    return [qa.question.strip() for qa in conv.qa if qa.question and qa.question.strip()]


def build_workload(
    memory: Any,
    conversations: Sequence[int],
    *,
    chats: int,
    turns: int,
    chat_top_k: int,
    questions: int,
    qa_top_k: Sequence[int],
    locomo: str | None = None,
    progress: bool = False,
) -> Workload:
    """Ingest the conversations into ``memory`` (a plain mem0 ``Memory``) and run every search once."""
    from benchmarks.common.ingest import ingest
    from cp_memory.memory import ContextPilotMemory

    convs = load_locomo(locomo)
    picked = [convs[i] for i in conversations]
    done = ingest(memory, picked, "observations", progress=progress)
    out = Workload()
    for index, conv, got in zip(conversations, picked, done):
        out.users[index] = got.user_id
        out.memories[index] = got.memories
        filters = {"user_id": got.user_id}
        qs = _questions(conv)
        if len(qs) < chats * turns:
            raise ValueError(f"conversation {index} has {len(qs)} questions; {chats}x{turns} chats need more")
        for c in range(chats):
            append = ContextPilotMemory(memory, max_overfetch=0)  # as the integrations wrap it
            late = ContextPilotMemory(memory, max_overfetch=0)
            turns_out = []
            for t, q in enumerate(qs[c * turns : (c + 1) * turns]):
                plain = memory.search(q, filters=filters, top_k=chat_top_k)
                ours = append.search(q, filters=filters, top_k=chat_top_k, conversation_id=f"chat-{index}-{c}")
                append.commit(ours)  # the benchmark sends every turn
                other = late.search(q, filters=filters, top_k=chat_top_k)  # "late": no dedup conversation
                turns_out.append(Searched(q, text_digest(q), plain, {"cp-append": ours, "cp-late": other}))
                logger.debug("conv %d chat %d turn %d searched", index, c, t + 1)
            out.chats[(index, c)] = turns_out
        for k in qa_top_k:
            aligned = ContextPilotMemory(memory)
            swap = ContextPilotMemory(memory, swap_budget=SWAP_BUDGET, protect=SWAP_PROTECT)
            rows = []
            for q in qs[:questions]:
                plain = memory.search(q, filters=filters, top_k=k)
                ours = {
                    "cp": aligned.search(q, filters=filters, top_k=k),
                    "cp-swap": swap.search(q, filters=filters, top_k=k),
                }
                rows.append(Searched(q, text_digest(q), plain, ours))
            out.qa.setdefault(k, {})[index] = rows
    return out
