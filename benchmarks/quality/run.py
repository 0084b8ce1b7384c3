"""One quality run: ingest LoCoMo into mem0 (as the LoCoMo benchmark does), then per conversation every arm at
every k (questions in order, a fresh ContextPilotMemory per arm), then the controlled position test; every
answer goes to the :class:`~benchmarks.quality.cache.AnswerCache` as it comes, so a run resumes where the last
one stopped and the report needs only the cache.

Quality only: no cache flushes between arms (nothing here is timed); an aligned arm's questions still go in
order, so its prefix-cache hits make it cheaper to run.
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.common.ingest import Ingested, user_memories
from benchmarks.common.locomo import QA, Conversation
from benchmarks.common.metrics import QUALITY_CATEGORIES, clean_answer, locomo_f1
from benchmarks.common.modes import CachedSearch, KSpec, ModeBuilder
from benchmarks.locomo.engines import BenchEngine
from benchmarks.locomo.evidence import EvidenceIndex
from benchmarks.locomo.runner import SYSTEM_PROMPT
from cp_memory.core.render import build_messages

from .arms import Arm, arms_for
from .cache import Answer, AnswerCache, prompt_sha
from .labelled import rank_labelled_context
from .position import position_prompts, single_evidence
from .stats import exact_match
from .timing import HarnessClock

logger = logging.getLogger(__name__)

__all__ = ["Plan", "QualityRun", "plan_questions"]

#: mem0 search options of every request (0: always k results when the user has them)
MEM0_KWARGS: dict[str, Any] = {"threshold": 0.0}


@dataclass(frozen=True)
class Plan:
    """What to ask: per k the questions of each conversation (indices into its QA list), the position test's."""

    per_k: dict[int, dict[str, tuple[int, ...]]]
    position: dict[str, tuple[int, ...]]
    position_k: int


def _scored(conv: Conversation) -> list[int]:
    return [i for i, q in enumerate(conv.qa) if q.category in QUALITY_CATEGORIES]


def _spread(
    total: int, convs: Sequence[Conversation], pick: Callable[[Conversation], list[int]]
) -> dict[str, tuple[int, ...]]:
    """``total`` questions spread evenly over the conversations (the first of each), at most ``total``."""
    if total <= 0 or not convs:
        return {c.sample_id: () for c in convs}
    each, left, out = math.ceil(total / len(convs)), total, {}
    for conv in convs:
        chosen = tuple(pick(conv)[: min(each, left)])
        out[conv.sample_id] = chosen
        left -= len(chosen)
    return out


def plan_questions(
    convs: Sequence[Conversation],
    per_k: dict[int, int],
    position: int,
    position_k: int,
    evidence: Callable[[Conversation], EvidenceIndex],
) -> Plan:
    """Categories 1-4 in LoCoMo order; the position test takes questions with exactly one evidence memory."""
    ks = {k: _spread(n, convs, _scored) for k, n in per_k.items()}
    pos = _spread(position, convs, lambda c: [i for i in _scored(c) if single_evidence(c.qa[i], evidence(c))])
    return Plan(ks, pos, position_k)


