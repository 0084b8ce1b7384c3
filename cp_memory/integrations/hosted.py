"""Hosted-provider cache settings for the framework integrations: thin adapters over :mod:`cp_memory.providers`.

* LangGraph / LangChain with ``ChatAnthropic``: :func:`anthropic_messages` turns a turn's LangChain messages
  (``MemoryPrompt.prepare(...).messages``: fixed system, history, the user message carrying the memories) into
  the same messages with ``cache_control`` content blocks where the cached prefix ends (ChatAnthropic passes
  content blocks through).
* ``ChatOpenAI`` / LlamaIndex ``OpenAI`` / any OpenAI client: :func:`openai_cache_kwargs` gives
  ``prompt_cache_key`` (keyed hash of the search's scope) and ``prompt_cache_retention`` to bind
  (``llm.bind(**kwargs)``, ``additional_kwargs=kwargs``, ``create(..., **kwargs)``).
* OpenAI Agents SDK: :func:`agents_model_settings` returns ``ModelSettings`` with the retention and the key
  (``extra_args``), to set on the ``Agent`` or ``RunConfig``.

Usage: every framework's reply goes to :func:`cp_memory.providers.read_usage` (a LangChain ``AIMessage``'s
``usage_metadata``, an Agents SDK ``Usage``, a LlamaIndex ``ChatResponse.raw``), and to the wrapper's account
with ``memory.commit(search_response, usage=reply)``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ..core.prompt import prompt_contract
from ..providers.anthropic import anthropic_request
from ..providers.openai import PromptCacheKeys, openai_cache_kwargs

__all__ = ["agents_model_settings", "anthropic_messages", "openai_cache_kwargs"]


def agents_model_settings(
    keys: PromptCacheKeys | None,
    response: Any = None,
    *,
    filters: Mapping[str, Any] | None = None,
    retention: str | None = None,
    base: Any = None,
) -> Any:
    """An Agents SDK ``ModelSettings`` with ``prompt_cache_retention`` and the scope's ``prompt_cache_key``
    (passed through ``extra_args``), merged over ``base`` (a ``ModelSettings``) when given."""
    from agents import ModelSettings

    kwargs = openai_cache_kwargs(keys, response, filters=filters, retention=retention)
    extra = {"prompt_cache_key": kwargs["prompt_cache_key"]} if "prompt_cache_key" in kwargs else None
    settings = ModelSettings(prompt_cache_retention=kwargs.get("prompt_cache_retention"), extra_args=extra)
    return base.resolve(settings) if base is not None else settings


def _role(message: Any) -> str:
    kind = getattr(message, "type", None)
    if kind == "human":
        return "user"
    if kind == "ai":
        return "assistant"
    if kind == "system":
        return "system"
    raise TypeError(f"anthropic_messages handles system, human and AI messages; got a {type(message).__name__}")


def anthropic_messages(
    messages: Sequence[Any],
    response: Any,
    *,
    model: str | None,
    tools: Sequence[Mapping[str, Any]] = (),
    layout: str | None = None,
    ttl: str = "5m",
    stable_ttl: str | None = None,
) -> list[Any]:
    """``messages`` (LangChain: an optional system message, the history, then the user message made by
    :func:`cp_memory.integrations.chat.user_content` from ``response``) with Anthropic ``cache_control``
    breakpoints, as LangChain messages for ``ChatAnthropic``. ``tools``: the tool definitions the model is
    bound with (they come first in Anthropic's prefix and are counted, never changed)."""
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage

    if not messages or _role(messages[-1]) != "user":
        raise ValueError("the last message must be the user's message carrying the memories")
    system = None
    rest = list(messages)
    if _role(rest[0]) == "system":
        system = rest.pop(0).content
    history = [{"role": _role(m), "content": m.content} for m in rest[:-1]]
    newest = rest[-1].content
    if not isinstance(newest, str):
        raise TypeError("the newest user message must have text content (str)")
    question = prompt_contract(response).question_in(newest)
    if question is None:
        raise ValueError("the newest user message is not the layout's text for this response (user_content)")
    req = anthropic_request(
        question,
        response,
        model=model,
        system=system,
        history=history,
        tools=tools,
        layout=layout,  # type: ignore[arg-type]
        ttl=ttl,
        stable_ttl=stable_ttl,
    )
    sent = req.messages[-1]["content"]
    if "".join(b.get("text", "") for b in sent) != newest:
        raise ValueError("the newest user message is not the layout's text for this response (user_content)")
    out: list[Any] = []
    if req.system:
        system_blocks: list[str | dict[Any, Any]] = list(req.system)
        out.append(SystemMessage(content=system_blocks))
    kinds = {"user": HumanMessage, "assistant": AIMessage}
    for original, m in zip(rest, req.messages):
        out.append(kinds[m["role"]](content=m["content"], id=getattr(original, "id", None)))
    return out
