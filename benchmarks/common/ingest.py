"""Put LoCoMo conversations into mem0: one user per conversation.

``--memories``:

* ``observations`` (default) — LoCoMo's own per-session observation facts, one mem0 memory each,
  ``infer=False`` (no LLM). Each is prefixed with its session's date (``[8 May 2023] ...``) because a
  fifth of the questions are temporal and the facts themselves carry no date.
* ``turns`` — every raw dialogue turn as one memory (``[date] Speaker: text``), ``infer=False``.
* ``extract`` — mem0's own pipeline (``infer=True``): each session is added as a message list and an
  LLM extracts/consolidates facts, as in the paper's setup. Needs ``--llm-url``.

Exact repeats (LoCoMo states a few facts twice) are stored once, with the evidence of every copy.
Each observation's ``metadata.evidence`` holds the dialogue ids it was derived from (``D1:3,D1:4``),
which the evidence-recall statistics read back. A user whose memories are already in
the store (a persistent ``--mem0-dir``) is not ingested again.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.common.locomo import Conversation, evidence_ids

logger = logging.getLogger(__name__)

__all__ = ["MEMORY_SOURCES", "Ingested", "ingest", "make_memory", "memory_items", "user_id_for", "user_memories"]

MEMORY_SOURCES = ("observations", "turns", "extract")


@dataclass(frozen=True)
class Ingested:
    """One conversation's user in the store."""

    sample_id: str
    user_id: str
    memories: int  # memories the user has in mem0 after ingestion
    added: int  # add() calls made now (0: reused from a persistent store)
    seconds: float


def user_id_for(conv: Conversation, source: str, max_memories: int | None = None) -> str:
    """The mem0 user of a conversation, distinct per memory source (and per cap, for test slices)."""
    cap = f"-first{max_memories}" if max_memories else ""
    return f"locomo-{conv.sample_id}-{source}{cap}"


_DATE = re.compile(r"(\d{1,2})\s+([A-Za-z]+),?\s+(\d{4})")


def short_date(date_time: str) -> str:
    """``"1:56 pm on 8 May, 2023"`` -> ``"8 May 2023"`` (unchanged when it does not parse)."""
    m = _DATE.search(date_time)
    return f"{m.group(1)} {m.group(2)} {m.group(3)}" if m else date_time.strip()


def _session_dates(conv: Conversation) -> dict[int, str]:
    dates: dict[int, str] = {}
    for t in conv.turns:
        if t.date_time and t.session not in dates:
            dates[t.session] = short_date(t.date_time)
    return dates


def memory_items(conv: Conversation, source: str, max_memories: int | None = None) -> list[tuple[Any, dict[str, Any]]]:
    """What is added for ``conv``: ``(messages, metadata)`` pairs, in conversation order."""
    if source not in MEMORY_SOURCES:
        raise ValueError(f"memories must be one of {MEMORY_SOURCES}, got {source!r}")
    dates = _session_dates(conv)
    items: list[tuple[Any, dict[str, Any]]] = []
    seen: set[str] = set()

    def dated(session: int, text: str) -> str:
        when = dates.get(session, "")
        return f"[{when}] {text.strip()}" if when else text.strip()

    if source == "observations":
        kept: dict[str, dict[str, Any]] = {}
        for o in conv.observations:
            text = dated(o.session, o.text)
            if not o.text.strip():
                continue
            if text in kept:  # a repeated fact is stored once, covering the evidence of every copy
                merged = evidence_ids(kept[text]["evidence"], *o.evidence_ids)
                kept[text]["evidence"] = ",".join(merged)
                continue
            kept[text] = {
                "locomo_id": o.id,
                "session": o.session,
                "speaker": o.speaker,
                "evidence": ",".join(o.evidence_ids),
            }
            items.append((text, kept[text]))
    elif source == "turns":
        for t in conv.turns:
            text = dated(t.session, f"{t.speaker}: {t.text}")
            if not t.text.strip() or text in seen:
                continue
            seen.add(text)
            items.append((text, {"locomo_id": t.id, "session": t.session, "speaker": t.speaker}))
    else:
        sessions: dict[int, list[dict[str, str]]] = {}
        for t in conv.turns:
            role = "user" if t.speaker == conv.speakers[0] else "assistant"
            sessions.setdefault(t.session, []).append({"role": role, "content": f"{t.speaker}: {t.text}"})
        for n in sorted(sessions):
            items.append((sessions[n], {"session": n, "date": dates.get(n, "")}))
    return items[:max_memories] if max_memories else items


