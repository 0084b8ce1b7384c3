"""The compared modes: how the retrieved memories become the context section of a prompt.

Every mode renders with :func:`cp_memory.render.render_context` — ``[Doc i] text`` lines, a blank line,
then annotations — and the runner wraps the context in one template shared by all modes, so the
only differences between modes are the ones being measured:

``baseline``          mem0's order, no order annotation (it would restate the prompt's own order).
``aligned``           :class:`~cp_memory.memory.ContextPilotMemory`: the user's context index reorders the
                      same memories to share a prefix with earlier requests, + the order annotation when the
                      order differs from mem0's (so an aligned prompt is as long as the baseline's, or longer
                      by its annotation).
``aligned+superset``  as ``aligned`` with ``extra_budget > 0``: a cached prefix may bring in a few other
                      memories of the same user (shown, not ranked); prompts get longer.
``aligned+superset@B`` the same with ``extra_budget=B`` (``aligned+superset`` takes ``--extra-budget``).
``aligned+swap@B/P``  length-neutral superset: a cached prefix may bring in up to ``B*k`` other memories, and as
                      many of the request's lowest-ranked memories are dropped (never one in the top ``P``
                      fraction of mem0's ranking), so the prompt keeps k blocks (``aligned+swap`` takes
                      ``--swap-budget`` / ``--swap-protect``): ``ContextPilotMemory(swap_budget=, protect=)``.
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

from cp_memory.core.alignment_mode import DEFAULT_PROTECT, AlignmentKind, AlignmentMode
from cp_memory.core.distance import DEFAULT_ALPHA
from cp_memory.core.render import render_context
from cp_memory.memory import ContextPilotMemory

logger = logging.getLogger(__name__)

__all__ = [
    "BUDGET",
    "CHAT_MODES",
    "MODES",
    "RECOMMENDED_MODE",
    "BuiltContext",
    "CachedSearch",
    "KSpec",
    "ModeBuilder",
    "ModeSpec",
    "mode_order",
    "mode_sort_key",
    "parse_mode",
    "parse_top_k",
]

#: the setting docs/locomo.md recommends (swap 0.1, protect 0.75: about half the prefill at k=100 for the
#: same prompt length and -0.3 points of evidence recall); shown in every default run, --quick included
RECOMMENDED_MODE = "aligned+swap@0.1/0.75"
MODES: tuple[str, ...] = ("baseline", "aligned", RECOMMENDED_MODE, "aligned+superset")
CHAT_MODES: tuple[str, ...] = MODES + ("dedup",)
#: superset / swap budget (fraction of k) of the modes named without ``@B`` (``--extra-budget``, ``--swap-budget``)
BUDGET = 0.25
_MODE = re.compile(r"(?:aligned\+)?(superset|swap)(?:@([0-9.]+)(?:/([0-9.]+))?)?")


@dataclass(frozen=True)
class ModeSpec:
    """What a mode name means: the ContextPilotMemory options it runs with (``aligned=False``: baseline).

    ``alignment`` is the library's :class:`~cp_memory.alignment_mode.AlignmentMode`; ``extra_budget``,
    ``swap_budget`` and ``protect`` (None unless swap) are its flat form, as the result tables show it."""

    name: str
    aligned: bool = True
    alignment: AlignmentMode = AlignmentMode()
    dedup: bool = False

    @property
    def kind(self) -> str:
        if not self.aligned:
            return "baseline"
        if self.dedup:
            return "dedup"
        return "aligned" if self.alignment.kind is AlignmentKind.EXACT else self.alignment.kind.value

    @property
    def extra_budget(self) -> float:
        return self.alignment.extra_budget

    @property
    def swap_budget(self) -> float:
        return self.alignment.swap_budget

    @property
    def protect(self) -> float | None:
        return self.alignment.protect if self.alignment.kind is AlignmentKind.SWAP else None


def parse_mode(
    name: str, *, extra_budget: float = BUDGET, swap_budget: float = BUDGET, protect: float = DEFAULT_PROTECT
) -> ModeSpec:
    """``baseline`` | ``aligned`` | ``dedup`` | ``aligned+superset[@B]`` | ``aligned+swap[@B[/P]]``.

    Budgets are fractions of k in (0, 1]; ``P`` (protect) in [0, 1], by default the library's
    (:data:`~cp_memory.alignment_mode.DEFAULT_PROTECT`). Without ``@`` the CLI's ``--extra-budget`` /
    ``--swap-budget`` / ``--swap-protect`` apply.
    """
    if name == "baseline":
        return ModeSpec(name, aligned=False)
    if name == "aligned":
        return ModeSpec(name)
    if name == "dedup":
        return ModeSpec(name, dedup=True)
    m = _MODE.fullmatch(name)
    if not m:
        raise ValueError(
            f"unknown mode {name!r}: baseline, aligned, dedup, aligned+superset[@B] or "
            "aligned+swap[@B[/P]] (e.g. aligned+swap@0.25/0.5)"
        )
    kind, b, p = m.group(1), m.group(2), m.group(3)
    try:
        budget = float(b) if b else (extra_budget if kind == "superset" else swap_budget)
        guard = float(p) if p else protect
    except ValueError:
        raise ValueError(f"bad number in mode {name!r}") from None
    if not 0 < budget <= 1:
        raise ValueError(f"mode {name!r}: the budget must be in (0, 1], got {budget}")
    if kind == "superset":
        if p:
            raise ValueError(f"mode {name!r}: superset takes no protect fraction")
        return ModeSpec(name, alignment=AlignmentMode.superset(budget))
    if not 0 <= guard <= 1:
        raise ValueError(f"mode {name!r}: protect must be in [0, 1], got {guard}")
    return ModeSpec(name, alignment=AlignmentMode.swap(budget, guard))


def mode_sort_key(name: str) -> tuple[int, float, float, str]:
    """Table order: baseline, aligned, superset by budget, swap by budget then protect, dedup, others."""
    try:
        spec = parse_mode(name)
    except ValueError:
        return (9, 0.0, 0.0, name)
    rank = {"baseline": 0, "aligned": 1, "superset": 2, "swap": 3, "dedup": 4}[spec.kind]
    return (rank, spec.extra_budget or spec.swap_budget, -(spec.protect or 0.0), name)


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
    block_ids: tuple[str, ...]  # memory ids in prompt order, one copy (repeat not expanded)
    retrieved: int  # memories mem0 returned for the question (<= k)
    extra: int  # superset/swap: other memories of the user shown
    duplicates: int  # dedup: retrieved memories replaced by location annotations
    prefix_len: int | None  # ContextPilot's index: leading blocks shared with earlier requests
    fallback: bool = False  # ContextPilotMemory fell back to mem0's order (an internal failure)
    retrieval_ids: tuple[str, ...] = ()  # mem0's ranking for the question (the same in every mode)
    duplicate_ids: tuple[str, ...] = ()  # dedup: memories a location annotation points back to
    dropped: int = 0  # swap: retrieved memories left out for extras
    response: Any = None  # the wrapper's response (to commit the turn once it is sent)


class CachedSearch:
    """Wraps a mem0 ``Memory``; ``search`` results are memoized per (query, top_k, filters, kwargs) and
    handed out as copies (:func:`_copy_response`), so all modes see the same retrieval (and it is paid
    once). Everything else (``get`` for superset extras, ...) passes through."""

    def __init__(self, memory: Any) -> None:
        self._memory = memory
        self._cache: dict[Hashable, Any] = {}
        self._lock = threading.Lock()
        self.calls = 0
        self.hits = 0

    @property
    def memory(self) -> Any:
        return self._memory

    def search(self, query: str, *, top_k: int = 20, filters: Mapping[str, Any] | None = None, **kwargs: Any) -> Any:
        key = (query, top_k, _freeze(filters), _freeze(kwargs))
        with self._lock:
            self.calls += 1
            hit = key in self._cache
            if hit:
                self.hits += 1
                return _copy_response(self._cache[key])
        out = self._memory.search(query, top_k=top_k, filters=dict(filters or {}), **kwargs)
        with self._lock:
            self._cache[key] = copy.deepcopy(out)
        return _copy_response(out)

    def ranked_ids(
        self, query: str, *, top_k: int, filters: Mapping[str, Any] | None = None, **kwargs: Any
    ) -> tuple[str, ...]:
        """mem0's ranking (memory ids) of a memoized search; not counted as a call."""
        key = (query, top_k, _freeze(filters), _freeze(kwargs))
        with self._lock:
            out = self._cache.get(key)
        if out is None:
            out = self.search(query, top_k=top_k, filters=filters, **kwargs)
        return tuple(str(r["id"]) for r in list(out.get("results", []))[:top_k])

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") or name in ("_memory", "_cache", "_lock"):
            raise AttributeError(name)
        return getattr(self._memory, name)


