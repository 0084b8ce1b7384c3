"""Would mem0 return this memory for these filters? A three-valued evaluator with Qdrant's own semantics.

The second gate of superset/swap extras, after the store itself (:mod:`.admission`), and the only one where
the store cannot be asked (then for entity-id scopes alone: ``SearchPipeline.reads_extras``).
:func:`evaluate` answers ``MATCH``, ``NO_MATCH`` or ``UNKNOWN``; :func:`admits` is True only for ``MATCH``.

It reads a filter as mem0's Qdrant store builds it (``Qdrant._create_filter``: ``"*"`` adds no condition
and a sub-filter that builds to nothing is dropped from its ``AND``/``OR``/``NOT``; a list is ``MatchAny``,
``ne``/``nin`` are ``MatchExcept``, ranges ``Range`` or, for ISO datetime bounds, ``DatetimeRange``) and
applies Qdrant's semantics: a list payload matches when an element does (``ne``/``nin``: when an element lies
outside the set); null and ``[]`` are absent and an absent field matches no condition (``NOT`` admits it);
``bool``, ``int`` and ``float`` are distinct; ``contains``/``icontains`` are known only where whole-word and
substring matching agree. Whatever it cannot be sure of (a value mem0 refuses, several operators in one
dict, a key the copy cannot show, a treatment that differs between Qdrant versions) is ``UNKNOWN``, stays
``UNKNOWN`` through ``NOT`` (Kleene logic) and is refused. mem0's search merges top-level ``AND`` conditions
first, which can only drop conditions: a proven match is one mem0's search returns (docs/mem0.md).
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from enum import Enum
from typing import Any

from ..core.scope import ENTITY_KEYS

__all__ = ["StoredCopy", "Verdict", "admits", "evaluate", "is_expired"]

logger = logging.getLogger(__name__)

Tri = bool | None  # None: cannot tell

_LOGICAL = ("AND", "OR", "NOT")
_RANGE_OPS = frozenset({"gt", "gte", "lt", "lte"})
_OPS = _RANGE_OPS | {"eq", "ne", "in", "nin", "contains", "icontains"}
#: keys of mem0's ``get`` output that are not payload keys, and payload keys ``get`` never shows
_ITEM_ONLY = frozenset({"id", "score", "metadata", "memory"})
_GET_HIDES = frozenset({"id", "text_lemmatized"})
_PATH = re.compile(r"[A-Za-z0-9_\-]+(\.[A-Za-z0-9_\-]+)*")
#: mem0's test for a datetime range bound (``Qdrant._ISO_DATETIME_RE``)
_MEM0_ISO = re.compile(r"^\d{4}-\d{2}-\d{2}([T ]\d{2}:\d{2}(:\d{2})?(\.\d+)?(Z|[+-]\d{2}:?\d{2})?)?$")
#: payload strings Qdrant core surely parses as datetimes (a subset of its formats), and its fallback: naive = UTC
_CORE_DATETIMES = (
    (re.compile(r"\d{4}-\d{2}-\d{2}"), "%Y-%m-%d"),
    (re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}"), "%Y-%m-%dT%H:%M"),
    (re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}"), "%Y-%m-%d %H:%M"),
    (re.compile(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d{1,6})?(Z|[+-]\d{2}:?\d{2})?"), None),
    (re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(\.\d{1,6})?(Z|[+-]\d{2}:?\d{2})?"), None),
)
_EXACT_INT = 2**53  # beyond this, int/float comparisons may differ between Python and the store


class Verdict(Enum):
    """Does a memory's stored copy satisfy a filter set?"""

    MATCH = "match"
    NO_MATCH = "no_match"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class StoredCopy:
    """What is known of a memory's current stored copy: its text and its payload (the fields filters name).

    ``hidden`` lists payload keys that may exist but this copy cannot show (mem0's ``get`` drops ``id`` and
    ``text_lemmatized``): any condition on them is unknown.
    """

    id: str
    text: str
    payload: Mapping[str, Any]
    hidden: frozenset[str] = field(default_factory=frozenset)

    @classmethod
    def of_payload(cls, memory_id: Any, payload: Mapping[str, Any]) -> StoredCopy:
        """The store's own payload (exact)."""
        data = payload.get("data")
        return cls(id=str(memory_id), text="" if data is None else str(data), payload=dict(payload))

    @classmethod
    def of_item(cls, item: Any) -> StoredCopy | None:
        """A copy rebuilt from mem0's ``get`` output (promoted keys at the top, other payload keys under
        ``metadata``, ``data`` as ``memory``); None when ``item`` is not a memory dict."""
        if not isinstance(item, Mapping):
            return None
        payload: dict[str, Any] = {}
        hidden = set(_GET_HIDES)
        for key, value in item.items():
            if key in _ITEM_ONLY or value is None:  # a null payload value matches no condition, like an absent one
                continue
            payload[str(key)] = value
        meta = item.get("metadata")
        if isinstance(meta, Mapping):
            for key, value in meta.items():
                if key in payload:  # two values for one key: which one the store holds is unknown
                    hidden.add(str(key))
                payload[str(key)] = value
        elif meta is not None:
            return None
        text = "" if item.get("memory") is None else str(item["memory"])
        payload["data"] = text
        return cls(id=str(item.get("id", "")), text=text, payload=payload, hidden=frozenset(hidden))