def make_memory(
    *,
    config_file: str | Path | None = None,
    store_dir: str | Path | None = None,
    llm_url: str | None = None,
    llm_model: str | None = None,
    llm_api_key: str | None = None,
) -> Any:
    """The mem0 ``Memory``: ``Memory.from_config(json)`` with ``config_file``, else the embedded default
    (local Qdrant in memory or under ``store_dir``, bundled MiniLM embedder); ``llm_url`` gives mem0 an
    OpenAI-compatible LLM (needed for ``--memories extract``)."""
    from cp_memory.embedded import default_memory, set_offline_env

    llm = None
    if llm_url:
        llm = {
            "provider": "openai",
            "config": {
                "openai_base_url": llm_url.rstrip("/"),
                "api_key": llm_api_key or "no-key",
                "model": llm_model or "default",
                "temperature": 0.0,
            },
        }
    if config_file:
        set_offline_env()
        from mem0 import Memory

        config = json.loads(Path(config_file).read_text(encoding="utf-8"))
        if llm is not None and "llm" not in config:
            config["llm"] = llm
        logger.info("mem0 from %s", config_file)
        return Memory.from_config(config)
    return default_memory(store_dir, llm=llm) if llm is not None else default_memory(store_dir)


def close_memory(memory: Any) -> None:
    """Release what a mem0 ``Memory`` holds: its history db (mem0's ``close``) and its vector store's client.
    mem0's ``close`` leaves the Qdrant client open, and local Qdrant locks its folder until that client closes:
    a second ``Memory`` on the same folder in the same process (a resumed run, a test) needs it closed."""
    for release in (
        getattr(memory, "close", None),
        getattr(getattr(getattr(memory, "vector_store", None), "client", None), "close", None),
    ):
        if callable(release):
            try:
                release()
            except Exception:
                logger.debug("closing mem0 failed", exc_info=True)


def user_memories(memory: Any, user_id: str) -> list[Any]:
    """Every memory of ``user_id`` in a mem0 store."""
    try:
        out = memory.get_all(filters={"user_id": user_id}, top_k=100_000)
    except TypeError:  # older mem0: get_all(user_id=..., limit=...)
        out = memory.get_all(user_id=user_id, limit=100_000)
    return list(out.get("results", []) if isinstance(out, Mapping) else out)


def ingest(
    memory: Any,
    conversations: Sequence[Conversation],
    source: str,
    *,
    max_memories: int | None = None,
    progress: bool = True,
) -> list[Ingested]:
    """Add each conversation's memories for its own user (skipped when the user already has all of them;
    a user left partial by a run cut off mid-ingestion is emptied and ingested again)."""
    import time

    from tqdm import tqdm

    out = []
    for conv in conversations:
        uid = user_id_for(conv, source, max_memories)
        t0 = time.perf_counter()
        have = len(user_memories(memory, uid))
        items = memory_items(conv, source, max_memories)
        infer = source == "extract"
        if have and (infer or have == len(items)):
            logger.info("%s: %d memories already stored for %s; not ingested again", conv.sample_id, have, uid)
            out.append(Ingested(conv.sample_id, uid, have, 0, 0.0))
            continue
        if have:  # a store left by a run cut off mid-ingestion: never answer over a partial user
            logger.warning(
                "%s: %d of %d memories stored for %s (an ingestion cut short); ingesting again",
                conv.sample_id,
                have,
                len(items),
                uid,
            )
            memory.delete_all(user_id=uid)
        bar: Iterable[tuple[Any, dict[str, Any]]] = tqdm(
            items,
            desc=f"ingest {conv.sample_id} ({source})",
            unit="mem" if not infer else "session",
            disable=not progress,
            leave=False,
        )
        for messages, metadata in bar:
            memory.add(messages, user_id=uid, infer=infer, metadata=metadata)
        n = len(user_memories(memory, uid))
        seconds = time.perf_counter() - t0
        logger.info("%s: %d add() calls -> %d memories for %s in %.1f s", conv.sample_id, len(items), n, uid, seconds)
        if n == 0:
            raise RuntimeError(
                f"no memories stored for {uid} after ingestion (source {source}); "
                "with --memories extract check --llm-url"
            )
        out.append(Ingested(conv.sample_id, uid, n, len(items), seconds))
    return out
