"""The provider rules the gateway applies to a request after prefix replay, through :mod:`cp_memory.providers`.

* **Anthropic** (upstream ``anthropic``, ``/v1/messages``): breakpoints are added only within the 4 the API
  allows, counting every mark the client set wherever the API counts it
  (:func:`cp_memory.providers.marks.count_marks`); none is ever removed or moved. Candidates: ``turn`` (the
  last block of the last message, unless the client asked for automatic caching, which puts one there) and
  ``bridge`` (where the previous request of the session ended, when that is more than the 20-block lookback
  before the ``turn`` mark, so the next request still finds the entry written there). A candidate below the
  model's minimum cacheable prefix (token counts from :func:`cp_memory.providers.tokens.default_counting`)
  is skipped, and so is a 5-minute mark that would precede a client's 1-hour one (the API rejects that).
  A client request already carrying more than 4 marks is forwarded unchanged (the API answers it).
* **OpenAI** (upstream ``openai``): ``prompt_cache_key`` = a keyed hash of the tenant and one of its
  ``key_shards`` shards (a session always gets the same shard; one shard by default), when the client set
  none. OpenAI routes a request by its first ~256 tokens together with the key: one key per tenant keeps the
  sessions that share a head (an agent's system prompt and tools) on the machine that caches it, where a key
  per session would scatter them and every new session would prefill that head again. Past ~15 requests a
  minute for one prefix and key the surplus overflows to other machines; a tenant that busy raises
  ``key_shards``. Retention fields are never added.
* **vLLM**: a per-tenant ``cache_salt`` (tenants never share prefix-cache blocks), when the client set none,
  on the routes vLLM accepts it on (chat completions, responses, messages).

I/O-free: returns the new body and what changed.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..providers.anthropic import block_texts
from ..providers.marks import find_marks
from ..providers.openai import PromptCacheKeys
from ..providers.rules import ANTHROPIC_LOOKBACK_BLOCKS, ANTHROPIC_MAX_BREAKPOINTS, anthropic_min_tokens
from ..providers.tokens import Counting
from .config import UpstreamKind
from .protocols import Api

__all__ = ["AddedMark", "RuleResult", "apply_rules", "salt_routes"]

#: the routes an engine accepts ``cache_salt`` on (vLLM 0.32's request models: chat completions, responses and
#: its Anthropic /v1/messages; SGLang documents none)
_SALTED: dict[UpstreamKind, frozenset[Api]] = {UpstreamKind.VLLM: frozenset({Api.CHAT, Api.RESPONSES, Api.MESSAGES})}


def salt_routes(kind: UpstreamKind) -> frozenset[Api]:
    return _SALTED.get(kind, frozenset())


@dataclass(frozen=True)
class AddedMark:
    """A breakpoint the gateway added: why (``turn``/``bridge``), at which block (prefix order)."""

    where: str
    block: int


@dataclass(frozen=True)
class RuleResult:
    """``body`` to send; ``added`` fields and marks; ``client_marks`` the client's own mark count;
    ``client_mark_tokens`` the prefix tokens up to the client's last mark (what passthrough could cache
    on Anthropic), None when not counted."""

    body: dict[str, Any]
    added: tuple[str, ...] = ()
    marks: tuple[AddedMark, ...] = ()
    client_marks: int = 0
    client_mark_tokens: int | None = None
    notes: tuple[str, ...] = field(default=())


def _keyed(secret: bytes, *parts: str) -> str:
    return hmac.new(secret, "\x1f".join(parts).encode(), hashlib.sha256).hexdigest()[:32]


def key_shard(secret: bytes, session: str, shards: int) -> int:
    """The shard of a tenant's ``prompt_cache_key`` a session keeps (0 with one shard): the same on every
    replica and across restarts, since it is a keyed hash of the session."""
    if shards < 1:
        raise ValueError(f"key_shards must be at least 1, got {shards}")
    return 0 if shards == 1 else int(_keyed(secret, "shard", session), 16) % shards


def apply_rules(
    kind: UpstreamKind,
    api: Api,
    body: dict[str, Any],
    *,
    secret: bytes,
    tenant: str,
    session: str,
    previous_end: int | None,
    counting: Counting,
    add_marks: bool = True,
    key_shards: int = 1,
) -> RuleResult:
    """The provider's rules on ``body`` (already replayed). ``previous_end``: the block index (prefix order)
    where the session's previous request ended, when it is still a prefix of this one."""
    if kind is UpstreamKind.ANTHROPIC and api is Api.MESSAGES:
        return _anthropic(body, previous_end, counting, add_marks)
    if kind is UpstreamKind.OPENAI and api in (Api.CHAT, Api.RESPONSES) and "prompt_cache_key" not in body:
        key = PromptCacheKeys(secret).key(f"gateway\x1f{tenant}\x1f{key_shard(secret, session, key_shards)}")
        return RuleResult({**body, "prompt_cache_key": key}, added=("prompt_cache_key",))
    if api in salt_routes(kind) and "cache_salt" not in body:
        return RuleResult({**body, "cache_salt": "cp-" + _keyed(secret, "salt", tenant)}, added=("cache_salt",))
    return RuleResult(body)


