"""Prefix replay: a session's earlier segments are forwarded exactly as the gateway sent them before.

Clients re-render their history: JSON keys in another order, a tool call's ``arguments`` string re-encoded,
thinking blocks of earlier turns stripped, a string content turned into one text block, ``cache_control``
marks moved to the newest message. Each of these changes bytes the upstream already cached, so the cached
prefix ends there and everything after it is prefilled again. The gateway compares the new request's leading
segments (:mod:`cp_memory.gateway.protocols`) with what it sent last time for the session under
:func:`normalized`, which ignores exactly those differences, and where they match sends its earlier version
again, with the client's *current* ``cache_control`` marks moved onto it (a client's mark is never removed).
The first segment that differs in meaning ends the replay: from there on the client's bytes go out as they
came. I/O-free.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..core.lru import LRUMap
from . import codec
from .protocols import Api

__all__ = ["ReplayResult", "SegmentMemo", "SentLog", "digest", "normalized", "replay", "strip_marks"]

#: content blocks that do not change what an upstream caches when a client drops them from earlier turns
_IGNORED_BLOCKS = {Api.MESSAGES: frozenset({"thinking", "redacted_thinking"})}
#: keys that carry no prompt tokens (Responses API item ids and statuses are bookkeeping)
_IGNORED_KEYS = {Api.RESPONSES: frozenset({"id", "status"})}
_TEXT_TYPES = frozenset({"text", "input_text", "output_text"})


def _ignored_block(api: Api, value: Any) -> bool:
    kinds = _IGNORED_BLOCKS.get(api)
    kind = value.get("type") if isinstance(value, Mapping) else None
    return bool(kinds) and isinstance(kind, str) and kind in kinds  # type: ignore[operator]


def _norm(api: Api, value: Any, key: str | None) -> Any:
    if isinstance(value, Mapping):
        drop = _IGNORED_KEYS.get(api, frozenset()) | {"cache_control"}
        out = {k: _norm(api, v, k) for k, v in value.items() if k not in drop}
        kind = out.get("type")  # a JSON schema may hold a property named "type" (Claude Code's Grep does)
        if isinstance(kind, str) and kind in _TEXT_TYPES:
            out["type"] = "text"
        return out
    if isinstance(value, list):
        return [_norm(api, v, None) for v in value if not _ignored_block(api, v)]
    if isinstance(value, str) and key == "content":
        return [{"type": "text", "text": value}]
    if isinstance(value, str) and key == "arguments":
        try:
            return {"json": json.loads(value)}
        except ValueError:
            return value
    return value


def normalized(api: Api, segment: Any) -> Any:
    """The segment as the upstream's tokens and cache see it: no ``cache_control``, JSON-encoded tool
    arguments parsed, a string content as one text block, ignored blocks (earlier thinking) and bookkeeping
    keys dropped. Key order is ignored by comparing :func:`digest` values."""
    return _norm(api, segment, None)


def digest(api: Api, segment: Any) -> str:
    text = json.dumps(normalized(api, segment), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def strip_marks(value: Any) -> Any:
    """A copy without any ``cache_control`` key."""
    if isinstance(value, Mapping):
        return {k: strip_marks(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [strip_marks(v) for v in value]
    return value


def _has_marks(value: Any) -> bool:
    if isinstance(value, Mapping):
        return value.get("cache_control") is not None or any(_has_marks(v) for v in value.values())
    if isinstance(value, list):
        return any(_has_marks(v) for v in value)
    return False


def _form(value: Any, key: str | None = None) -> Any:
    """A string ``content`` as one text block, nothing else changed (key order kept): the same tokens."""
    if isinstance(value, Mapping):
        return {k: _form(v, k) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [_form(v) for v in value]
    if isinstance(value, str) and key == "content":
        return [{"type": "text", "text": value}]
    return value


def _merge(api: Api, client: Any, sent: Any) -> Any:
    """``sent`` without its marks, with ``client``'s marks at the same places. Where the shapes differ (a string
    content against one text block: the same tokens) and the client's part carries a mark, the client's part is
    kept: its mark must not be lost."""
    if isinstance(sent, Mapping) and isinstance(client, Mapping):
        out = {k: (_merge(api, client[k], v) if k in client else strip_marks(v)) for k, v in sent.items()}
        out.pop("cache_control", None)
        if client.get("cache_control") is not None:
            out["cache_control"] = client["cache_control"]
        return out
    if isinstance(sent, list) and isinstance(client, list):
        mine = [i for i, v in enumerate(client) if not _ignored_block(api, v)]
        theirs = [i for i, v in enumerate(sent) if not _ignored_block(api, v)]
        if len(theirs) > len(mine) > 0:  # blocks the gateway put first (mem0 memories) stay, the rest align
            theirs = theirs[len(theirs) - len(mine) :]
        elif len(mine) != len(theirs):
            return client
        out_list = [strip_marks(v) for v in sent]
        for ci, si in zip(mine, theirs):
            out_list[si] = _merge(api, client[ci], sent[si])
        return out_list
    if type(sent) is not type(client) and _has_marks(client):  # a string vs one text block: keep the mark
        return client
    return strip_marks(sent)


@dataclass(frozen=True)
class SentLog:
    """What the gateway sent for a session last time: the segments and their digests."""

    segments: tuple[Any, ...]
    digests: tuple[str, ...]
    #: segments the gateway's content rules rewrote (their digest is the client's text's): replaying them is
    #: the gateway's own change, not a client's re-rendering
    rewrites: frozenset[int] = frozenset()

    @classmethod
    def of(cls, api: Api, segments: list[Any]) -> SentLog:
        return cls(tuple(segments), tuple(digest(api, s) for s in segments))


@dataclass(frozen=True)
class ReplayResult:
    """``segments`` to send; ``replayed`` leading segments matched the log; ``rewritten`` of them differed from
    the client's in more than marks and form (its re-rendering would have broken the cached prefix at
    ``first_rewritten``)."""

    segments: list[Any]
    replayed: int
    rewritten: int
    first_rewritten: int | None
    substituted: int = 0  # segments whose bytes (marks aside) the gateway replaced, form-only changes included


def _same_tokens(a: Any, b: Any) -> bool:
    """Byte-equal but for marks and the string-vs-one-text-block form: passthrough would have hit as well."""
    return json.dumps(_form(a), ensure_ascii=False) == json.dumps(_form(b), ensure_ascii=False)


def _replayed(api: Api, client: Any, sent: Any) -> tuple[Any, bool, bool]:
    """One matching segment: what goes out (``sent`` with ``client``'s marks), whether its bytes differ from the
    client's (marks aside), and whether it holds the client's tokens (:func:`_same_tokens`)."""
    merged = _merge(api, client, sent)
    substituted = json.dumps(strip_marks(client)) != json.dumps(strip_marks(merged))
    return merged, substituted, _same_tokens(client, merged)


#: a ``cache_control`` key as it appears in a segment's JSON (never inside a string value: its quotes are escaped)
_MARK_KEY = b'"cache_control"'


class SegmentMemo:
    """The pure per-segment work of replay remembered by the segments' exact bytes: a segment's :func:`digest`,
    and a matching segment's replayed form (:func:`_replayed`). A session's every request repeats its
    history, so the same tool list, system prompt and earlier messages were normalized and merged on the
    request before; the memo turns those walks into one C-speed JSON encoding of each segment.

    Entries are keyed by a 16-byte BLAKE2b digest of the protocol and the segments' JSON (keys in their order,
    so a hit is exactly the value the work would give) and hold the replayed form as its JSON text, decoded
    afresh on every hit (nothing is shared between requests, which may change what they get). Segments
    shorter than ``min_chars`` characters of JSON are worked out each time (cheaper than the memo); at most
    ``entries`` entries of each kind are kept (least recently used out), so the memo holds at most ``entries``
    replayed segments' text (a harness's tool list, shared by all its sessions, is one entry). A segment whose
    JSON is the logged one's byte for byte, without a mark, is the merge's answer itself (no lookup). Thread-safe
    (:class:`~cp_memory.core.lru.LRUMap`).
    The memo is a pure function's cache: sharing it across sessions and tenants shares no data between them.
    """

    def __init__(self, entries: int = 8192, min_chars: int = 64) -> None:
        self._digests: LRUMap[bytes, str] = LRUMap(entries)
        self._replays: LRUMap[bytes, tuple[str, bool, bool]] = LRUMap(entries)
        self.min_chars = min_chars

    @staticmethod
    def _key(api: Api, *parts: bytes) -> bytes:
        h = hashlib.blake2b(api.value.encode(), digest_size=16)
        for part in parts:
            h.update(len(part).to_bytes(8, "little"))
            h.update(part)
        return h.digest()

    @staticmethod
    def texts(segments: Sequence[Any], plain: bool = False) -> tuple[bytes, ...]:
        """Every segment's JSON (:func:`~cp_memory.gateway.codec.key`, keys in their order; ``plain``: the
        body's, :class:`~cp_memory.gateway.codec.Decoded`): the memo's keys, encoded once a request for both uses."""
        return tuple(codec.key(seg, plain) for seg in segments)

    def digests(self, api: Api, segments: Sequence[Any], texts: Sequence[bytes] | None = None) -> tuple[str, ...]:
        """:func:`digest` of every segment (``texts``: their :meth:`texts`, when the caller has them)."""
        out = []
        for seg, text in zip(segments, texts if texts is not None else self.texts(segments)):
            if len(text) < self.min_chars:
                out.append(digest(api, seg))
                continue
            key = self._key(api, text)
            found = self._digests.get(key)
            if found is None:
                found = digest(api, seg)
                self._digests.set(key, found)
            out.append(found)
        return tuple(out)

    def replayed(
        self, api: Api, client: Any, sent: Any, client_text: bytes | None = None, plain: bool = False
    ) -> tuple[Any, bool, bool]:
        """:func:`_replayed`, remembered (``client_text``: the client segment's :meth:`texts` entry, when known,
        encoded as ``plain`` says). A logged segment is the client's own of an earlier request, bar the marks (which
        the merge takes from ``client``) and the gateway's strings, so the body's ``plain`` holds for it too."""
        a = client_text if client_text is not None else codec.key(client, plain)
        b = codec.key(sent, plain)
        if a == b and _MARK_KEY not in a:  # the same bytes and no mark to carry over: the merge gives the client's
            return client, False, True
        if len(a) + len(b) < 2 * self.min_chars:
            return _replayed(api, client, sent)
        key = self._key(api, a, b)
        found = self._replays.get(key)
        if found is not None:
            return json.loads(found[0]), found[1], found[2]
        merged, substituted, same = _replayed(api, client, sent)
        self._replays.set(key, (json.dumps(merged, separators=(",", ":")), substituted, same))
        return merged, substituted, same


def replay(
    api: Api,
    log: SentLog | None,
    segments: list[Any],
    digests: Sequence[str] | None = None,
    memo: SegmentMemo | None = None,
    texts: Sequence[bytes] | None = None,
    plain: bool = False,
) -> ReplayResult:
    """The segments to send: the log's version of every leading segment that matches it in meaning.
    ``digests``: the segments' :func:`digest` values when the caller has them already; ``memo``: where the
    per-segment work of earlier requests is remembered (the same result, computed once); ``texts``: the
    segments' :meth:`SegmentMemo.texts`, when the caller has them (``plain``: encoded as the body allows)."""
    if log is None:
        return ReplayResult(list(segments), 0, 0, None)
    out: list[Any] = []
    rewritten, substituted, first = 0, 0, None
    for i, seg in enumerate(segments):
        if i >= len(log.digests) or (digests[i] if digests is not None else digest(api, seg)) != log.digests[i]:
            return ReplayResult(out + list(segments[i:]), i, rewritten, first, substituted)
        if memo is not None:
            text = texts[i] if texts is not None else None
            sent, changed, same = memo.replayed(api, seg, log.segments[i], text, plain)
        else:
            sent, changed, same = _replayed(api, seg, log.segments[i])
        substituted += changed
        if not same and i not in log.rewrites:
            rewritten += 1
            first = i if first is None else first
        out.append(sent)
    return ReplayResult(out, len(segments), rewritten, first, substituted)
