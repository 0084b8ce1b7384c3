"""Would mem0 return this memory for these filters? A conservative evaluator, for superset/swap extras.

Superset and swap alignment may show memories the query did not retrieve, taken from cached prefixes of
the same scope. Before one reaches a prompt, its current copy (``get``) must satisfy the caller's *whole*
filter set: entity ids, metadata conditions and mem0's operators (``eq ne in nin gt gte lt lte contains
icontains``, ``"*"``, ``AND OR NOT``). :func:`admits` answers True only when it can prove the match; any
shape it does not understand, a missing field or a type mismatch is "no". A memory is never shown by
mistake; at worst a valid extra is left out.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from datetime import date, datetime, timezone
from typing import Any

from ..scope import ENTITY_KEYS, entity_ids

__all__ = ["admits", "flatten_item", "is_expired"]

logger = logging.getLogger(__name__)

_LOGICAL = ("AND", "OR", "NOT")
_CORE = ("id", "memory", "hash", "created_at", "updated_at", "score")


def flatten_item(item: Mapping[str, Any]) -> dict[str, Any]:
    """One field namespace for a mem0 memory dict: top-level fields plus its ``metadata`` (mem0's ``get``
    promotes entity ids and moves other payload keys into ``metadata``; filters name payload keys)."""
    out: dict[str, Any] = {}
    meta = item.get("metadata")
    if isinstance(meta, Mapping):
        out.update(meta)
    out.update({k: v for k, v in item.items() if k != "metadata"})
    return out


def is_expired(item: Mapping[str, Any], today: date | None = None) -> bool:
    """mem0 hides a memory whose ``expiration_date`` is before today (UTC) unless ``show_expired``."""
    value = flatten_item(item).get("expiration_date")
    if not value:
        return False
    try:
        day = date.fromisoformat(str(value)[:10])
    except ValueError:
        return True  # unreadable: treat as hidden (never show what mem0 might hide)
    return day < (today or datetime.now(timezone.utc).date())


def _compare(op: str, have: Any, want: Any) -> bool | None:
    """One operator; None when it cannot decide (unknown operator, incomparable types)."""
    if op == "eq":
        return bool(have == want)
    if op == "ne":
        return bool(have != want)
    if op in ("in", "nin"):
        if not isinstance(want, Sequence) or isinstance(want, (str, bytes)):
            return None
        hit = have in list(want)
        return hit if op == "in" else not hit
    if op in ("gt", "gte", "lt", "lte"):
        if isinstance(have, bool) or isinstance(want, bool):
            return None
        both_num = isinstance(have, (int, float)) and isinstance(want, (int, float))
        both_str = isinstance(have, str) and isinstance(want, str)
        if not (both_num or both_str):
            return None
        return bool({"gt": have > want, "gte": have >= want, "lt": have < want, "lte": have <= want}[op])
    if op in ("contains", "icontains"):
        if not isinstance(have, str) or not isinstance(want, str):
            return None
        return want in have if op == "contains" else want.casefold() in have.casefold()
    return None


def _field(key: str, cond: Any, fields: Mapping[str, Any]) -> bool | None:
    if key not in fields:
        return False  # mem0 filters on a payload key the memory lacks: no match
    have = fields[key]
    if key in ENTITY_KEYS:
        have = entity_ids({key: have}).get(key, have)
        if not isinstance(cond, Mapping):
            cond = entity_ids({key: cond}).get(key, cond)
    if isinstance(cond, Mapping):
        verdicts = [_compare(op, have, want) for op, want in cond.items()]
        if not verdicts or any(v is None for v in verdicts):
            return None
        return all(verdicts)
    if cond == "*":
        return True
    return bool(have == cond)


def _evaluate(filters: Mapping[str, Any], fields: Mapping[str, Any]) -> bool | None:
    verdicts: list[bool | None] = []
    for key, cond in filters.items():
        if key in _LOGICAL:
            if not isinstance(cond, Sequence) or isinstance(cond, (str, bytes)) or not cond:
                return None
            parts = [_evaluate(c, fields) if isinstance(c, Mapping) else None for c in cond]
            if any(p is None for p in parts):
                return None
            if key == "AND":
                verdicts.append(all(parts))
            elif key == "OR":
                verdicts.append(any(parts))
            else:
                verdicts.append(not any(parts))
        elif isinstance(key, str):
            verdicts.append(_field(key, cond, fields))
        else:
            return None
    if any(v is None for v in verdicts):
        return None
    return all(verdicts)


def admits(filters: Mapping[str, Any] | None, item: Any, *, show_expired: bool = False) -> bool:
    """True only if mem0 would return ``item`` (a memory dict from ``get``) for a search with ``filters``."""
    if not isinstance(filters, Mapping) or not isinstance(item, Mapping):
        return False
    if not show_expired and is_expired(item):
        return False
    try:
        verdict = _evaluate(filters, flatten_item(item))
    except Exception:  # a filter shape we did not foresee: never admit on a guess
        logger.debug("filter evaluation failed for %r", filters, exc_info=True)
        return False
    return verdict is True