class _Unknowable(Exception):
    """A condition whose outcome this evaluator cannot be sure of."""


# ---------------------------------------------------------------- Kleene logic
def _all(values: Iterable[Tri]) -> Tri:
    unknown = False
    for v in values:
        if v is False:
            return False
        unknown = unknown or v is None
    return None if unknown else True


def _any(values: Iterable[Tri]) -> Tri:
    unknown = False
    for v in values:
        if v is True:
            return True
        unknown = unknown or v is None
    return None if unknown else False


def _not(value: Tri) -> Tri:
    return None if value is None else not value


# ---------------------------------------------------------------- payload values
def _elements(copy: StoredCopy, key: str) -> list[Any]:
    """The values a condition on ``key`` is checked against (a list payload: its elements; absent: [])."""
    if not _PATH.fullmatch(key) or key in copy.hidden or key.split(".", 1)[0] in copy.hidden:
        raise _Unknowable(key)
    node: Any = copy.payload
    for part in key.split("."):
        if isinstance(node, list):
            raise _Unknowable(key)  # a path through an array: not modelled
        if not isinstance(node, Mapping) or part not in node:
            return []
        node = node[part]
    values = node if isinstance(node, list) else [node]
    return [v for v in values if v is not None]


def _kind(value: Any) -> type | None:
    """Qdrant's exact-match value kinds: bool, int and str are distinct; anything else matches nothing."""
    if isinstance(value, bool):
        return bool
    if isinstance(value, int):
        if abs(value) >= 2**63:
            raise _Unknowable(value)
        return int
    if isinstance(value, str):
        return str
    return None


def _same(have: Any, want: Any) -> bool:
    kind = _kind(have)
    return kind is not None and kind is _kind(want) and have == want


def _exact_value(value: Any) -> Any:
    """A ``MatchValue`` operand (bool, int or str; anything else mem0/Qdrant refuses)."""
    if _kind(value) is None:
        raise _Unknowable(value)
    return value


def _variants(values: Any) -> list[Any]:
    """A ``MatchAny``/``MatchExcept`` operand: a list of str, or of int (not bool); anything else is refused."""
    if not isinstance(values, list):
        raise _Unknowable(values)
    kinds = {_kind(v) for v in values}
    if not kinds <= {str} and not kinds <= {int}:
        raise _Unknowable(values)
    return values


def _except(elements: list[Any], values: list[Any]) -> Tri:
    """``MatchExcept``: some element outside ``values``. Elements of another kind than the values: unknown."""
    kinds = {_kind(v) for v in values}
    verdicts: list[Tri] = []
    for e in elements:
        kind = _kind(e)
        if kind is None or (kinds and kind not in kinds) or (not kinds and kind is bool):
            verdicts.append(None)
        else:
            verdicts.append(not any(_same(e, v) for v in values))
    return _any(verdicts)


