"""Trace files: every request a model server received, one JSON object a line, keys scrubbed; and the checks
the gateway is held to on them (prefix byte stability, Anthropic's mark limit).

A record is ``{"seq", "method", "path", "protocol", "headers", "body", "reply", "t_sent", "t_answered"}``: the
headers lower-cased with every credential replaced by ``<scrubbed>`` (``host`` dropped: it names a port of the
run), the body as the client sent it (parsed JSON, key order kept; ``{"_raw": text}`` when it was not JSON), the
reply the server gave, non-streamed form, and its timing, in seconds on the recording server's monotonic clock
since the recording started: ``t_sent`` when the request reached the server, ``t_answered`` when the server had
written the last byte of its reply (both None where unknown). ``seq`` numbers the records in arrival order and
the file holds them in that order. Traces recorded before the timing was stored lack both fields
(:func:`has_timings` says so; the replay then sends one request at a time). Files ending in ``.xz`` (what
``benchmarks.agents record`` writes: ~25x smaller) or ``.gz`` are compressed.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import lzma
import threading
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, TextIO, cast

__all__ = [
    "SCRUBBED",
    "PrefixBreak",
    "TraceWriter",
    "conversation_of",
    "count_marks",
    "has_timings",
    "in_flight",
    "load_trace",
    "prefix_breaks",
    "scrub_headers",
    "session_of",
    "strip_marks",
    "summarise",
]

SCRUBBED = "<scrubbed>"
_SECRET_WORDS = ("key", "token", "secret", "auth", "cookie", "account", "password")
_DROPPED = ("host",)


def scrub_headers(headers: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Headers lower-cased, credentials (any name holding key/token/secret/auth/cookie/account/password)
    replaced by :data:`SCRUBBED`, ``host`` dropped."""
    out: dict[str, str] = {}
    for name, value in headers:
        low = name.lower()
        if low in _DROPPED:
            continue
        out[low] = SCRUBBED if any(w in low for w in _SECRET_WORDS) else value
    return out


def _open(path: Path, mode: Literal["r", "w"]) -> TextIO:
    if path.suffix == ".xz":  # a request repeats the last one's ~50 KB: beyond gzip's 32 KB window, not xz's
        return cast(TextIO, lzma.open(path, mode + "t", encoding="utf-8"))
    if path.suffix == ".gz":
        return cast(TextIO, gzip.open(path, mode + "t", encoding="utf-8"))
    return path.open(mode, encoding="utf-8")


