"""mem0 memories in the replay: one LoCoMo user's memories as the harness user's memory.

``python -m benchmarks.agents replay --mem0`` replays each trace twice more, with memories:

- the store: an embedded mem0 (local Qdrant, bundled MiniLM) in a folder, holding conversation ``--mem0-conv``'s
  LoCoMo observations (:func:`benchmarks.common.ingest.memory_items`, ``infer=False``) for the harness user, and
  conversation ``--mem0-other``'s for the *same user name under another tenant* (another client key): a tenant
  that leaks would show them;
- the harness user: the replayed client names it in an ``X-CP-User`` header (Claude Code's
  ``metadata.user_id`` is a JSON string naming a session, not a person); the gateway stores and searches under
  ``"<tenant>:<user>"`` (:mod:`cp_memory.gateway.memories`), so the memories are ingested under the tenant the
  gateway computes for the replayed key (a fixed ``CP_GATEWAY_SECRET``, :data:`SECRET`);
- ``gateway`` + mem0: the gateway's own CLI with ``--mem0 embedded --mem0-path DIR --no-memories-add`` (no turn
  is added: every arm sees the same store), placing memories its way (replayed with their turn);
- ``passthrough`` + mem0: mem0's own proxy pattern (``mem0.proxy.main``): the same search (the same query text,
  :func:`cp_memory.core.chat_memories.query_text` over the gateway's default turns, the same user, the gateway's
  top k) and the found memories put into the newest user message as ``- Relevant Memories/Facts: ... -
  User Question: ...`` by the shared placement (:func:`~cp_memory.core.chat_memories.place_memories`); the next
  request carries the client's copy without them, as mem0's proxy sends it.

Memories go only where the newest message is the user's own text (an Anthropic ``tool_result`` turn must start
with its results; mem0's proxy, a Chat Completions client, has no such turn), in both arms alike. The searches of
the mem0 pattern are run before the arms (the store is read-only during the replay, local Qdrant locks its
folder to one process, and the gateway's process opens it).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks.agents.arms import Arm
from benchmarks.agents.replay import client_headers
from cp_memory.core.chat_memories import DEFAULT_QUERY_TURNS, ChatShape, place_memories, query_text
from cp_memory.gateway.config import GatewayConfig, UpstreamKind
from cp_memory.gateway.memories import USER_HEADER, leaf_text
from cp_memory.gateway.protocols import Api, api_of

__all__ = [
    "SECRET",
    "TOP_K",
    "MemorySetup",
    "gateway_mem0_args",
    "leaks",
    "mem0_pattern",
    "mem0_records",
    "prepare_memories",
]

log = logging.getLogger(__name__)

#: the gateway's keyed-hash secret in the replay (tenants are computed with it before the gateway starts)
SECRET = "agents-replay-gateway-secret-0001"
#: the other tenant's client key (its memories must never reach the harness user's requests)
OTHER_KEY = "sk-another-tenant-0001"
#: memories per search: the gateway's own default, for both arms
TOP_K = int(GatewayConfig.model_fields["memories_top_k"].default)
_SHAPES = {Api.CHAT: ChatShape.OPENAI, Api.RESPONSES: ChatShape.RESPONSES, Api.MESSAGES: ChatShape.ANTHROPIC}


@dataclass(frozen=True)
class MemorySetup:
    """The store and what the mem0 pattern found: ``found[seq]`` the memories placed in request ``seq``."""

    path: Path
    user: str
    scope: str
    own: frozenset[str]
    foreign: frozenset[str]
    found: Mapping[int, tuple[str, ...]]


def _api(record: Mapping[str, Any]) -> Api:
    return api_of(str(record.get("path", "")).split("?", 1)[0])


def _messages(record: Mapping[str, Any]) -> list[Any]:
    body = record["body"]
    items = body.get("input" if _api(record) is Api.RESPONSES else "messages")
    return list(items) if isinstance(items, list) else []


def _placeable(record: Mapping[str, Any]) -> bool:
    shape = _SHAPES.get(_api(record))
    return shape is not None and place_memories(shape, _messages(record), "probe") is not None


def _tenant(record: Mapping[str, Any], key: str | None = None) -> str:
    from cp_memory.gateway.flow import Gateway

    headers = client_headers(record.get("headers") or {}, Arm("gateway", ""))
    if key is not None:
        headers = {k: v for k, v in headers.items() if k not in ("x-api-key", "authorization")}
        headers["authorization"] = f"Bearer {key}"
    probe = Gateway(GatewayConfig(upstream="http://127.0.0.1:9", secret=SECRET), UpstreamKind.ANTHROPIC)
    return probe.identify(_api(record), headers, record["body"]).tenant


def prepare_memories(
    records: Sequence[Mapping[str, Any]], path: Path, *, locomo: str | None, conv: int, other: int, count: int
) -> MemorySetup:
    """Ingest the two users into a fresh embedded store at ``path`` and run the mem0 pattern's searches."""
    from benchmarks.common.ingest import memory_items
    from benchmarks.common.locomo import load_locomo
    from cp_memory.embedded import default_memory

    convs = load_locomo(locomo)
    user = f"locomo-{convs[conv].sample_id}"
    scope = f"{_tenant(records[0])}:{user}"
    foreign_scope = f"{_tenant(records[0], OTHER_KEY)}:{user}"
    memory = default_memory(path)
    try:
        texts: dict[str, list[str]] = {}
        for uid, sample in ((scope, conv), (foreign_scope, other)):
            for text, metadata in memory_items(convs[sample], "observations", count):
                memory.add(text, user_id=uid, infer=False, metadata=metadata)
                texts.setdefault(uid, []).append(str(text))
        found: dict[int, tuple[str, ...]] = {}
        for record in records:
            if not _placeable(record):
                continue
            query = query_text(_messages(record), DEFAULT_QUERY_TURNS)
            if query:
                hits = memory.search(query, filters={"user_id": scope}, top_k=TOP_K)
                found[int(record["seq"])] = tuple(str(h["memory"]) for h in hits["results"])
    finally:
        memory.close()
    log.info(
        "mem0: %d memories for %s, %d for another tenant; %d requests searched",
        len(texts[scope]),
        user,
        len(texts[foreign_scope]),
        len(found),
    )
    return MemorySetup(path, user, scope, frozenset(texts[scope]), frozenset(texts[foreign_scope]), found)