def _number(value: Any) -> float | int:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise _Unknowable(value)
    if abs(value) >= _EXACT_INT:
        raise _Unknowable(value)
    return value


def _bound_datetime(value: str) -> datetime:
    """A datetime range bound as Qdrant receives it (pydantic ``datetime | date``; naive means UTC)."""
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError as exc:
        raise _Unknowable(value) from exc
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=timezone.utc)


def _payload_datetime(value: Any) -> datetime | None:
    """A payload value as Qdrant reads it for a datetime range: None when it is surely no datetime."""
    if not isinstance(value, str):
        return None
    for pattern, fmt in _CORE_DATETIMES:
        if pattern.fullmatch(value):
            try:
                parsed = datetime.strptime(value, fmt) if fmt else datetime.fromisoformat(value)
            except ValueError as exc:
                raise _Unknowable(value) from exc
            return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=timezone.utc)
    if re.match(r"\s*[0-9+\-]", value):
        raise _Unknowable(value)  # Qdrant core accepts other spellings too (offsets, "UTC", nanoseconds)
    return None


def _in_range(have: Any, bounds: Mapping[str, Any]) -> bool:
    return all({"gt": have > b, "gte": have >= b, "lt": have < b, "lte": have <= b}[op] for op, b in bounds.items())


def _range(elements: list[Any], cond: Mapping[str, Any]) -> Tri:
    if all(isinstance(v, str) and _MEM0_ISO.match(v) for v in cond.values()):
        bounds = {op: _bound_datetime(v) for op, v in cond.items()}
        verdicts: list[Tri] = []
        for e in elements:
            try:
                when = _payload_datetime(e)
            except _Unknowable:
                verdicts.append(None)
                continue
            verdicts.append(when is not None and _in_range(when, bounds))
        return _any(verdicts)
    numbers = {op: _number(v) for op, v in cond.items()}
    verdicts = []
    for e in elements:
        if isinstance(e, bool) or not isinstance(e, (int, float)):
            verdicts.append(False)
            continue
        try:
            verdicts.append(_in_range(_number(e), numbers))
        except _Unknowable:
            verdicts.append(None)
    return _any(verdicts)


def _words(text: str) -> list[str]:
    """Qdrant's default word tokenizer (fields without a text index): alphanumeric runs, lowercased."""
    return [t.lower() for t in re.findall(r"[^\W_]+", text)]


def _text(elements: list[Any], text: Any) -> Tri:
    """``MatchText``: substring (older Qdrant local mode) or all query words (Qdrant core); known where both agree."""
    if not isinstance(text, str):
        raise _Unknowable(text)
    verdicts: list[Tri] = []
    for e in elements:
        if not isinstance(e, str):
            verdicts.append(False)
            continue
        words = set(_words(e))
        query = _words(text)
        by_words = bool(query) and all(w in words for w in query)
        by_substring = text in e
        verdicts.append(by_words if by_words == by_substring else None)
    return _any(verdicts)


# ---------------------------------------------------------------- mem0's filter, as Qdrant builds it
def _operators(key: str, cond: Mapping[str, Any], copy: StoredCopy) -> Tri:
    ops = set(cond)
    if not ops or not ops <= _OPS:
        raise _Unknowable(cond)  # mem0 refuses an unknown operator
    if ops & _RANGE_OPS:
        if ops - _RANGE_OPS:
            raise _Unknowable(cond)  # mem0 refuses ranges mixed with other operators
        return _range(_elements(copy, key), cond)
    if len(ops) > 1:
        raise _Unknowable(cond)  # mem0 applies only the first of eq, ne, in, nin, contains
    (op,) = ops
    want = cond[op]
    if op == "eq":
        want = _exact_value(want)
        return any(_same(e, want) for e in _elements(copy, key))
    if op == "in":
        values = _variants(want)
        return any(_same(e, v) for e in _elements(copy, key) for v in values)
    if op in ("ne", "nin"):  # MatchExcept takes a list of str or of int, as MatchAny
        return _except(_elements(copy, key), _variants([want] if op == "ne" else want))
    return _text(_elements(copy, key), want)