@dataclass
class QualityRun:
    """The engine, store and cache of one run over one model."""

    model: str
    engine: BenchEngine
    search: CachedSearch
    cache: AnswerCache
    max_tokens: int
    chat_turns: int
    asked: int = 0
    reused: int = 0
    errors: int = 0
    clock: HarnessClock = field(default_factory=HarnessClock)
    _evidence: dict[str, EvidenceIndex] = field(default_factory=dict)
    _texts: dict[str, dict[str, str]] = field(default_factory=dict)

    def evidence(self, user: Ingested) -> EvidenceIndex:
        if user.user_id not in self._evidence:
            with self.clock.phase("mem0"):
                self._evidence[user.user_id] = EvidenceIndex.of_user(self.search.memory, user.user_id)
        return self._evidence[user.user_id]

    def texts(self, user: Ingested) -> dict[str, str]:
        """Every memory of the user by id (read once per run)."""
        if user.user_id not in self._texts:
            with self.clock.phase("mem0"):
                rows = user_memories(self.search.memory, user.user_id)
            self._texts[user.user_id] = {str(m["id"]): str(m.get("memory") or "") for m in rows}
        return self._texts[user.user_id]

    def answer(
        self, key: tuple[str, str, int, str, str, int], messages: list[dict[str, Any]], qa: QA, hit: tuple[int, int]
    ) -> Answer | None:
        """The cached answer to this exact request, or the engine's (cached now); None on an engine error."""
        sha = prompt_sha(messages)
        row = self.cache.get(key, sha)
        if row is None:
            # the identical request was answered under another key (an arm whose prompt equals another's
            # for this question, the position test's repeats, a renamed arm): greedy, the same answer
            same = self.cache.by_sha(self.model, sha)
            row = same and _rekeyed(same, key, hit)
            if row is not None:
                self.reused += 1
            else:
                with self.clock.phase("engine"):
                    reply = self.engine.chat(messages, max_tokens=self.max_tokens)
                self.clock.engine_reply(reply.server_prompt_ms, reply.prompt_tokens, reply.cached_tokens)
                if reply.error is not None:
                    self.errors += 1
                    logger.warning("%s: engine error %s", key, reply.error)
                    return None
                text = clean_answer(reply.text)
                row = Answer(
                    *key,
                    category=qa.category,
                    answer=text,
                    f1=locomo_f1(text, qa.answer, qa.category),
                    em=exact_match(text, qa.answer, qa.category),
                    prompt_sha=sha,
                    prompt_tokens=reply.prompt_tokens,
                    cached_tokens=reply.cached_tokens,
                    evidence_hit=hit[0],
                    evidence_coverable=hit[1],
                )
                self.asked += 1
            self.cache.add(row)
        else:
            self.reused += 1
        return row

    def run_arms(self, conv: Conversation, user: Ingested, k: int, arms: Sequence[Arm], qids: Sequence[int]) -> None:
        """The questions in order, each through every arm before the next (a fresh builder per arm; chats
        restart every ``chat_turns``). Question-major: the aligned arms' prompts for one question share their
        blocks, so the engine's prompt cache serves the second and third almost free."""
        with self.clock.phase("build"):
            states = [_ArmState.start(self, conv, user, k, arm) for arm in arms]
        for turn, qi in enumerate(qids):
            for state in states:
                self._ask_arm(state, conv, user, k, turn, qi)

    def _ask_arm(self, st: _ArmState, conv: Conversation, user: Ingested, k: int, turn: int, qi: int) -> None:
        if st.arm.chat and turn and turn % self.chat_turns == 0:
            st.history = []
            st.builder.new_chat(f"{st.chat_id}/chat{turn // self.chat_turns}")
        qa = conv.qa[qi]
        with self.clock.phase("build"):
            built = st.builder.build(qa.question)
            context = built.context
            if st.arm.rank_labels:
                context = rank_labelled_context(built.block_ids, built.retrieval_ids, self.texts(user))
            carrier = {"results": [], "context_pilot": {"context": context}}
            history = st.history if st.arm.chat else None
            messages = build_messages(qa.question, carrier, system=SYSTEM_PROMPT, history=history)
            ev = self.evidence(user).score(qa.evidence, built.block_ids + built.duplicate_ids, built.retrieval_ids)
        key = (self.model, "arms", k, st.arm.name, conv.sample_id, qi)
        row = self.answer(key, messages, qa, (ev.hit, ev.coverable))
        with self.clock.phase("build"):
            st.builder.sent(built, row is not None)
        if st.arm.chat:
            st.history += [messages[-1], {"role": "assistant", "content": row.answer if row else ""}]

    def run_position(self, conv: Conversation, user: Ingested, k: int, qids: Sequence[int]) -> None:
        """The controlled position test for ``qids`` (questions with one evidence memory) at ``k``."""
        texts = self.texts(user)
        evidence = self.evidence(user)
        for qi in qids:
            qa = conv.qa[qi]
            with self.clock.phase("mem0"):
                ranked = self.search.ranked_ids(qa.question, top_k=k, filters={"user_id": user.user_id}, **MEM0_KWARGS)
            for variant, context in position_prompts(qa, evidence, ranked, texts, k):
                carrier = {"results": [], "context_pilot": {"context": context}}
                messages = build_messages(qa.question, carrier, system=SYSTEM_PROMPT)
                self.answer((self.model, "position", k, variant, conv.sample_id, qi), messages, qa, (1, 1))