def mem0_pattern(record: Mapping[str, Any], memories: Sequence[str]) -> dict[str, Any]:
    """The record with ``memories`` put into its newest user message as mem0's proxy words it."""
    shape = _SHAPES[_api(record)]
    text = "- Relevant Memories/Facts: " + "\n".join(memories) + "\n\n- Entities: []\n\n- User Question: "
    placed = place_memories(shape, _messages(record), text)
    if placed is None:
        return dict(record)
    body = dict(record["body"])
    body["input" if _api(record) is Api.RESPONSES else "messages"] = placed.messages
    return dict(record) | {"body": body}


def mem0_records(records: Sequence[Mapping[str, Any]], setup: MemorySetup, arm: str) -> list[dict[str, Any]]:
    """What the client sends in the memories run: every request names the user (``X-CP-User``); for
    ``passthrough`` (mem0's pattern) the found memories are put in; the gateway searches itself."""
    out = []
    for record in records:
        named = dict(record) | {"headers": dict(record.get("headers") or {}) | {USER_HEADER: setup.user}}
        found = setup.found.get(int(record["seq"]))
        out.append(mem0_pattern(named, found) if arm == "passthrough" and found else named)
    return out


def gateway_mem0_args(setup: MemorySetup) -> list[str]:
    """The gateway CLI's memory options for the run."""
    return ["--mem0", "embedded", "--mem0-path", str(setup.path), "--no-memories-add"]


def leaks(sent: Sequence[Any], setup: MemorySetup) -> dict[str, int]:
    """Over the bodies an arm sent upstream: the requests that carried one of the user's memories, and the
    memories of the other tenant that appeared (must be 0)."""
    texts = [leaf_text(body) for body in sent if isinstance(body, Mapping)]
    return {
        "requests_with_memories": sum(1 for t in texts if any(m in t for m in setup.own)),
        "own_memories_seen": sum(1 for m in setup.own if any(m in t for t in texts)),
        "foreign_memories_seen": sum(1 for m in setup.foreign if any(m in t for t in texts)),
    }
