"""Search overhead of ContextPilotMemory over plain mem0, and local-Qdrant latency at 20 users x 300 memories.

    python -m benchmarks.mem0_overhead                 # full run (~3-4 min on 2 cores)
    python -m benchmarks.mem0_overhead --quick         # 4 users x 100 memories, fewer queries
    python -m benchmarks.mem0_overhead --json out.json # also write the numbers

Data: LoCoMo (``--locomo``, else CP_MEMORY_LOCOMO, else ../shared/data/locomo10.json). Its 10 conversations
have 20 speakers; each speaker is one mem0 user whose memories are their ``observation`` facts followed by
their own dialogue turns, up to ``--per-user`` (300). Queries are the conversation's QA questions asked as
the user whose name the question mentions.

Ingestion: texts are embedded in batches with mem0's own embedder (``embed_batch``) and written with
mem0's ``_create_memory`` (the exact path ``add(..., infer=False)`` takes, minus one embedding call per
text) so that 6,000 memories load in about a minute instead of four.

Measured, for k = 20 and 100 (``threshold=0`` so mem0 returns k results):

* plain ``Memory.search`` latency (p50/p95);
* ContextPilotMemory overhead per search = wrapper time (search, plus ``commit`` for dedup) - the plain
  mem0 search time of the same question at the same k (paired, p50/p95), in two modes: ``align`` (no
  conversation: align + annotate + render) and ``dedup`` (every user runs one conversation through all its
  questions: align + dedup + render; the over-fetch of already-sent memories makes mem0's own call larger,
  ``mem0_fetched``, and that extra time counts as wrapper cost, not mem0 cost);
* fairness: a warm-up pass (every user's first question, every arm, every k) is not recorded; then per
  question the k order alternates and the order of plain/align/dedup rotates;
* local Qdrant: ``vector_store.search`` alone (query vectors precomputed) with one user's 300 memories
  stored vs. with all 20 users' (filtered by user_id), for the default one-collection-per-user layout or,
  with ``--no-partition``, mem0's single shared collection.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from benchmarks.common.config import JsonOptions, LocomoOptions, parse_config
from benchmarks.common.harness import add_json, add_locomo, envelope, write_json
from benchmarks.common.locomo import LocomoNotFound, load_locomo
from benchmarks.common.metrics import percentile  # the one percentile convention
from cp_memory.embedded import set_offline_env

set_offline_env()

KS = (20, 100)
ARMS = ("plain", "align", "dedup")
NO_QUESTION = ["what happened?"]  # a user no question names
METHOD = (
    "warm-up: every user's first question through every arm at every k; then per question "
    "the k order alternates and the order of plain/align/dedup rotates; overhead = wrapper "
    "time (search + commit) - plain mem0 time of the same question at the same k, so mem0 "
    "over-fetch for dedup counts as wrapper cost"
)
ByUser = dict[str, list[str]]
Sample = tuple[float, float | None, int | None]  # (total s, mem0 s inside the wrapper, results mem0 returned)
Samples = dict[tuple[int, str], list[Sample]]  # by (k, arm)
Overheads = dict[tuple[int, str], list[float]]  # by (k, arm): wrapper time - plain mem0 time


def pct(xs: list[float], q: float) -> float:
    """The project's one percentile convention (linear interpolation), ``q`` in [0, 1]."""
    value = percentile(xs, q * 100)
    return float("nan") if value is None else value


def summary(xs: list[float]) -> dict[str, float]:
    return {
        "p50_ms": round(pct(xs, 0.5) * 1e3, 3),
        "p95_ms": round(pct(xs, 0.95) * 1e3, 3),
        "mean_ms": round(statistics.fmean(xs) * 1e3, 3) if xs else float("nan"),
        "n": len(xs),
    }


def load_users(path: str | None, per_user: int, max_users: int) -> tuple[ByUser, ByUser]:
    """user id -> memory texts, user id -> questions about that user."""
    texts: ByUser = {}
    questions: ByUser = {}
    for n, conv in enumerate(load_locomo(path)):
        for speaker in conv.speakers:
            uid = f"s{n}-{speaker}"
            facts = [o.text for o in conv.observations if o.speaker == speaker]
            facts += [t.text for t in conv.turns if t.speaker == speaker]
            texts[uid] = list(dict.fromkeys(f.strip() for f in facts if f.strip()))[:per_user]
            questions[uid] = [q.question for q in conv.qa if speaker in q.question]
        if len(texts) >= max_users:
            break
    return dict(list(texts.items())[:max_users]), questions


