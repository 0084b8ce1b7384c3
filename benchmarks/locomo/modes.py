"""The compared modes: how the retrieved memories become the context section of a prompt.

Every mode renders with :func:`cp_memory.render.render_context` — ``[Doc i] text`` lines, a blank line,
then annotations — and the runner wraps the context in one template shared by all modes, so the
only differences between modes are the ones being measured:

``baseline``          mem0's order. It still carries an order annotation (``[Doc 1] > [Doc 2] > ...``, the
                      natural order), so its prompts are as long as the aligned ones.
``aligned``           :class:`~cp_memory.memory.ContextPilotMemory`: the user's context index reorders the
                      same memories to share a prefix with earlier requests, + the order annotation.
``aligned+superset``  as ``aligned`` with ``extra_budget > 0``: a cached prefix may bring in a few other
                      memories of the same user (shown, not ranked); prompts get longer.
``dedup``             (chat only) aligned + multi-turn de-duplication: of the same k retrieved memories,
                      those sent in an earlier turn of the chat are replaced by location annotations
                      (``Please refer to [Doc 3] in the previous conversation (turn 1).``).

``NxM`` top-k (e.g. ``5x10``): the N retrieved memories are shown M times in a row (N*M blocks), each
mode repeating its own order; labels run 1..N*M and the order annotation ranks the first copy.

Each mode builder owns a fresh :class:`ContextPilotMemory` (cold per-user index and dedup log) over a
shared :class:`CachedSearch`, so every mode sees exactly the same mem0 results for a question.
"""
from __future__ import annotations

import copy
import logging
import re
import threading
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from cp_memory.annotations import doc_label, order_annotation
from cp_memory.memory import ContextPilotMemory
from cp_memory.render import render_context

logger = logging.getLogger(__name__)

__all__ = [
    "CHAT_MODES",
    "MODES",
    "BuiltContext",
    "CachedSearch",
    "KSpec",
    "ModeBuilder",
    "mode_order",
    "parse_top_k",
]

MODES: tuple[str, ...] = ("baseline", "aligned", "aligned+superset")
CHAT_MODES: tuple[str, ...] = MODES + ("dedup",)


@dataclass(frozen=True)
class KSpec:
    """``n`` memories retrieved, shown ``repeat`` times."""

    n: int
    repeat: int = 1

    @property
    def label(self) -> str:
        return str(self.n) if self.repeat == 1 else f"{self.n}x{self.repeat}"


def parse_top_k(text: str) -> list[KSpec]:
    """``"20,100,5x10"`` -> ``[KSpec(20), KSpec(100), KSpec(5, 10)]``."""
    out = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        m = re.fullmatch(r"(\d+)(?:[xX*](\d+))?", part)
        if not m or int(m.group(1)) < 1 or (m.group(2) is not None and int(m.group(2)) < 1):
            raise ValueError(f"bad top-k {part!r}: use N or NxM with positive integers (e.g. 20,100,5x10)")
        out.append(KSpec(int(m.group(1)), int(m.group(2) or 1)))
    if not out:
        raise ValueError("no top-k given")
    if len({k.label for k in out}) != len(out):
        raise ValueError(f"top-k repeated in {text!r}")
    return out


def mode_order(modes: Sequence[str], shift: int) -> list[str]:
    """``modes`` rotated by ``shift``: the runner alternates which mode goes first."""
    modes = list(modes)
    if not modes:
        return modes
    s = shift % len(modes)
    return modes[s:] + modes[:s]


@dataclass(frozen=True)
class BuiltContext:
    """The context section of one prompt and what produced it."""

    context: str
    block_ids: tuple[str, ...]        # memory ids in prompt order, one copy (repeat not expanded)
    retrieved: int                    # memories mem0 returned for the question (<= k)
    extra: int                        # superset: other memories of the user shown
    duplicates: int                   # dedup: retrieved memories replaced by location annotations
    prefix_len: int | None            # ContextPilot's index: leading blocks shared with earlier requests
    fallback: bool = False            # ContextPilotMemory fell back to mem0's order (an internal failure)


