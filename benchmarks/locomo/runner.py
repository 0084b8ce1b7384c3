"""The benchmark loop: conversations x top-k x modes, each mode on a cold engine cache.

For every conversation, every k and every mode (the order of modes rotates with the conversation and
the k, so no mode is always first):

1. the engine's prefix cache is made cold (restart / ``/flush_cache``), then ``warmup`` throw-away
   requests are sent;
2. a fresh :class:`~benchmarks.common.modes.ModeBuilder` (cold ContextPilot index, same mem0 store);
3. the conversation's questions are asked in order as successive turns — one-shot prompts, or with
   ``chat`` growing chats whose history holds every earlier turn (a new chat starts every
   ``chat_turns`` questions, so the history fits the model's context) — and each streamed reply's TTFT,
   prompt tokens and engine-reported cached tokens are recorded with the answer and its F1.

The first turn of every (conversation, k, mode) run is recorded but left out of the TTFT and hit-ratio
statistics (``measured=False``): it is the same cold request in every mode, as in the paper.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from benchmarks.common.export import PromptExport
from benchmarks.common.ingest import Ingested
from benchmarks.common.locomo import QA, Conversation
from benchmarks.common.metrics import QUALITY_CATEGORIES, clean_answer, locomo_f1
from benchmarks.common.modes import BuiltContext, CachedSearch, KSpec, ModeBuilder, ModeSpec, mode_order, parse_mode
from cp_memory.core.render import build_messages, build_prompt

from .engines import BenchEngine, Reply
from .evidence import EvidenceIndex, EvidenceScore

logger = logging.getLogger(__name__)

__all__ = ["PROMPT_TEMPLATE", "SYSTEM_PROMPT", "RequestRecord", "RunSettings", "run_requests", "select_questions"]

#: The completion prompt of every mode (only the context differs).
PROMPT_TEMPLATE = (
    "Memories:\n{context}\n\nBased on the memories above, answer the question in as few words "
    "as possible.\nQuestion: {query}\nAnswer:"
)
#: The system message of every mode in chat runs.
SYSTEM_PROMPT = (
    "You answer questions about a user's past conversations from the memories given with each "
    "question. Answer in as few words as possible."
)


@dataclass(frozen=True, kw_only=True)
class RunSettings:
    """What the loop runs (from :class:`benchmarks.locomo.run.BenchConfig`, the one source of the defaults)."""

    modes: tuple[str, ...]
    top_k: tuple[KSpec, ...]
    extra_budget: float  # aligned+superset without @B
    swap_budget: float  # aligned+swap without @B
    protect: float  # aligned+swap without /P
    chat: bool
    chat_turns: int  # chat: questions per chat before a new one starts (0: one chat)
    max_tokens: int
    warmup: int
    threshold: float  # mem0 search score threshold (0: always k results when it has them)
    exclude_first_turn: bool = True

    @property
    def mem0_kwargs(self) -> dict[str, Any]:
        """What every mem0 search of the run is given besides the query, top_k and filters."""
        return {"threshold": self.threshold}


@dataclass(frozen=True)
class RequestRecord:
    """One benchmark request (one question in one mode at one k)."""

    sample_id: str
    conversation: int  # index in LoCoMo
    k: str  # "20", "100", "5x10"
    mode: str
    run_position: int  # 0-based position of this mode among the modes run for (conversation, k)
    flush: str  # how the engine cache was made cold before this mode
    turn: int  # 1-based question number in the run
    measured: bool  # counted in TTFT / hit-ratio statistics (False: first turn)
    question: str
    gold: str
    category: int
    answer: str
    ttft_s: float | None
    total_s: float | None
    prompt_tokens: int | None
    cached_tokens: int | None
    f1: float | None
    judge: float | None
    retrieved: int
    blocks: int  # blocks shown (one copy)
    extra: int
    duplicates: int
    index_prefix_len: int | None
    context_chars: int
    build_ms: float  # context build: memoized mem0 results + alignment/dedup + rendering
    error: str | None = None
    server_prompt_ms: float | None = None  # engine-reported prefill time (llama.cpp), no HTTP
    dropped: int = 0  # swap: retrieved memories left out for extras
    # evidence recall (benchmarks.locomo.evidence): the question's evidence ids, those some memory of the
    # user covers, those a memory in this prompt covers, and where: 1-based prompt positions of the hits
    # and 1-based mem0 ranks of the retrieved evidence
    evidence: int = 0
    evidence_coverable: int = 0
    evidence_hit: int = 0
    evidence_positions: tuple[int, ...] = ()
    evidence_ranks: tuple[int, ...] = ()


def select_questions(conv: Conversation, limit: int | None) -> list[QA]:
    """Categories 1-4 in LoCoMo order, the first ``limit`` (all when None)."""
    qs = [q for q in conv.qa if q.category in QUALITY_CATEGORIES]
    return qs[:limit] if limit else qs


def run_requests(
    engine: BenchEngine,
    search: CachedSearch,
    conversations: Sequence[tuple[int, Conversation]],
    users: Sequence[Ingested],
    questions: Sequence[Sequence[QA]],
    settings: RunSettings,
    *,
    progress: bool = True,
    on_record: Callable[[RequestRecord], None] | None = None,
    export: PromptExport | None = None,
) -> list[RequestRecord]:
    """Run every (conversation, k, mode) and return the records in execution order; ``export`` collects
    the prompts sent (``--export-prompts``)."""
    from tqdm import tqdm

    specs = mode_specs(settings)
    total = sum(len(q) for q in questions) * len(settings.top_k) * len(settings.modes)
    bar = tqdm(total=total, desc="requests", unit="req", disable=not progress)
    records: list[RequestRecord] = []

    def record(rec: RequestRecord) -> None:
        records.append(rec)
        if on_record is not None:
            on_record(rec)
        bar.update(1)

    try:
        for c_pos, ((c_idx, conv), user, qs) in enumerate(zip(conversations, users, questions)):
            evidence = EvidenceIndex.of_user(search.memory, user.user_id)
            for k_pos, k in enumerate(settings.top_k):
                # retrieve every question once up front: all modes then get the identical (memoized) mem0
                # results, and no mode's build time includes the first, uncached search
                for qa in qs:
                    search.search(qa.question, top_k=k.n, filters={"user_id": user.user_id}, **settings.mem0_kwargs)
                for r_pos, mode in enumerate(mode_order(settings.modes, c_pos + k_pos)):
                    bar.set_postfix_str(f"{conv.sample_id} k={k.label} {mode}")
                    run = _ModeRun.cold(engine, settings, export, c_idx, conv, k, mode, r_pos)
                    builder = ModeBuilder(
                        specs[mode],
                        search,
                        user_id=user.user_id,
                        k=k,
                        conversation_id=run.chat_id(0),
                        mem0_kwargs=settings.mem0_kwargs,
                    )
                    run.ask_all(builder, evidence, qs, record)
    finally:
        bar.close()
    return records


def mode_specs(settings: RunSettings) -> dict[str, ModeSpec]:
    """Every mode of a run parsed (clear errors for unknown names; dedup only with chat)."""
    specs = {
        m: parse_mode(m, extra_budget=settings.extra_budget, swap_budget=settings.swap_budget, protect=settings.protect)
        for m in settings.modes
    }
    if not settings.chat and any(s.dedup for s in specs.values()):
        raise ValueError("mode(s) ['dedup'] not available without --chat")
    if len(specs) != len(settings.modes):
        raise ValueError(f"a mode is repeated in {settings.modes}")
    return specs


@dataclass(frozen=True)
class _ModeRun:
    """One (conversation, k, mode) run on a cold engine cache: its questions asked as successive turns."""

    engine: BenchEngine
    settings: RunSettings
    export: PromptExport | None
    c_idx: int
    conv: Conversation
    k: KSpec
    mode: str
    position: int  # among the modes run for (conversation, k)
    flush: str  # how the engine cache was made cold

    @classmethod
    def cold(
        cls,
        engine: BenchEngine,
        settings: RunSettings,
        export: PromptExport | None,
        c_idx: int,
        conv: Conversation,
        k: KSpec,
        mode: str,
        position: int,
    ) -> _ModeRun:
        """Start the run: the engine's cache made cold, the warm-up requests sent, the run opened in the export."""
        how = engine.flush()
        engine.warmup(settings.warmup)
        if export is not None:
            export.start_run(
                conversation=c_idx,
                sample_id=conv.sample_id,
                k=k.label,
                mode=mode,
                position=position,
                warmup=settings.warmup,
            )
        return cls(engine, settings, export, c_idx, conv, k, mode, position, how)

    def chat_id(self, n: int) -> str:
        """The conversation id dedup points back into: one per chat (``n``: chats started before)."""
        base = f"{self.conv.sample_id}/k={self.k.label}"
        return f"{base}/chat{n}" if n else base

    def ask_all(
        self, builder: ModeBuilder, evidence: EvidenceIndex, qs: Sequence[QA], record: Callable[[RequestRecord], None]
    ) -> None:
        """Every question in order; with ``chat_turns`` a new chat (empty history) every so many questions."""
        history: list[dict[str, Any]] = []
        every = self.settings.chat_turns
        for turn, qa in enumerate(qs, start=1):
            if every and turn > 1 and (turn - 1) % every == 0:
                history = []
                builder.new_chat(self.chat_id((turn - 1) // every))
            record(self.ask(builder, evidence, turn, qa, history))

    def ask(
        self, builder: ModeBuilder, evidence: EvidenceIndex, turn: int, qa: QA, history: list[dict[str, Any]]
    ) -> RequestRecord:
        """Build the context, send the request (the chat's ``history`` grows by this turn), score the reply."""
        t0 = time.perf_counter()
        built = builder.build(qa.question)
        reply, build_ms = self._send(built, turn, qa, history, t0)
        builder.sent(built, reply.error is None)
        ev = evidence.score(qa.evidence, built.block_ids + built.duplicate_ids, built.retrieval_ids)
        return self._record(turn, qa, built, reply, build_ms, ev)

    def _measured(self, turn: int) -> bool:
        return not (self.settings.exclude_first_turn and turn == 1)

    def _send(
        self, built: BuiltContext, turn: int, qa: QA, history: list[dict[str, Any]], t0: float
    ) -> tuple[Reply, float]:
        """The reply and the context build time (ms since ``t0``, up to the finished prompt)."""
        carrier = {"results": [], "context_pilot": {"context": built.context}}
        s = self.settings
        if not s.chat:
            prompt = build_prompt(qa.question, carrier, template=PROMPT_TEMPLATE)
            build_ms = (time.perf_counter() - t0) * 1e3
            if self.export is not None:
                self.export.add(turn=turn, measured=self._measured(turn), prompt=prompt)
            return self.engine.complete(prompt, max_tokens=s.max_tokens), build_ms
        messages = build_messages(qa.question, carrier, system=SYSTEM_PROMPT, history=history)
        build_ms = (time.perf_counter() - t0) * 1e3
        if self.export is not None:
            self.export.add(
                turn=turn, measured=self._measured(turn), user=str(messages[-1]["content"]), new_chat=not history
            )
        reply = self.engine.chat(messages, max_tokens=s.max_tokens)
        history += [messages[-1], {"role": "assistant", "content": reply.text}]
        return reply, build_ms

    def _record(
        self, turn: int, qa: QA, built: BuiltContext, reply: Reply, build_ms: float, ev: EvidenceScore
    ) -> RequestRecord:
        answer = clean_answer(reply.text)
        scored = self.engine.measures_ttft and reply.error is None
        return RequestRecord(
            sample_id=self.conv.sample_id,
            conversation=self.c_idx,
            k=self.k.label,
            mode=self.mode,
            run_position=self.position,
            flush=self.flush,
            turn=turn,
            measured=self._measured(turn) and reply.error is None,
            question=qa.question,
            gold=qa.answer,
            category=qa.category,
            answer=answer,
            # timings, tokens and error as they came (the completion count is the replay's)
            **{k: v for k, v in asdict(reply).items() if k not in ("text", "completion_tokens")},
            f1=locomo_f1(answer, qa.answer, qa.category) if scored else None,
            judge=None,
            retrieved=built.retrieved,
            blocks=len(built.block_ids),
            extra=built.extra,
            duplicates=built.duplicates,
            index_prefix_len=built.prefix_len,
            context_chars=len(built.context),
            build_ms=build_ms,
            dropped=built.dropped,
            evidence=ev.evidence,
            evidence_coverable=ev.coverable,
            evidence_hit=ev.hit,
            evidence_positions=ev.positions,
            evidence_ranks=ev.ranks,
        )