def ingest(memory: Any, uid: str, texts: list[str]) -> None:
    vectors = memory.embedding_model.embed_batch(texts, "add")
    for text, vec in zip(texts, vectors):
        memory._create_memory(text, {text: vec}, {"user_id": uid, "role": "user"})


def timed(fn: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[float, Any]:
    t = time.perf_counter()
    out = fn(*args, **kwargs)
    return time.perf_counter() - t, out


def ingest_all(memory: Any, texts: ByUser, questions: ByUser, queries: int) -> dict[str, Any]:
    """Store every user's memories; local-Qdrant latency with the first user's stored alone, then with all."""
    probe_user = next(iter(texts))
    vectors = [
        memory.embedding_model.embed(q, "search") for q in (questions[probe_user] or NO_QUESTION)[: max(queries, 8)]
    ]

    def qdrant_latency(k: int) -> dict[str, float]:
        search = memory.vector_store.search
        filters = {"user_id": probe_user}
        return summary(
            [
                timed(search, query="", vectors=v, top_k=max(k * 4, 60), filters=filters)[0]
                for _ in range(3)
                for v in vectors
            ]
        )

    t0 = time.perf_counter()
    ingest(memory, probe_user, texts[probe_user])
    report: dict[str, Any] = {"qdrant_one_user": {k: qdrant_latency(k) for k in KS}}
    for uid in list(texts)[1:]:
        ingest(memory, uid, texts[uid])
    report["ingest_s"] = round(time.perf_counter() - t0, 1)
    report["memories"] = sum(len(t) for t in texts.values())
    report["qdrant_all_users"] = {k: qdrant_latency(k) for k in KS}
    return report


class Arms:
    """The three arms of a search — plain mem0, the wrapper aligning, the wrapper deduplicating — on one
    mem0 ``Memory`` whose ``search`` is spied on (the mem0 time and results inside each wrapper call)."""

    def __init__(self, memory: Any) -> None:
        from cp_memory.memory import ContextPilotMemory

        self.memory, self.real_search = memory, memory.search
        self.inner: list[float] = []
        self.fetched: list[int] = []
        memory.search = self._spy
        self.wrappers = {
            "align": ContextPilotMemory(memory, dedup=False),
            "dedup": ContextPilotMemory(memory, dedup=True),
        }

    def _spy(self, *a: Any, **kw: Any) -> Any:
        dt, out = timed(self.real_search, *a, **kw)
        self.inner.append(dt)
        self.fetched.append(len(out["results"]))
        return out

    def close(self) -> None:
        del self.memory.search  # the spy was an instance attribute: mem0's own method again
        self.memory.close()

    def run(self, arm: str, uid: str, q: str, k: int, conv: str) -> Sample:
        """One search of ``arm`` (``conv``: the dedup arm's conversation)."""
        if arm == "plain":
            dt, _ = timed(self.real_search, q, filters={"user_id": uid}, top_k=k, threshold=0.0)
            return dt, None, None
        cp = self.wrappers[arm]
        n_inner = len(self.inner)
        t = time.perf_counter()
        out = cp.search(
            q, filters={"user_id": uid}, top_k=k, threshold=0.0, conversation_id=conv if arm == "dedup" else None
        )
        commit = getattr(cp, "commit", None)
        if arm == "dedup" and callable(commit):
            commit(out)  # two-phase dedup: the turn counts as sent once committed
        dt = time.perf_counter() - t
        info = out["context_pilot"]
        assert not info["fallback"], info["error"]
        return dt, sum(self.inner[n_inner:]), sum(self.fetched[n_inner:])


def measure(arms: Arms, questions: ByUser, users: list[str], queries: int) -> tuple[Samples, Overheads]:
    """A warm-up (not recorded: every user's first question through every arm at every k), then per
    question the k order alternates and the arm order rotates, so no arm or k is always first; the
    wrapper's cost is paired with the plain search of the same question and k. (samples, overheads)."""
    for uid in users:
        for k in KS:
            for arm in ARMS:
                arms.run(arm, uid, (questions[uid] or NO_QUESTION)[0], k, f"warmup-{uid}")
    samples: Samples = {}
    overhead: Overheads = {}
    step = 0
    for uid in users:
        for q in (questions[uid] or NO_QUESTION)[:queries]:
            plain: dict[int, float] = {}
            for k in KS if step % 2 == 0 else KS[::-1]:
                for arm in ARMS[step % 3 :] + ARMS[: step % 3]:
                    res = arms.run(arm, uid, q, k, f"bench-{uid}-k{k}")
                    samples.setdefault((k, arm), []).append(res)
                    if arm == "plain":
                        plain[k] = res[0]
                step += 1
            for k in KS:
                for arm in ("align", "dedup"):
                    overhead.setdefault((k, arm), []).append(samples[(k, arm)][-1][0] - plain[k])
    return samples, overhead


def summaries(samples: Samples, overhead: Overheads) -> dict[str, Any]:
    report: dict[str, Any] = {}
    for k in KS:
        report[f"k{k}_plain_mem0"] = summary([t for t, _, _ in samples[(k, "plain")]])
        for mode in ("align", "dedup"):
            rows = samples[(k, mode)]
            report[f"k{k}_{mode}_total"] = summary([t for t, _, _ in rows])
            report[f"k{k}_{mode}_overhead"] = summary(overhead[(k, mode)])
            report[f"k{k}_{mode}_mem0_inside"] = summary([m for _, m, _ in rows if m is not None])
            # the wrapper's own work (align, dedup, render, commit), without any mem0 time: a lower bound
            report[f"k{k}_{mode}_own"] = summary([t - m for t, m, _ in rows if m is not None])
            report[f"k{k}_{mode}_mem0_fetched_mean"] = round(statistics.fmean([f for _, _, f in rows if f]), 1)
    return report


@dataclass(frozen=True, kw_only=True)
class OverheadConfig(LocomoOptions, JsonOptions):
    """The run's options (:func:`parse_args`)."""

    users: int
    per_user: int
    queries: int
    quick: bool
    no_partition: bool


def parse_args(argv: list[str] | None) -> OverheadConfig:
    ap = argparse.ArgumentParser(prog="python -m benchmarks.mem0_overhead", description=(__doc__ or "").split("\n")[0])
    ap.add_argument("--users", type=int, default=20)
    ap.add_argument("--per-user", type=int, default=300)
    ap.add_argument("--queries", type=int, default=8, help="questions per user per mode")
    ap.add_argument("--quick", action="store_true", help="4 users x 100 memories, 4 queries each")
    ap.add_argument(
        "--no-partition",
        action="store_true",
        help="one Qdrant collection for all users (mem0's default layout) instead of one per user",
    )
    add_locomo(ap)
    add_json(ap)
    args = parse_config(ap, OverheadConfig, argv)
    return replace(args, users=4, per_user=100, queries=4) if args.quick else args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    args = parse_args(argv)
    logging.basicConfig(level=logging.ERROR)
    try:
        texts, questions = load_users(args.locomo, args.per_user, args.users)
    except LocomoNotFound as exc:
        raise SystemExit(str(exc)) from None
    from cp_memory.embedded import default_memory

    report: dict[str, Any] = {"users": args.users, "per_user": args.per_user}
    report["load_average_start"] = [round(x, 2) for x in os.getloadavg()]
    t0 = time.perf_counter()
    memory = default_memory(partition=not args.no_partition)
    report["partitioned"] = not args.no_partition
    report["init_s"] = round(time.perf_counter() - t0, 2)
    report.update(ingest_all(memory, texts, questions, args.queries))
    arms = Arms(memory)
    samples, overhead = measure(arms, questions, list(texts), args.queries)
    arms.close()
    report.update({"method": METHOD, **summaries(samples, overhead)})
    report["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    payload = envelope("benchmarks.mem0_overhead", argv, **report)
    sys.stdout.write(json.dumps(payload, indent=2) + "\n")
    if args.json is not None:
        write_json(args.json, payload)
    return payload


if __name__ == "__main__":
    main()