def _system_list(system: Any) -> list[Any]:
    if isinstance(system, str):
        return [{"type": "text", "text": system}] if system else []
    return list(system) if isinstance(system, list) else []


def _anthropic(body: dict[str, Any], previous_end: int | None, counting: Counting, add: bool) -> RuleResult:
    tools: list[Any] = _listed(body.get("tools"))
    messages: list[Any] = _listed(body.get("messages"))
    marks = find_marks(tools, body.get("system"), messages, top_level=body.get("cache_control"))
    texts = block_texts(tools, _system_list(body.get("system")), messages)
    last_client = max((m.block for m in marks), default=-1)
    if body.get("cache_control") is not None:
        last_client = len(texts) - 1  # automatic caching marks the last cacheable block
    client_tokens = _prefix_tokens(texts, last_client, counting, None) if last_client >= 0 else 0
    if len(marks) > ANTHROPIC_MAX_BREAKPOINTS:
        return RuleResult(body, client_marks=len(marks), client_mark_tokens=client_tokens, notes=("over 4 marks",))
    if not add or not texts:
        return RuleResult(body, client_marks=len(marks), client_mark_tokens=client_tokens)
    minimum, _ = anthropic_min_tokens(body.get("model") if isinstance(body.get("model"), str) else None)
    wanted = _candidates(len(texts), previous_end, body.get("cache_control") is not None)
    taken = {m.block for m in marks if m.where != "top"}
    one_hour_after = [m.block for m in marks if m.ttl == "1h"]
    flat = _flat_blocks(tools, _system_list(body.get("system")), messages)
    budget = ANTHROPIC_MAX_BREAKPOINTS - len(marks)
    chosen: list[AddedMark] = []
    for where, at in wanted:
        if budget <= 0 or at in taken or any(b > at for b in one_hour_after) or not _markable(flat[at]):
            continue
        if not counting.reaches(_prefix_tokens(texts, at, counting, minimum), minimum):
            continue
        chosen.append(AddedMark(where, at))
        taken.add(at)
        budget -= 1
    if not chosen:
        return RuleResult(body, client_marks=len(marks), client_mark_tokens=client_tokens)
    out = _with_marks(body, tools, messages, [m.block for m in chosen])
    return RuleResult(out, ("cache_control",), tuple(chosen), len(marks), client_tokens)


def _flat_blocks(tools: list[Any], system: list[Any], messages: list[Any]) -> list[Any]:
    out = [*tools, *system]
    for m in messages:
        content = m.get("content") if isinstance(m, Mapping) else None
        out += [{"type": "text", "text": content}] if isinstance(content, str) else _listed(content)
    return out


def _listed(content: Any) -> list[Any]:
    return list(content) if isinstance(content, list) else []


def _markable(block: Any) -> bool:
    """The API refuses a mark on thinking blocks and on empty text blocks."""
    if not isinstance(block, Mapping) or block.get("type") in ("thinking", "redacted_thinking"):
        return False
    return not (block.get("type") == "text" and not block.get("text"))


def _candidates(n_blocks: int, previous_end: int | None, automatic: bool) -> list[tuple[str, int]]:
    last = n_blocks - 1
    wanted: list[tuple[str, int]] = [] if automatic else [("turn", last)]
    if previous_end is not None and 0 <= previous_end < last and last - previous_end >= ANTHROPIC_LOOKBACK_BLOCKS:
        wanted.append(("bridge", previous_end))
    return wanted


def _prefix_tokens(texts: list[tuple[str, str | None]], upto: int, counting: Counting, stop: int | None) -> int:
    """Tokens of blocks ``0..upto``; stops early once past ``stop`` (enough to decide a minimum)."""
    total = 0
    for text, _ in texts[: upto + 1]:
        total += counting.tokens(text)
        if stop is not None and total >= stop * counting.margin:
            break
    return total


def _with_marks(body: Mapping[str, Any], tools: list[Any], messages: list[Any], blocks: list[int]) -> dict[str, Any]:
    """A copy of ``body`` with a 5-minute mark on each of ``blocks`` (prefix-order indexes); only the marked
    holders are copied, a marked string content becomes one text block."""
    system = body.get("system")
    n_tools, n_system = len(tools), len(_system_list(system))
    out = dict(body)
    new_tools, new_messages = list(tools), list(messages)
    new_system = _system_list(system) if isinstance(system, list) else system
    for at in blocks:
        if at < n_tools:
            new_tools[at] = {**new_tools[at], "cache_control": {"type": "ephemeral"}}
            out["tools"] = new_tools
        elif at < n_tools + n_system and isinstance(new_system, list):
            i = at - n_tools
            new_system[i] = {**new_system[i], "cache_control": {"type": "ephemeral"}}
            out["system"] = new_system
        else:
            _mark_message_block(new_messages, at - n_tools - n_system)
            out["messages"] = new_messages
    return out


def _mark_message_block(messages: list[Any], index: int) -> None:
    for j, message in enumerate(messages):
        content = message.get("content") if isinstance(message, Mapping) else None
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else _listed(content)
        if index < len(blocks):
            if isinstance(blocks[index], Mapping):
                blocks[index] = {**blocks[index], "cache_control": {"type": "ephemeral"}}
                messages[j] = {**message, "content": blocks}
            return
        index -= len(blocks)
