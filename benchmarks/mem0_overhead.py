"""Search overhead of ContextPilotMemory over plain mem0, and local-Qdrant latency at 20 users x 300 memories.

    .venv/bin/python benchmarks/mem0_overhead.py                 # full run (~3-4 min on 2 cores)
    .venv/bin/python benchmarks/mem0_overhead.py --quick         # 4 users x 100 memories, fewer queries
    .venv/bin/python benchmarks/mem0_overhead.py --json out.json # also write the numbers

Data: LoCoMo (../shared/data/locomo10.json, or CP_LOCOMO_PATH). Its 10 conversations have 20 speakers;
each speaker is one mem0 user whose memories are their ``observation`` facts followed by their own dialogue
turns, up to ``--per-user`` (300). Queries are the conversation's QA questions asked as the user whose name
the question mentions.

Ingestion: texts are embedded in batches with mem0's own embedder (``embed_batch``) and written with
mem0's ``_create_memory`` (the exact path ``add(..., infer=False)`` takes, minus one embedding call per
text) so that 6,000 memories load in about a minute instead of four.

Measured, for k = 20 and 100 (``threshold=0`` so mem0 returns k results):

* plain ``Memory.search`` latency (p50/p95);
* ContextPilotMemory overhead per search = wrapper time - the time of the mem0 call it made (p50/p95), in
  two modes: ``align`` (no conversation: align + annotate + render) and ``dedup`` (every user runs one
  conversation through all its questions: align + dedup + render; the over-fetch of already-sent
  memories makes mem0's own call larger, reported as ``mem0_fetched``);
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
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from cp_memory.embedded import set_offline_env  # noqa: E402

set_offline_env()

LOCOMO = Path(os.environ.get("CP_LOCOMO_PATH", ROOT.parent / "shared" / "data" / "locomo10.json"))


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    if not s:
        return float("nan")
    i = min(len(s) - 1, max(0, round(q * (len(s) - 1))))
    return s[i]


def summary(xs: list[float]) -> dict[str, float]:
    return {"p50_ms": round(pct(xs, 0.5) * 1e3, 3), "p95_ms": round(pct(xs, 0.95) * 1e3, 3),
            "mean_ms": round(statistics.fmean(xs) * 1e3, 3) if xs else float("nan"), "n": len(xs)}


def load_users(per_user: int, max_users: int) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """user id -> memory texts, user id -> questions about that user."""
    data = json.loads(LOCOMO.read_text(encoding="utf-8"))
    texts: dict[str, list[str]] = {}
    questions: dict[str, list[str]] = {}
    for n, sample in enumerate(data):
        conv = sample["conversation"]
        speakers = [conv["speaker_a"], conv["speaker_b"]]
        obs = sample["observation"]
        for speaker in speakers:
            uid = f"s{n}-{speaker}"
            facts: list[str] = []
            for key in sorted(obs, key=lambda k: int(k.split("_")[1])):
                facts += [f[0] for f in obs[key].get(speaker, []) if isinstance(f, list) and f and f[0]]
            sessions = sorted((k for k in conv if k.startswith("session_") and isinstance(conv[k], list)),
                              key=lambda k: int(k.split("_")[1]))
            for key in sessions:
                facts += [t["text"] for t in conv[key] if t.get("speaker") == speaker and t.get("text")]
            texts[uid] = list(dict.fromkeys(f.strip() for f in facts if f.strip()))[:per_user]
            questions[uid] = [q["question"] for q in sample["qa"]
                              if isinstance(q.get("question"), str) and speaker in q["question"]]
        if len(texts) >= max_users:
            break
    return dict(list(texts.items())[:max_users]), questions


def ingest(memory: Any, uid: str, texts: list[str]) -> None:
    vectors = memory.embedding_model.embed_batch(texts, "add")
    for text, vec in zip(texts, vectors):
        memory._create_memory(text, {text: vec}, {"user_id": uid, "role": "user"})


def timed(fn: Any, *args: Any, **kwargs: Any) -> tuple[float, Any]:
    t = time.perf_counter()
    out = fn(*args, **kwargs)
    return time.perf_counter() - t, out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--users", type=int, default=20)
    ap.add_argument("--per-user", type=int, default=300)
    ap.add_argument("--queries", type=int, default=8, help="questions per user per mode")
    ap.add_argument("--quick", action="store_true", help="4 users x 100 memories, 4 queries each")
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--no-partition", action="store_true",
                    help="one Qdrant collection for all users (mem0's default layout) instead of one per user")
    args = ap.parse_args(argv)
    if args.quick:
        args.users, args.per_user, args.queries = 4, 100, 4
    logging.basicConfig(level=logging.ERROR)
    if not LOCOMO.is_file():
        raise SystemExit(f"LoCoMo data not found at {LOCOMO} (set CP_LOCOMO_PATH)")

    from cp_memory.embedded import default_memory
    from cp_memory.memory import ContextPilotMemory

    report: dict[str, Any] = {"users": args.users, "per_user": args.per_user}
    t0 = time.perf_counter()
    memory = default_memory(partition=not args.no_partition)
    report["partitioned"] = not args.no_partition
    report["init_s"] = round(time.perf_counter() - t0, 2)
    texts, questions = load_users(args.per_user, args.users)
    users = list(texts)
    probe_user = users[0]
    probe_q = (questions[probe_user] or ["what happened?"])[: max(args.queries, 8)]
    probe_vecs = [memory.embedding_model.embed(q, "search") for q in probe_q]

    def qdrant_latency(k: int) -> dict[str, float]:
        xs = []
        for _ in range(3):
            for v in probe_vecs:
                dt, _ = timed(memory.vector_store.search, query="", vectors=v, top_k=max(k * 4, 60),
                              filters={"user_id": probe_user})
                xs.append(dt)
        return summary(xs)

    t0 = time.perf_counter()
    ingest(memory, probe_user, texts[probe_user])
    report["qdrant_one_user"] = {k: qdrant_latency(k) for k in (20, 100)}
    for uid in users[1:]:
        ingest(memory, uid, texts[uid])
    report["ingest_s"] = round(time.perf_counter() - t0, 1)
    report["memories"] = sum(len(t) for t in texts.values())
    report["qdrant_all_users"] = {k: qdrant_latency(k) for k in (20, 100)}

    real_search = memory.search
    inner: list[float] = []
    fetched: list[int] = []

    def spy(*a: Any, **kw: Any) -> Any:
        dt, out = timed(real_search, *a, **kw)
        inner.append(dt)
        fetched.append(len(out["results"]))
        return out

    for k in (20, 100):
        plain: list[float] = []
        for uid in users:
            for q in (questions[uid] or ["what happened?"])[: args.queries]:
                dt, _ = timed(real_search, q, filters={"user_id": uid}, top_k=k, threshold=0.0)
                plain.append(dt)
        report[f"k{k}_plain_mem0"] = summary(plain)
        for mode in ("align", "dedup"):
            cp = ContextPilotMemory(memory, dedup=(mode == "dedup"))
            memory.search = spy  # type: ignore[method-assign]
            inner.clear()
            fetched.clear()
            totals, overhead = [], []
            try:
                for uid in users:
                    for q in (questions[uid] or ["what happened?"])[: args.queries]:
                        conv = f"bench-{uid}" if mode == "dedup" else None
                        dt, out = timed(cp.search, q, filters={"user_id": uid}, top_k=k, threshold=0.0,
                                        conversation_id=conv)
                        assert not out["context_pilot"]["fallback"], out["context_pilot"]["error"]
                        totals.append(dt)
                        overhead.append(dt - inner[-1])
            finally:
                del memory.search
            report[f"k{k}_{mode}_total"] = summary(totals)
            report[f"k{k}_{mode}_overhead"] = summary(overhead)
            report[f"k{k}_{mode}_mem0_fetched_mean"] = round(statistics.fmean(fetched), 1)
    memory.close()
    print(json.dumps(report, indent=2))
    if args.json is not None:
        args.json.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    return report


if __name__ == "__main__":
    main()