class CachedSearch:
    """Wraps a mem0 ``Memory``; ``search`` results are memoized per (query, top_k, filters, kwargs) and
    handed out as deep copies, so all modes see the same retrieval (and it is paid once). Everything
    else (``get`` for superset extras, ...) passes through."""

    def __init__(self, memory: Any) -> None:
        self._memory = memory
        self._cache: dict[Hashable, Any] = {}
        self._lock = threading.Lock()
        self.calls = 0
        self.hits = 0

    @property
    def memory(self) -> Any:
        return self._memory

    def search(self, query: str, *, top_k: int = 20, filters: Mapping[str, Any] | None = None,
               **kwargs: Any) -> Any:
        key = (query, top_k, _freeze(filters), _freeze(kwargs))
        with self._lock:
            self.calls += 1
            hit = key in self._cache
            if hit:
                self.hits += 1
                return copy.deepcopy(self._cache[key])
        out = self._memory.search(query, top_k=top_k, filters=dict(filters or {}), **kwargs)
        with self._lock:
            self._cache[key] = copy.deepcopy(out)
        return out

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_memory", "_cache", "_lock"):
            raise AttributeError(name)
        return getattr(self._memory, name)


def _freeze(value: Any) -> Hashable:
    if isinstance(value, Mapping):
        return tuple(sorted(((str(k), _freeze(v)) for k, v in value.items()), key=lambda kv: kv[0]))
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    return value if isinstance(value, Hashable) else repr(value)


class ModeBuilder:
    """Builds contexts for one (mode, k) over one conversation's user; create one per mode run."""

    def __init__(self, mode: str, search: CachedSearch, *, user_id: str, k: KSpec, extra_budget: float = 0.25,
                 conversation_id: str | None = None, mem0_kwargs: Mapping[str, Any] | None = None,
                 alpha: float = 0.001) -> None:
        if mode not in CHAT_MODES:
            raise ValueError(f"unknown mode {mode!r}; choose from {CHAT_MODES}")
        if mode == "aligned+superset" and extra_budget <= 0:
            raise ValueError("aligned+superset needs extra_budget > 0")
        self.mode = mode
        self.search = search
        self.user_id = user_id
        self.k = k
        self.conversation_id = conversation_id
        self.mem0_kwargs = dict(mem0_kwargs or {})
        self.cpm: ContextPilotMemory | None = None
        if mode != "baseline":
            # a new wrapper = a cold per-user context index and an empty dedup log for this mode
            # dedup: max_overfetch=0 -> the same k memories as every other mode, the ones already sent
            # replaced by location annotations (the paper's multi-turn dedup). ContextPilotMemory's default
            # over-fetch would instead top the prompt up to k memories not sent before (longer prompts).
            self.cpm = ContextPilotMemory(search, alpha=alpha, annotate=True, dedup=mode == "dedup",
                                          extra_budget=extra_budget if mode == "aligned+superset" else 0.0,
                                          max_overfetch=0)

    @property
    def filters(self) -> dict[str, Any]:
        return {"user_id": self.user_id}

    def new_chat(self, conversation_id: str) -> None:
        """Start another chat: dedup then only points back into turns of this one."""
        self.conversation_id = conversation_id

    def build(self, question: str) -> BuiltContext:
        if self.cpm is None:
            return self._baseline(question)
        return self._aligned(question)

    def _baseline(self, question: str) -> BuiltContext:
        response = self.search.search(question, top_k=self.k.n, filters=self.filters, **self.mem0_kwargs)
        results = list(response.get("results", []))[: self.k.n]
        ids = [str(r["id"]) for r in results]
        texts = [str(r.get("memory") or "") for r in results]
        labels: dict[Hashable, str] = {i: doc_label(pos) for pos, i in enumerate(ids, start=1)}
        note = order_annotation(ids, ids, label=labels) if len(ids) >= 2 else None
        context = render_context(texts * self.k.repeat, order_annotation=note)
        return BuiltContext(context, tuple(ids), len(ids), 0, 0, None)

    def _aligned(self, question: str) -> BuiltContext:
        assert self.cpm is not None
        conv = self.conversation_id if self.mode == "dedup" else None
        response = self.cpm.search(question, filters=self.filters, top_k=self.k.n, conversation_id=conv,
                                   **self.mem0_kwargs)
        info = response["context_pilot"]
        if info.get("fallback"):
            logger.warning("ContextPilotMemory fell back to mem0's order for %r: %s", question, info.get("error"))
        blocks = info["blocks"]
        texts = [b["text"] for b in blocks]
        if self.k.repeat == 1:
            context = info["context"]
        else:
            context = render_context(texts * self.k.repeat, order_annotation=info["order_annotation"] or None,
                                     location_annotations=info["location_annotations"])
        retrieved = sum(1 for b in blocks if not b["extra"]) + len(info["duplicates"])
        return BuiltContext(context, tuple(b["id"] for b in blocks), retrieved, len(info["extra"]),
                            len(info["duplicates"]), int(info["prefix_len"]), bool(info.get("fallback")))