def _field(key: str, cond: Any, copy: StoredCopy, top: bool) -> tuple[bool, Tri]:
    """(built, verdict) of one field condition; built False: mem0 adds no condition (``"*"``)."""
    if top and key in ENTITY_KEYS and cond is not None:
        cond = str(cond).strip()  # mem0 coerces and trims the entity ids of the filter's top level
    try:
        if isinstance(cond, Mapping):
            return True, _operators(key, cond, copy)
        if isinstance(cond, str) and cond == "*":
            if key in ENTITY_KEYS:  # stores differ: mem0's Qdrant adds no condition, a partitioned one matches none
                raise _Unknowable(key)
            return False, True
        if isinstance(cond, list):
            values = _variants(cond)
            return True, any(_same(e, v) for e in _elements(copy, key) for v in values)
        want = _exact_value(cond)
        return True, any(_same(e, want) for e in _elements(copy, key))
    except _Unknowable:
        return True, None


def _filter(filters: Any, copy: StoredCopy, top: bool) -> tuple[bool, Tri]:
    """(built, verdict) of a filter dict, as ``Qdrant._create_filter`` builds it (built False: no condition)."""
    if not isinstance(filters, Mapping):
        return True, None
    must: list[Tri] = []
    should: list[Tri] = []
    must_not: list[Tri] = []
    for key, cond in filters.items():
        if not isinstance(key, str) or key.startswith("$"):
            return True, None  # "$or"/"$not" spellings: mem0 merges them with AND/OR/NOT in ways not modelled
        if key in _LOGICAL:
            if not isinstance(cond, list) or not all(isinstance(c, Mapping) for c in cond):
                return True, None
            target = {"AND": must, "OR": should, "NOT": must_not}[key]
            for sub in cond:
                built, verdict = _filter(sub, copy, top=False)
                if built:
                    target.append(verdict)
        else:
            built, verdict = _field(key, cond, copy, top)
            if built:
                must.append(verdict)
    if not (must or should or must_not):
        return False, True
    return True, _all([_all(must), _not(_any(must_not)), _any(should) if should else True])


def is_expired(payload: Mapping[str, Any], today: date | None = None) -> bool:
    """mem0 hides a memory whose ``expiration_date`` is before today (UTC) unless ``show_expired``."""
    value = payload.get("expiration_date")
    if not value:
        return False
    try:
        day = date.fromisoformat(str(value)[:10])
    except ValueError:
        return True  # unreadable: treat as hidden (never show what mem0 might hide)
    return day < (today or datetime.now(timezone.utc).date())


def evaluate(filters: Mapping[str, Any] | None, copy: StoredCopy) -> Verdict:
    """Would Qdrant, given mem0's translation of ``filters``, match ``copy``'s payload?"""
    if not isinstance(filters, Mapping):
        return Verdict.UNKNOWN
    try:
        _, verdict = _filter(filters, copy, top=True)
    except Exception:  # a filter shape not foreseen: never admit on a guess
        logger.debug("filter evaluation failed for %r", filters, exc_info=True)
        return Verdict.UNKNOWN
    return {True: Verdict.MATCH, False: Verdict.NO_MATCH, None: Verdict.UNKNOWN}[verdict]


def admits(
    filters: Mapping[str, Any] | None,
    memory: StoredCopy | Mapping[str, Any],
    *,
    show_expired: bool = False,
    today: date | None = None,
) -> bool:
    """True only if mem0's search with ``filters`` would return ``memory`` (a :class:`StoredCopy`, or a
    memory dict from mem0's ``get``): a proven ``MATCH``, text not empty, not expired (unless
    ``show_expired``)."""
    copy = memory if isinstance(memory, StoredCopy) else StoredCopy.of_item(memory)
    if copy is None or not copy.text:
        return False  # mem0's search skips memories without text
    if not show_expired and is_expired(copy.payload, today):
        return False
    return evaluate(filters, copy) is Verdict.MATCH