def _copy_response(out: Any) -> Any:
    """A copy of a mem0 search response that a caller may change without touching the memo: the dicts and
    lists of the response, its results and their nested dicts/lists are new (leaf values are immutable
    strings and numbers in mem0's results); ~20x cheaper than ``copy.deepcopy`` on 100 results."""
    if isinstance(out, dict):
        return {k: _copy_response(v) for k, v in out.items()}
    if isinstance(out, list):
        return [_copy_response(v) for v in out]
    return out if isinstance(out, (str, int, float, bool, type(None), tuple)) else copy.deepcopy(out)


def _freeze(value: Any) -> Hashable:
    if isinstance(value, Mapping):
        return tuple(sorted(((str(k), _freeze(v)) for k, v in value.items()), key=lambda kv: kv[0]))
    if isinstance(value, (list, tuple)):
        return tuple(_freeze(v) for v in value)
    return value if isinstance(value, Hashable) else repr(value)


class ModeBuilder:
    """Builds contexts for one (mode, k) over one conversation's user; create one per mode run."""

    def __init__(
        self,
        mode: str | ModeSpec,
        search: CachedSearch,
        *,
        user_id: str,
        k: KSpec,
        extra_budget: float = BUDGET,
        conversation_id: str | None = None,
        mem0_kwargs: Mapping[str, Any] | None = None,
        alpha: float = DEFAULT_ALPHA,
        options: Mapping[str, Any] | None = None,
        library_defaults: bool = False,
    ) -> None:
        """``options``: ContextPilotMemory options over the mode's own (e.g. ``annotate_top=None``, the full
        order annotation; ``annotate=False``; benchmarks.quality's arms). ``library_defaults``: the wrapper is
        ``ContextPilotMemory(search)`` with no option at all (an aligned mode only; benchmarks.quality's
        ``default`` arm: exactly what a user who turns cp_memory on gets)."""
        spec = mode if isinstance(mode, ModeSpec) else parse_mode(mode, extra_budget=extra_budget)
        if spec.name == "aligned+superset" and spec.extra_budget <= 0:
            raise ValueError("aligned+superset needs extra_budget > 0")
        self.spec = spec
        self.search = search
        self.user_id = user_id
        self.k = k
        self.conversation_id = conversation_id
        self.mem0_kwargs = dict(mem0_kwargs or {})
        self.cpm: ContextPilotMemory | None = None
        if library_defaults:
            if not spec.aligned or spec.dedup or options or spec.alignment != AlignmentMode():
                raise ValueError(f"library_defaults runs the plain aligned mode with no options, not {spec.name!r}")
            self.cpm = ContextPilotMemory(search)
        elif spec.aligned:
            # a new wrapper = a cold per-user context index and an empty dedup log for this mode
            # dedup: max_overfetch=0 -> the same k memories as every other mode, the ones already sent
            # replaced by location annotations (the paper's multi-turn dedup). ContextPilotMemory's default
            # over-fetch would instead top the prompt up to k memories not sent before (longer prompts).
            wrapper_options: dict[str, Any] = {
                "alpha": alpha,
                "annotate": True,
                "dedup": spec.dedup,
                **spec.alignment.options(),
                "max_overfetch": 0,
                **(options or {}),
            }
            self.cpm = ContextPilotMemory(search, **wrapper_options)

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

    def sent(self, built: BuiltContext, ok: bool) -> None:
        """The prompt was sent (``ok``) or failed: commit or roll back the dedup turn (two-phase wrappers)."""
        if self.cpm is None or built.response is None:
            return
        (self.cpm.commit if ok else self.cpm.rollback)(built.response)

    def _baseline(self, question: str) -> BuiltContext:
        response = self.search.search(question, top_k=self.k.n, filters=self.filters, **self.mem0_kwargs)
        results = list(response.get("results", []))[: self.k.n]
        ids = [str(r["id"]) for r in results]
        texts = [str(r.get("memory") or "") for r in results]
        # mem0's order: an order annotation would restate it (the wrapper adds one only when it reorders)
        context = render_context(texts * self.k.repeat)
        return BuiltContext(context, tuple(ids), len(ids), 0, 0, None, retrieval_ids=tuple(ids))

    def _aligned(self, question: str) -> BuiltContext:
        assert self.cpm is not None
        conv = self.conversation_id if self.spec.dedup else None
        response = self.cpm.search(
            question, filters=self.filters, top_k=self.k.n, conversation_id=conv, **self.mem0_kwargs
        )
        info = response["context_pilot"]
        if info.get("fallback"):
            logger.warning("ContextPilotMemory fell back to mem0's order for %r: %s", question, info.get("error"))
        blocks = info["blocks"]
        texts = [b["text"] for b in blocks]
        dup_ids = [str(d) for d in info.get("duplicates", ())] or [str(s["id"]) for s in info.get("sent", ())]
        if self.k.repeat == 1:
            context = info["context"]
        else:
            context = render_context(
                texts * self.k.repeat,
                order_annotation=info["order_annotation"] or None,
                location_annotations=info["location_annotations"],
            )
        retrieved = sum(1 for b in blocks if not b["extra"]) + len(dup_ids) + len(info.get("dropped", ()))
        ranking = self.search.ranked_ids(question, top_k=self.k.n, filters=self.filters, **self.mem0_kwargs)
        return BuiltContext(
            context,
            tuple(str(b["id"]) for b in blocks),
            retrieved,
            len(info["extra"]),
            len(dup_ids),
            int(info["prefix_len"]),
            bool(info.get("fallback")),
            retrieval_ids=ranking,
            duplicate_ids=tuple(dup_ids),
            dropped=len(info.get("dropped", ())),
            response=response,
        )
