"""What a shared store holds, as bytes: a scope's index snapshot and a conversation's committed dedup turns,
each tagged with its owner (:meth:`~cp_memory.state.keys.StateKeys.owner`) and read defensively.

:func:`decode_index` and :func:`decode_conversation` raise :class:`ForeignRecord` for a value whose owner is
another key's (another scope's or tenant's value written under this key) and ``ValueError`` for anything
malformed; never anything else. A conversation record is bounded (``max_bytes``) and every field is checked,
so a planted record cannot make a pointer name something its own data does not say.
"""

from __future__ import annotations

import json
from collections.abc import Hashable
from typing import Any

from ..core.dedup_records import Conversation, Location
from .errors import ForeignRecord, LostRecord

__all__ = [
    "ForeignRecord",
    "LostRecord",
    "decode_conversation",
    "decode_index",
    "encode_conversation",
    "encode_index",
    "encode_tombstone",
]

_INDEX_MAGIC = b"CPI1:"
_CONV_VERSION = 1


def encode_index(snapshot: bytes, owner: str) -> bytes:
    return _INDEX_MAGIC + owner.encode("ascii") + b":" + snapshot


def decode_index(data: bytes, owner: str) -> bytes:
    """The snapshot bytes of an index value (:meth:`ContextIndex.restore` validates them)."""
    if not data.startswith(_INDEX_MAGIC):
        raise ValueError("not an index value of this store")
    head, sep, snapshot = data[len(_INDEX_MAGIC) :].partition(b":")
    if not sep:
        raise ValueError("truncated index value")
    if head != owner.encode("ascii"):
        raise ForeignRecord("the index value under this key belongs to another scope or tenant")
    return snapshot


def _block_id(value: Any) -> Hashable:
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        raise ValueError(f"block id {value!r:.40} is not a str or int")
    return value


def _loc(block_id: Any, turn: Any, position: Any, turns: int) -> Location:
    for name, n in (("turn", turn), ("position", position)):
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise ValueError(f"{name} {n!r:.20} is not a positive int")
    if turn > turns:
        raise ValueError(f"a location names turn {turn}, after the record's last turn {turns}")
    return Location(_block_id(block_id), turn, position)


def encode_conversation(conv: Conversation, owner: str, generation: str = "") -> bytes:
    """JSON of the record; raises ``ValueError`` for a block id that is not a str or int. ``generation``
    changes only when the conversation is forgotten on purpose ("" for a record started from nothing)."""
    ids = [[_block_id(b), d, loc.turn, loc.position] for b, (d, loc) in conv.by_id.items()]
    digests = [[k, _block_id(loc.block_id), loc.turn, loc.position] for k, loc in conv.by_digest.items()]
    spans = [[k, _block_id(loc.block_id), loc.turn, loc.position] for k, loc in conv.by_span.items()]
    doc = {"v": _CONV_VERSION, "owner": owner, "gen": generation, "turns": conv.turns}
    doc.update(ids=ids, digests=digests, spans=spans)
    return json.dumps(doc, separators=(",", ":")).encode("utf-8")


def encode_tombstone(owner: str, turns: int) -> bytes:
    return json.dumps({"v": _CONV_VERSION, "owner": owner, "lost": True, "turns": turns}).encode("utf-8")


def _rows(doc: dict[str, Any], name: str) -> list[list[Any]]:
    rows = doc.get(name)
    if not isinstance(rows, list) or not all(isinstance(r, list) and len(r) == 4 for r in rows):
        raise ValueError(f"field {name!r} is not a list of 4-item rows")
    return rows


def decode_conversation(data: bytes, owner: str, *, max_bytes: int) -> tuple[Conversation, str]:
    """The committed record in ``data`` and its generation; ``ForeignRecord`` / ``LostRecord`` /
    ``ValueError`` (module doc)."""
    if len(data) > max_bytes:
        raise ValueError(f"{len(data)} bytes, over the bound of {max_bytes}")
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not JSON: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("v") != _CONV_VERSION:
        raise ValueError("not a conversation record of this store")
    if doc.get("owner") != owner:
        raise ForeignRecord("the conversation record under this key belongs to another conversation or tenant")
    if doc.get("lost") is True:
        raise LostRecord("the conversation's record was lost after turns some process remembers")
    turns, generation = doc.get("turns"), doc.get("gen", "")
    if not isinstance(generation, str):
        raise ValueError("gen is not a str")
    if isinstance(turns, bool) or not isinstance(turns, int) or turns < 0:
        raise ValueError(f"turns {turns!r:.20} is not a non-negative int")
    conv = Conversation(turns=turns)
    for bid, digest, turn, pos in _rows(doc, "ids"):
        if digest is not None and not isinstance(digest, str):
            raise ValueError("a digest is not a str")
        conv.by_id[_block_id(bid)] = (digest, _loc(bid, turn, pos, turns))
    for target, name in ((conv.by_digest, "digests"), (conv.by_span, "spans")):
        for key, bid, turn, pos in _rows(doc, name):
            if not isinstance(key, str):
                raise ValueError(f"a {name} key is not a str")
            target[key] = _loc(bid, turn, pos, turns)
    return conv, generation
