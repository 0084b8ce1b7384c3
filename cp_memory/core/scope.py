"""Scopes: whose memories a mem0 call reads, as one hashable key.

mem0 scopes a memory by three entity ids (``user_id``, ``agent_id``, ``run_id``) and a search by the
entity ids and any metadata/operator conditions in its ``filters``. cp_memory keys its state by the
**full** scope, never by one field:

* the per-scope :class:`~cp_memory.core.index.ContextIndex` by the entity ids *and* a digest of every other
  filter condition, so its cached prefixes (and superset/swap extras taken from them) only ever come from
  searches with exactly the same filters;
* the dedup record of a conversation by the entity ids plus the conversation id, so two agents (or runs) of
  one user never share a record.

The embedded store's partitioning (:mod:`cp_memory.embedded`) uses :func:`entity_partition` from here.
Pure: standard library only, like the rest of the core.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["ENTITY_KEYS", "Scope", "canonical_json", "entity_ids", "entity_partition", "scope_of"]

#: mem0's entity keys, in the order used for display and partitioning.
ENTITY_KEYS: tuple[str, ...] = ("user_id", "agent_id", "run_id")


def _entity_value(value: Any) -> str | None:
    """mem0's normalisation of an entity id (``_validate_and_trim_entity_id``): str(), trimmed."""
    if value is None or isinstance(value, bool) or not isinstance(value, (str, int)):
        return None
    text = str(value).strip()
    return text or None


def entity_ids(fields: Mapping[str, Any] | None) -> dict[str, str]:
    """The plain entity ids among ``fields`` (a filter dict or a memory payload), normalised like mem0."""
    if not isinstance(fields, Mapping):
        return {}
    out = {}
    for key in ENTITY_KEYS:
        value = _entity_value(fields.get(key))
        if value is not None:
            out[key] = value
    return out


def entity_partition(fields: Mapping[str, Any] | None) -> str | None:
    """One partition name for a payload or filter: ``user_id``, else ``agent_id``, else ``run_id``."""
    ids = entity_ids(fields)
    for key in ENTITY_KEYS:
        if key in ids:
            return f"{key}={ids[key]}"
    return None


def canonical_json(value: Any) -> str:
    """Deterministic JSON (sorted keys, no spaces); non-JSON values by ``repr`` so nothing is dropped."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=repr, ensure_ascii=False)


@dataclass(frozen=True)
class Scope:
    """The full scope of one search: entity ids plus a digest of every other condition.

    ``conditions`` is ``""`` when the filters hold entity ids only (the common case); otherwise the first
    16 hex digits of SHA-1 over the canonical JSON of the remaining conditions (metadata, operators,
    and, for the hosted client, options such as ``categories`` that narrow the result set).
    """

    user_id: str | None = None
    agent_id: str | None = None
    run_id: str | None = None
    conditions: str = ""

    @property
    def entities(self) -> Scope:
        """The same scope without the extra conditions: the key of dedup records."""
        return Scope(self.user_id, self.agent_id, self.run_id)

    @property
    def entity_filters(self) -> dict[str, str]:
        return {k: v for k, v in zip(ENTITY_KEYS, (self.user_id, self.agent_id, self.run_id)) if v is not None}

    @property
    def pure(self) -> bool:
        """True when the scope is entity ids only (no metadata or operator conditions)."""
        return not self.conditions

    def __str__(self) -> str:
        """``user_id=alice&agent_id=support`` (``filters#<digest>`` last); ``%`` and ``&`` inside an id are
        written ``%25`` and ``%26``, so two scopes never share a string (:meth:`parse` reads it back)."""
        parts = [f"{k}={_escape(v)}" for k, v in self.entity_filters.items()]
        if self.conditions:
            parts.append(f"filters#{self.conditions}")
        return "&".join(parts)

    @classmethod
    def parse(cls, text: str) -> Scope | None:
        """The scope whose ``str()`` is ``text``; None when ``text`` is not such a string."""
        if not isinstance(text, str) or not text:
            return None
        fields: dict[str, str] = {}
        conditions = ""
        for part in text.split("&"):
            key, eq, value = part.partition("=")
            if part.startswith("filters#") and not conditions:
                conditions = part[len("filters#") :]
            elif not eq or key not in ENTITY_KEYS or key in fields or conditions:
                return None
            else:
                fields[key] = _ESCAPED.sub(lambda m: _UNESCAPE[m.group()], value)
        scope = cls(fields.get("user_id"), fields.get("agent_id"), fields.get("run_id"), conditions)
        return scope if fields and str(scope) == text else None


_ESCAPED = re.compile("%2[56]")
_UNESCAPE = {"%25": "%", "%26": "&"}


def _escape(value: str) -> str:
    return value.replace("%", "%25").replace("&", "%26")


def scope_of(filters: Mapping[str, Any] | None, **narrowing: Any) -> Scope | None:
    """The :class:`Scope` of a search with ``filters`` (None: no entity id, mem0 would refuse the search).

    ``narrowing`` holds other arguments that restrict which memories come back (the hosted client's
    ``categories``, ``metadata``, ``show_expired``...): set values join the conditions digest.
    """
    if not isinstance(filters, Mapping):
        return None
    ids = entity_ids(filters)
    rest: dict[str, Any] = {str(k): v for k, v in filters.items() if k not in ids}
    # the hosted platform's v2 filters put entity ids inside a top-level AND: {"AND": [{"user_id": "u"}]}
    conjuncts = rest.get("AND")
    if isinstance(conjuncts, list):
        kept = []
        for part in conjuncts:
            lifted = entity_ids(part) if isinstance(part, Mapping) and len(part) == 1 else {}
            key = next(iter(lifted), None)
            if key is not None and ids.get(key, lifted[key]) == lifted[key]:
                ids[key] = lifted[key]
            else:
                kept.append(part)
        if kept:
            rest["AND"] = kept
        else:
            del rest["AND"]
    if not ids:
        return None
    rest.update({f"arg:{k}": v for k, v in narrowing.items() if v is not None})
    conditions = ""
    if rest:
        conditions = hashlib.sha1(canonical_json(rest).encode("utf-8")).hexdigest()[:16]
    return Scope(ids.get("user_id"), ids.get("agent_id"), ids.get("run_id"), conditions)
