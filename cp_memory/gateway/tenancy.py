"""Who is asking: the tenant (a keyed hash of the client's key and tenant header) and the session.

* **Tenant**: HMAC-SHA256 (the gateway's secret) of the client's API key (``Authorization: Bearer``,
  ``x-api-key``, ``api-key``) and of the ``X-CP-Tenant`` header when present. The header only subdivides a
  key: no header value lets one key reach another key's state. No key and no header: one anonymous tenant.
  The key itself is never stored or logged: only the hash, and only inside this process.
* **Session**, within the tenant, from the first of: the ``X-CP-Session`` header, Claude Code's
  ``X-Claude-Code-Session-Id`` header, ``metadata.user_id`` (Anthropic; a JSON string holding a
  ``session_id``, or Claude Code's older ``..._session_<id>`` form), OpenAI's ``prompt_cache_key`` or
  ``user``; else a fingerprint of the request's header segments and its items up to the first user message
  (tools, system, the system-role messages a Chat client puts first, the first user message): two
  conversations of one tenant with the same opening share a session, which prefix replay tolerates (it
  replays only what matches). OpenClaw (no session id, its system prompt in a ``system`` message, a timestamp
  in its first user message) gets one session per conversation.

Every id the gateway keeps or reports is a hash; no state is keyed by anything but (tenant, session).
"""

from __future__ import annotations

import hashlib
import hmac
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .protocols import Api, segments
from .replay import normalized

__all__ = ["SESSION_HEADER", "TENANT_HEADER", "Identity", "identify"]

TENANT_HEADER = "x-cp-tenant"
SESSION_HEADER = "x-cp-session"
CLAUDE_SESSION_HEADER = "x-claude-code-session-id"
_ID_HEX = 24


@dataclass(frozen=True)
class Identity:
    """``tenant`` and ``session`` (hashes, hex); ``session_source`` says where the session came from
    (``header``, ``claude-code``, ``metadata``, ``prompt_cache_key``, ``user``, ``fingerprint``)."""

    tenant: str
    session: str
    session_source: str


def _keyed(secret: bytes, *parts: str) -> str:
    text = "\x1f".join(parts).encode("utf-8", "surrogatepass")
    return hmac.new(secret, text, hashlib.sha256).hexdigest()[:_ID_HEX]


def client_key(headers: Mapping[str, str]) -> str:
    """The client's API key as sent (empty when none)."""
    auth = headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return headers.get("x-api-key", "") or headers.get("api-key", "") or auth


def _metadata_session(body: Mapping[str, Any]) -> str | None:
    meta = body.get("metadata")
    user = meta.get("user_id") if isinstance(meta, Mapping) else None
    if not isinstance(user, str) or not user:
        return None
    try:
        parsed = json.loads(user)
    except ValueError:
        parsed = None
    if isinstance(parsed, Mapping) and isinstance(parsed.get("session_id"), str):
        return str(parsed["session_id"])
    if "_session_" in user:
        return user.rsplit("_session_", 1)[1] or None
    return None


def _explicit_session(headers: Mapping[str, str], body: Mapping[str, Any]) -> tuple[str, str] | None:
    for header, source in ((SESSION_HEADER, "header"), (CLAUDE_SESSION_HEADER, "claude-code")):
        if headers.get(header):
            return headers[header], source
    found = _metadata_session(body)
    if found:
        return found, "metadata"
    for field in ("prompt_cache_key", "user"):
        value = body.get(field)
        if isinstance(value, str) and value:
            return value, field
    return None


#: how many items after the first the opening may take while looking for the first user message
_OPENING_ITEMS = 4


def _role(seg: Any) -> str | None:
    return seg.get("role") if isinstance(seg, Mapping) else None


def _fingerprint(api: Api, body: Mapping[str, Any]) -> str:
    try:
        segs, n_head = segments(api, body)
    except TypeError:
        segs, n_head = [], 0
    opening = segs[: n_head + 1]
    for seg in segs[n_head + 1 : n_head + 1 + _OPENING_ITEMS]:  # system items before it: up to the first user's
        if _role(opening[-1]) == "user":
            break
        opening.append(seg)
    if len(opening) > n_head + 1:  # the items as their meaning (a client may re-render one: a string as a block)
        opening = opening[: n_head + 1] + [normalized(api, seg) for seg in opening[n_head + 1 :]]
    text = json.dumps(opening, sort_keys=True, ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()


def identify(secret: bytes, api: Api, headers: Mapping[str, str], body: Mapping[str, Any]) -> Identity:
    """The tenant and session of a request (``headers`` with lower-case names)."""
    tenant = _keyed(secret, "tenant", client_key(headers), headers.get(TENANT_HEADER, ""))
    explicit = _explicit_session(headers, body)
    if explicit is not None:
        raw, source = explicit
    else:
        raw, source = _fingerprint(api, body), "fingerprint"
    return Identity(tenant, _keyed(secret, "session", tenant, source, raw), source)
