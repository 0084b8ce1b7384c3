"""The workloads of the index benchmarks (``benchmarks.index_bench``, ``benchmarks.index_reference``,
``benchmarks.swap_model``): synthetic Zipf contexts, and LoCoMo questions that retrieve their conversation's
observations by TF-IDF, rendered as the wrapper renders them and served through one
:class:`~benchmarks.common.cache_model.BlockPrefixCache` per alignment mode.
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import numpy as np

from benchmarks.common.cache_model import BlockPrefixCache
from benchmarks.common.locomo import load_locomo
from benchmarks.common.metrics import percentile
from cp_memory.core.annotations import doc_label, order_annotation
from cp_memory.core.index import ContextIndex
from cp_memory.core.render import render_context

from .retrieval import TfidfRetriever

__all__ = ["SYSTEM", "Conversation", "Served", "locomo_conversations", "p95_ms", "render", "serve", "zipf_contexts"]

SYSTEM = "You are a helpful assistant. Answer the question using the memories below.\n\n"


def zipf_contexts(n: int, k: int = 15, vocab: int = 5000, seed: int = 0) -> list[list[int]]:
    """``n`` contexts of ``k`` distinct block ids each, drawn from a Zipf popularity over ``vocab`` ids."""
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, vocab + 1)
    weights /= weights.sum()
    out = []
    for row in rng.choice(vocab, size=(n, 3 * k), p=weights):
        ctx = list(dict.fromkeys(row.tolist()))[:k]
        while len(ctx) < k:
            b = int(rng.integers(vocab))
            if b not in ctx:
                ctx.append(b)
        out.append(ctx)
    return out


def p95_ms(seconds: Sequence[float]) -> float:
    """The 95th percentile of ``seconds`` (not empty), in milliseconds."""
    value = percentile(seconds, 95)
    if value is None:
        raise ValueError("no timings")
    return value * 1e3


def render(order: Sequence[str], texts: Mapping[str, str], original: Sequence[str], question: str) -> str:
    """One question's prompt: the system line, the blocks in ``order`` with the order annotation against
    ``original`` (the retrieval order), then the question."""
    labels: dict[Hashable, str] = {b: doc_label(i + 1) for i, b in enumerate(order)}
    annotation = order_annotation(original, order, label=labels)
    return SYSTEM + render_context([texts[b] for b in order], order_annotation=annotation) + "\nQuestion: " + question


@dataclass(frozen=True)
class Conversation:
    """One LoCoMo conversation as the index benchmarks see it."""

    texts: dict[str, str]  # observation text by id
    ids: list[str]  # observation ids, in the retriever's document order
    covers: dict[str, set[str]]  # observation id -> the dialogue ids it carries
    retriever: TfidfRetriever
    questions: list[tuple[str, set[str]]]  # categories 1-4, each with its coverable evidence ids

    def retrieve(self, k: int) -> list[list[str]]:
        """Every question's top-``k`` observation ids, best first."""
        return [[self.ids[i] for i in self.retriever.search(q, k)] for q, _ in self.questions]


def locomo_conversations(path: str | None) -> list[Conversation]:
    """The LoCoMo file's conversations: observations, a TF-IDF retriever over them, questions (category != 5)."""
    out = []
    for conv in load_locomo(path):
        obs = conv.observations
        covers = {o.id: set(o.evidence_ids) for o in obs}
        coverable = set().union(*covers.values())
        questions = [(q.question, set(q.evidence_ids) & coverable) for q in conv.qa if q.category != 5]
        texts = {o.id: o.text for o in obs}
        out.append(Conversation(texts, [o.id for o in obs], covers, TfidfRetriever([o.text for o in obs]), questions))
    return out


@dataclass
class Served:
    """What one alignment mode sent, summed over every question of a workload."""

    cache: BlockPrefixCache
    prompt_tokens: int = 0
    prefill_tokens: int = 0
    extra: int = 0  # blocks added by superset / swap alignment
    dropped: int = 0  # retrieved blocks swapped out
    requests: int = 0
    recall: list[float] = field(default_factory=list)  # per question with coverable evidence
    align_s: list[float] = field(default_factory=list)  # per index insert


def serve(
    convs: Sequence[Conversation],
    retrieved: Sequence[Sequence[list[str]]],
    opts: Mapping[str, Any] | None,
    capacity: int,
) -> Served:
    """Every question, in order, through one prefix cache of ``capacity`` tokens: ``opts`` None is the
    baseline (retrieval order), else the placement of one ``ContextIndex(**opts)`` per conversation.
    ``retrieved``: per conversation, every question's retrieval (:meth:`Conversation.retrieve`)."""
    out = Served(BlockPrefixCache(capacity))
    for conv, originals in zip(convs, retrieved):
        index = ContextIndex(**opts) if opts is not None else None
        for (question, evidence), original in zip(conv.questions, originals):
            order, kept = original, original
            if index is not None:
                t0 = time.perf_counter()
                placed = index.insert(original)
                out.align_s.append(time.perf_counter() - t0)
                order = cast(list[str], list(placed.order))  # the index hands back the ids it was given
                kept = [b for b in original if b not in set(placed.dropped)]
                out.extra += len(placed.extra)
                out.dropped += len(placed.dropped)
            served = out.cache.serve(render(order, conv.texts, kept, question))
            out.prompt_tokens += served.prompt
            out.prefill_tokens += served.prompt - served.cached
            out.requests += 1
            if evidence:
                shown = set().union(*(conv.covers[b] for b in order))
                out.recall.append(len(evidence & shown) / len(evidence))
    return out