@dataclass
class _ArmState:
    """One arm's builder (its own cold index and dedup log) and chat history over one (conversation, k)."""

    arm: Arm
    builder: ModeBuilder
    chat_id: str
    history: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def start(cls, run: QualityRun, conv: Conversation, user: Ingested, k: int, arm: Arm) -> _ArmState:
        chat_id = f"{conv.sample_id}/k={k}/{arm.name}"
        builder = ModeBuilder(
            arm.spec,
            run.search,
            user_id=user.user_id,
            k=KSpec(k),
            conversation_id=chat_id,
            mem0_kwargs=MEM0_KWARGS,
            options=arm.options,
            library_defaults=arm.library_defaults,
        )
        return cls(arm, builder, chat_id)


def _rekeyed(row: Answer, key: tuple[str, str, int, str, str, int], hit: tuple[int, int]) -> Answer:
    """The answer to the identical request under ``key``, with this arm's own evidence figures."""
    from dataclasses import replace

    return replace(
        row,
        model=key[0],
        part=key[1],
        k=key[2],
        arm=key[3],
        sample_id=key[4],
        q_index=key[5],
        evidence_hit=hit[0],
        evidence_coverable=hit[1],
    )


def _cut(qids: Sequence[int], r: int, rounds: int) -> tuple[int, ...]:
    return tuple(qids[: math.ceil(len(qids) * r / rounds)])


def run_all(
    run: QualityRun,
    convs: Sequence[Conversation],
    users: Sequence[Ingested],
    plan: Plan,
    arms: Sequence[Arm],
    chat_max_k: int,
    rounds: int = 1,
    progress: Callable[[str], None] = lambda _s: None,
) -> None:
    """In ``rounds`` passes, each taking every conversation's questions a share further (at every k, and in
    the position test), so a run stopped early is balanced over conversations, k and arms. A later pass
    rebuilds the earlier contexts (cheap) and answers them from the cache."""
    for r in range(1, rounds + 1):
        for conv, user in zip(convs, users):
            for k in sorted(plan.per_k):
                qids = _cut(plan.per_k[k].get(conv.sample_id, ()), r, rounds)
                if qids:
                    _run_k(run, conv, user, k, qids, arms_for(arms, k, chat_max_k), progress)
            pos = _cut(plan.position.get(conv.sample_id, ()), r, rounds)
            if pos:
                run.run_position(conv, user, plan.position_k, pos)
                progress(f"round {r}: {conv.sample_id} position k={plan.position_k}: {len(pos)} q (asked {run.asked})")


def _run_k(
    run: QualityRun,
    conv: Conversation,
    user: Ingested,
    k: int,
    qids: Sequence[int],
    arms: Sequence[Arm],
    progress: Callable[[str], None],
) -> None:
    t0, asked0 = time.perf_counter(), run.asked
    with run.clock.phase("mem0"):
        for q in qids:  # retrieve once up front: every arm gets the same memoized mem0 results
            run.search.search(conv.qa[q].question, top_k=k, filters={"user_id": user.user_id}, **MEM0_KWARGS)
    run.run_arms(conv, user, k, arms, qids)
    run.clock.k_done(k, run.asked - asked0, time.perf_counter() - t0)
    progress(f"{conv.sample_id} k={k}: {len(qids)} q x {len(arms)} arms (asked {run.asked}, cached {run.reused})")


def default_cache(out: str | Path, model: str) -> Path:
    return Path(out) / "quality_answers" / f"{model}.jsonl"