class TraceWriter:
    """Appends records to a JSONL trace (thread-safe). ``seq`` numbers them in arrival order (:meth:`begin`)
    and the file holds them in that order, each written once it is complete (:meth:`finish`): a record whose
    reply is still streaming holds back the later ones, which :meth:`close` writes whatever happens."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._seq = 0
        self._next = 0
        self._done: dict[int, str] = {}
        self._file = _open(self.path, "w")

    def begin(self) -> int:
        """The next ``seq`` (a request arrived); its record follows by :meth:`finish`."""
        with self._lock:
            seq = self._seq
            self._seq += 1
            self._done.setdefault(seq, "")
            return seq

    def finish(self, seq: int, record: Mapping[str, Any]) -> None:
        """Record ``seq`` is complete: written as soon as every earlier one is."""
        with self._lock:
            self._done[seq] = json.dumps({"seq": seq, **record}, ensure_ascii=False) + "\n"
            while self._done.get(self._next):
                self._file.write(self._done.pop(self._next))
                self._next += 1
            self._file.flush()

    def write(self, record: Mapping[str, Any]) -> int:
        """Append ``record`` with the next ``seq``; returns that number."""
        seq = self.begin()
        self.finish(seq, record)
        return seq

    def close(self) -> None:
        """Write what is complete, in ``seq`` order, and close the file."""
        with self._lock:
            for seq in sorted(self._done):
                if self._done[seq]:
                    self._file.write(self._done[seq])
            self._done.clear()
            self._file.close()


def load_trace(path: str | Path) -> list[dict[str, Any]]:
    """The records of a trace file (``.jsonl`` or ``.jsonl.gz``), in file order."""
    with _open(Path(path), "r") as f:
        return [json.loads(line) for line in f if line.strip()]


def has_timings(records: Iterable[Mapping[str, Any]]) -> bool:
    """Whether every record carries its ``t_sent`` and ``t_answered`` (traces recorded before they were stored
    carry neither)."""
    rows = list(records)
    return bool(rows) and all(
        isinstance(r.get("t_sent"), int | float) and isinstance(r.get("t_answered"), int | float) for r in rows
    )


def in_flight(spans: Iterable[tuple[float, float]]) -> dict[str, float]:
    """How many requests were in flight at once over ``spans`` (each ``(sent, answered)``): the most at any
    moment (a request answered at the instant another is sent does not overlap it) and the mean over the time
    from the first send to the last answer (the sum of the spans' lengths over that time)."""
    rows = sorted(spans)
    if not rows:
        return {"max": 0, "mean": 0.0}
    events = sorted([(a, 1) for a, _ in rows] + [(b, -1) for _, b in rows], key=lambda e: (e[0], e[1]))
    now = most = 0
    for _, step in events:
        now += step
        most = max(most, now)
    span = max(b for _, b in rows) - rows[0][0]
    busy = sum(b - a for a, b in rows)
    return {"max": most, "mean": round(busy / span, 2) if span > 0 else float(most)}


# --- the checks ------------------------------------------------------------------------------------------


def strip_marks(value: Any) -> Any:
    """``value`` without any ``cache_control`` key (at any depth): where a client or a gateway puts its cache
    marks changes no cached byte, so prefix comparisons ignore them."""
    if isinstance(value, dict):
        return {k: strip_marks(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [strip_marks(v) for v in value]
    return value


def count_marks(value: Any) -> int:
    """How many ``cache_control`` marks ``value`` holds, at any depth (top level, system, tools, messages,
    nested tool results): Anthropic rejects a request with more than 4."""
    if isinstance(value, dict):
        return int("cache_control" in value) + sum(count_marks(v) for v in value.values())
    if isinstance(value, list):
        return sum(count_marks(v) for v in value)
    return 0


def session_of(record: Mapping[str, Any]) -> str:
    """The session a request belongs to: Claude Code's ``x-claude-code-session-id``, a ``session_id`` header
    (Codex), ``metadata.user_id``'s session, ``prompt_cache_key``, else a fingerprint of the opening of the
    conversation's first user message (``fp-...``: OpenClaw sends no id; its first message carries a timestamp
    and the task's tag; the head is left out, since an arm may rewrite the model or the tools), else ``"-"``."""
    headers = record.get("headers") or {}
    for name in ("x-claude-code-session-id", "session_id", "session-id", "x-session-id"):
        if headers.get(name):
            return str(headers[name])
    body = record.get("body") or {}
    user_id = (body.get("metadata") or {}).get("user_id") if isinstance(body, dict) else None
    if isinstance(user_id, str):
        try:
            meta = json.loads(user_id)
        except json.JSONDecodeError:
            meta = None
        if isinstance(meta, dict) and meta.get("session_id"):
            return str(meta["session_id"])
    if isinstance(body, dict) and body.get("prompt_cache_key"):
        return str(body["prompt_cache_key"])
    return opening_of(record) or "-"


def opening_of(record: Mapping[str, Any]) -> str | None:
    """A fingerprint (``fp-...``) of the opening of a request's first user message (None without one): what
    tells a conversation apart when it names no session (OpenClaw), and what stays the same when an arm adds
    an id of its own (the gateway's ``prompt_cache_key``)."""
    body = record.get("body")
    if not isinstance(body, dict):
        return None
    first = next((i for i in conversation_of(body)[1] if isinstance(i, dict) and i.get("role") == "user"), None)
    if first is None:
        return None
    opening = _text(first.get("content"))[:_OPENING_CHARS]
    return "fp-" + hashlib.sha256(opening.encode("utf-8", "surrogatepass")).hexdigest()[:16]


#: how much of a conversation's first user message tells it apart (an arm may rewrite the head, not this)
_OPENING_CHARS = 256


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(_text(c.get("text", "")) if isinstance(c, dict) else _text(c) for c in content)
    return ""


def conversation_of(body: Mapping[str, Any]) -> tuple[str, list[Any]]:
    """``(head, items)``: what every request of one conversation repeats (model, system/instructions, tools;
    marks stripped, serialised) and its growing list (Anthropic/Chat ``messages``, Responses ``input``)."""
    items = body.get("messages")
    if items is None:
        raw = body.get("input")
        items = raw if isinstance(raw, list) else ([{"role": "user", "content": raw}] if raw else [])
    head = {k: strip_marks(body.get(k)) for k in ("model", "system", "instructions", "tools")}
    return json.dumps(head, sort_keys=False), list(items)


@dataclass(frozen=True)
class PrefixBreak:
    """Request ``seq`` of ``session`` changed item ``index`` of what the same conversation sent before (at
    request ``before``)."""

    seq: int
    before: int
    session: str
    index: int
    sent_before: str
    sent_now: str


def _requests(records: Iterable[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
    for r in records:
        body = r.get("body")
        if r.get("method", "POST") == "POST" and isinstance(body, dict) and ("messages" in body or "input" in body):
            yield r


def prefix_breaks(records: Iterable[Mapping[str, Any]]) -> list[PrefixBreak]:
    """Every request whose earlier items differ from what its conversation sent before.

    A conversation is a session's requests with the same model, system and tools (a harness's side requests,
    e.g. a title or a summary, are conversations of their own). Within one, request *k*'s first items must
    serialise exactly like request *k-1*'s (marks aside: :func:`strip_marks`); one that shrank (a compaction,
    a new conversation) starts over."""
    last: dict[tuple[str, str], tuple[int, list[str]]] = {}
    out: list[PrefixBreak] = []
    for r in _requests(records):
        session = session_of(r)
        head, items = conversation_of(r["body"])
        now = [json.dumps(strip_marks(m), ensure_ascii=False) for m in items]
        key = (session, head)
        if key in last:
            seq_before, before = last[key]
            if len(before) <= len(now):
                for i, (a, b) in enumerate(zip(before, now, strict=False)):
                    if a != b:
                        out.append(PrefixBreak(int(r["seq"]), seq_before, session, i, a, b))
                        break
        last[key] = (int(r["seq"]), now)
    return out


def summarise(records: Iterable[Mapping[str, Any]]) -> dict[str, Any]:
    """What a trace holds: requests by path, sessions, body bytes (total, smallest, largest), the most
    ``cache_control`` marks in one request, the prefix breaks (:func:`prefix_breaks`) and, where the records
    carry their timing, how many requests the server had in flight at once (:func:`in_flight`)."""
    rows = list(records)
    requests = list(_requests(rows))
    sizes = [len(json.dumps(r["body"], ensure_ascii=False).encode()) for r in requests]
    paths: dict[str, int] = {}
    for r in rows:
        path = str(r.get("path", "")).split("?", 1)[0]
        paths[path] = paths.get(path, 0) + 1
    breaks = prefix_breaks(rows)
    return {
        "records": len(rows),
        "requests": len(requests),
        "paths": paths,
        "sessions": len({session_of(r) for r in requests}),
        "body_bytes": {"total": sum(sizes), "min": min(sizes, default=0), "max": max(sizes, default=0)},
        "max_marks": max((count_marks(r["body"]) for r in requests), default=0),
        "prefix_breaks": [{"seq": b.seq, "before": b.before, "index": b.index} for b in breaks],
    } | ({"in_flight": in_flight((r["t_sent"], r["t_answered"]) for r in rows)} if has_timings(rows) else {})
