"""OpenAI requests from cp_memory's layout: a ``prompt_cache_key`` per scope and the retention option.

OpenAI caches exact prefixes on its own; what a client controls is *where its requests go*: they are routed
by a hash of about the first 256 tokens together with ``prompt_cache_key``, and past ~15 requests a minute
for one prefix and key the surplus overflows to machines that do not hold the prefix. Every request of an
application starts with the same system prompt, so without a key all users share one routing group. With
:class:`PromptCacheKeys` each scope (user, agent, run ids and every filter: cp_memory's
:class:`~cp_memory.core.scope.Scope`) gets its own key, a keyed hash (HMAC-SHA256 with a per-application secret)
of an unambiguous encoding of the scope (as the snapshot names): the same scope always maps to the same key,
two scopes never share one, no raw id leaves the process, and without the secret nobody can tell which user
a key belongs to or test a guess.

:func:`openai_request` returns the keyword arguments of ``client.chat.completions.create`` (or, with
``api="responses"``, ``client.responses.create``): the stable system message, the history, then the user
message carrying the memories, plus ``prompt_cache_key`` and ``prompt_cache_retention`` when set.
"""

from __future__ import annotations

import copy
import hashlib
import hmac
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from ..core.checks import one_of
from ..core.prompt import contract_of, prompt_contract
from ..core.scope import Scope, canonical_json, scope_of
from .rules import OPENAI_RETENTIONS

__all__ = ["PromptCacheKeys", "openai_cache_kwargs", "openai_request"]

#: key characters kept: 128 bits of the HMAC, well inside the API's length limit
_KEY_HEX = 32


class PromptCacheKeys:
    """``prompt_cache_key`` values for scopes: ``keys.key(filters)`` / ``keys.for_response(search_response)``.

    ``secret``: at least 16 bytes (str or bytes), the same for every process of the application (a key is
    only useful if the same scope keeps it); keep it with the application's other secrets.
    """

    def __init__(self, secret: str | bytes, *, prefix: str = "cp-") -> None:
        raw = secret.encode("utf-8") if isinstance(secret, str) else secret
        if not isinstance(raw, bytes) or len(raw) < 16:
            raise ValueError("PromptCacheKeys needs a secret of at least 16 bytes (one per application)")
        if not isinstance(prefix, str) or len(prefix) > 16:
            raise ValueError("prefix must be a str of at most 16 characters")
        self._secret = raw
        self.prefix = prefix

    def __repr__(self) -> str:  # never show the secret
        return f"PromptCacheKeys(prefix={self.prefix!r})"

    def key(self, scope: Mapping[str, Any] | Scope | str) -> str:
        """The key of a scope: mem0 ``filters`` (``{"user_id": ...}``), a :class:`Scope` or its string.

        The HMAC covers an unambiguous encoding of the scope (a JSON list of its user, agent and run ids and
        its conditions digest), never its display string: ``user_id="alice&agent_id=support"`` and
        ``(user_id="alice", agent_id="support")`` get different keys."""
        if isinstance(scope, Mapping):
            found = scope_of(scope)
            if found is None:
                raise ValueError("filters must contain at least one of user_id, agent_id, run_id")
        elif isinstance(scope, Scope):
            found = scope
        elif isinstance(scope, str) and scope:
            found = Scope.parse(scope)
        else:
            raise TypeError(f"scope must be mem0 filters, a Scope or its string, got {type(scope).__name__}")
        if found is None:  # a string that is no scope's: keyed as it is, apart from every scope's encoding
            text = canonical_json(["text", scope])
        else:
            text = canonical_json(["scope", found.user_id, found.agent_id, found.run_id, found.conditions])
        digest = hmac.new(self._secret, text.encode("utf-8"), hashlib.sha256).hexdigest()
        return self.prefix + digest[:_KEY_HEX]

    def for_response(self, response: Any, filters: Mapping[str, Any] | None = None) -> str | None:
        """The key of a search response's scope (``context_pilot["scope"]``, the full scope), else of
        ``filters``; None when neither names a scope."""
        contract = contract_of(response)
        scope = contract.scope if contract is not None else None
        if scope:
            return self.key(scope)
        if filters is not None:
            return self.key(filters)
        return None


def openai_request(
    query: str,
    response: Mapping[str, Any] | Sequence[Mapping[str, Any]],
    *,
    system: str | None = None,
    history: Sequence[Mapping[str, Any]] = (),
    tools: Sequence[Mapping[str, Any]] = (),
    keys: PromptCacheKeys | None = None,
    filters: Mapping[str, Any] | None = None,
    retention: str | None = None,
    api: Literal["chat", "responses"] = "chat",
) -> dict[str, Any]:
    """Keyword arguments for ``chat.completions.create`` (``api="chat"``) or ``responses.create``.

    Messages: ``[system?] + history + [user: memories + annotations + question]`` (the search's prompt
    contract, :meth:`cp_memory.core.prompt.PromptContract.user_message`: the bytes of
    :func:`cp_memory.integrations.chat.user_content`); ``tools`` are passed through. ``keys``: adds the
    scope's ``prompt_cache_key``; ``retention``: ``"in_memory"`` or ``"24h"``."""
    cache = openai_cache_kwargs(keys, response, filters=filters, retention=retention)
    one_of(api, "api", ("chat", "responses"))
    messages: list[dict[str, Any]] = []
    if system:
        messages.append({"role": "system", "content": system})
    for i, m in enumerate(history):
        if not isinstance(m, Mapping) or "role" not in m:
            raise ValueError(f"history[{i}] must be a message dict with a 'role'")
        messages.append(copy.deepcopy(dict(m)))
    messages.append({"role": "user", "content": prompt_contract(response).user_message(query).text})
    out: dict[str, Any] = {"messages" if api == "chat" else "input": messages}
    if tools:
        out["tools"] = [copy.deepcopy(dict(t)) for t in tools]
    out.update(cache)
    return out


def openai_cache_kwargs(
    keys: PromptCacheKeys | None,
    response: Any = None,
    *,
    filters: Mapping[str, Any] | None = None,
    retention: str | None = None,
) -> dict[str, Any]:
    """``{"prompt_cache_key": ..., "prompt_cache_retention": ...}`` (only what is set) for the scope of a
    search ``response`` (or ``filters``): the cache arguments of any OpenAI client (``ChatOpenAI``,
    LlamaIndex ``OpenAI``, the SDK itself)."""
    if retention is not None:
        one_of(retention, "retention", OPENAI_RETENTIONS)
    out: dict[str, Any] = {}
    if keys is not None:
        key = keys.for_response(response, filters)
        if key is not None:
            out["prompt_cache_key"] = key
    if retention is not None:
        out["prompt_cache_retention"] = retention
    return out
