"""A gateway session as one owner-tagged record in a shared store: its sent log per protocol (segments, digests,
the segments the gateway rewrote), its mem0 stage's epoch and placement, and its content rules' records.

:func:`encode_session` writes what a :class:`~cp_memory.gateway.sessions.SessionState` holds (not its savings:
those are counters, :mod:`cp_memory.gateway.shared_sessions`); :func:`decode_session` reads it back defensively:
``ValueError`` for anything malformed, too large, or tagged with another key's owner (another tenant's or
session's record copied under this key), never anything else. A record over ``max_bytes`` is written smaller,
never refused: the content records go first, then the logs of other protocols, then the log itself (the
session then starts again from the client's bytes, as a new one does).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from .content.records import ContentState
from .protocols import Api
from .replay import SentLog

__all__ = ["SessionRecord", "decode_session", "encode_session"]

logger = logging.getLogger(__name__)

_VERSION = 1


@dataclass
class SessionRecord:
    """What one session's record holds (decoded)."""

    logs: dict[Api, SentLog]
    epoch: str
    cached: bool
    content: ContentState


def _log_doc(log: SentLog) -> dict[str, Any]:
    return {"segments": list(log.segments), "digests": list(log.digests), "rewrites": sorted(log.rewrites)}


def _dumps(doc: dict[str, Any]) -> bytes:
    return json.dumps(doc, ensure_ascii=False, separators=(",", ":")).encode("utf-8")


def encode_session(record: SessionRecord, owner: str, *, max_bytes: int, keep: Api | None = None) -> bytes:
    """The record's bytes, at most ``max_bytes`` (module doc: what is left out first); ``keep``: the protocol
    whose log goes last."""
    logs = {api.value: _log_doc(log) for api, log in record.logs.items()}
    doc: dict[str, Any] = {"v": _VERSION, "owner": owner, "logs": logs, "mem": [record.epoch, record.cached]}
    doc["content"] = record.content.dump()
    data = _dumps(doc)
    if len(data) <= max_bytes:
        return data
    doc["content"] = ContentState().dump()
    for api in sorted(logs, key=lambda a: a == (keep.value if keep is not None else "")):
        data = _dumps(doc)
        if len(data) <= max_bytes:
            break
        del logs[api]
    logger.info("gateway: a session record over %d bytes was stored without some of its parts", max_bytes)
    return _dumps(doc)


def _log_of(doc: Any) -> SentLog:
    if not isinstance(doc, dict):
        raise ValueError("a sent log is not an object")
    segments, digests, rewrites = doc.get("segments"), doc.get("digests"), doc.get("rewrites")
    if not isinstance(segments, list) or not isinstance(digests, list) or len(segments) != len(digests):
        raise ValueError("a sent log's segments and digests do not pair up")
    if not all(isinstance(d, str) for d in digests):
        raise ValueError("a digest is not a str")
    if not isinstance(rewrites, list) or not all(
        isinstance(i, int) and not isinstance(i, bool) and 0 <= i < len(segments) for i in rewrites
    ):
        raise ValueError("a sent log's rewrites are not indexes of its segments")
    return SentLog(tuple(segments), tuple(digests), frozenset(rewrites))


def decode_session(data: bytes, owner: str, *, max_bytes: int) -> SessionRecord:
    """The record in ``data``; ``ValueError`` for a record that is not this key's or not well formed."""
    if len(data) > max_bytes:
        raise ValueError(f"{len(data)} bytes, over the bound of {max_bytes}")
    try:
        doc = json.loads(data)
    except (UnicodeDecodeError, ValueError) as exc:
        raise ValueError(f"not JSON: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("v") != _VERSION:
        raise ValueError("not a gateway session record")
    if doc.get("owner") != owner:
        raise ValueError("the record under this key belongs to another session or tenant")
    logs, mem = doc.get("logs"), doc.get("mem")
    if not isinstance(logs, dict):
        raise ValueError("logs is not an object")
    if not isinstance(mem, list) or len(mem) != 2 or not isinstance(mem[0], str) or not isinstance(mem[1], bool):
        raise ValueError("mem is not [epoch, cached]")
    decoded = {Api(api): _log_of(log) for api, log in logs.items()}
    return SessionRecord(decoded, mem[0], mem[1], ContentState.load(doc.get("content")))
