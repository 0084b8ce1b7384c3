"""A deterministic first step for tool-calling agents (openai-agents).

mem0's OpenAI Agents SDK pattern relies on the model deciding to call ``search_memory``. A small or
random-weight model calls it erratically (or with a noise query), which would make the two arms search
different things. :class:`ScriptedFirstStep` wraps the real model: when the newest input item is the
user's message, it answers with a call of the memory tool whose query is that message (plus fixed extra
arguments, e.g. mem0's ``user_id``), without calling the engine; every other step (the answer after the
tool output) goes to the real model. The engine therefore sees the conversation with the tool call and its
output exactly as a well-behaved model would have produced them.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping
from typing import Any

from agents.items import ModelResponse
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseFunctionToolCall,
)

__all__ = ["ScriptedFirstStep"]


def _user_text(input: Any) -> str | None:
    if isinstance(input, str):
        return input
    if not input:
        return None
    last = input[-1]
    role = last.get("role") if isinstance(last, Mapping) else getattr(last, "role", None)
    if role != "user":
        return None
    content = last.get("content") if isinstance(last, Mapping) else getattr(last, "content", None)
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(str(p.get("text", "")) for p in content if isinstance(p, Mapping))
    return None


class ScriptedFirstStep(Model):
    """``inner`` with a scripted ``tool_name(query=<user message>, **extra_args)`` as the first step of a run."""

    def __init__(self, inner: Model, tool_name: str, extra_args: Mapping[str, Any] | None = None) -> None:
        self.inner = inner
        self.tool_name = tool_name
        self.extra_args = dict(extra_args or {})
        self.calls = 0

    def _call(self, input: Any) -> ResponseFunctionToolCall | None:
        text = _user_text(input)
        if text is None:
            return None
        self.calls += 1
        call_id = f"call_{self.calls:04d}"
        return ResponseFunctionToolCall(
            type="function_call",
            call_id=call_id,
            id=f"fc_{self.calls:04d}",
            name=self.tool_name,
            status="completed",
            arguments=json.dumps({"query": text, **self.extra_args}),
        )

    async def get_response(
        self,
        system_instructions: Any,
        input: Any,
        model_settings: Any,
        tools: Any,
        output_schema: Any,
        handoffs: Any,
        tracing: Any,
        **kwargs: Any,
    ) -> ModelResponse:
        call = self._call(input)
        if call is not None:
            return ModelResponse(output=[call], usage=Usage(), response_id=None)
        return await self.inner.get_response(
            system_instructions, input, model_settings, tools, output_schema, handoffs, tracing, **kwargs
        )

    async def stream_response(
        self,
        system_instructions: Any,
        input: Any,
        model_settings: Any,
        tools: Any,
        output_schema: Any,
        handoffs: Any,
        tracing: Any,
        **kwargs: Any,
    ) -> AsyncIterator[Any]:
        call = self._call(input)
        if call is not None:
            response = Response.model_construct(
                id=f"resp_{self.calls:04d}",
                output=[call],
                usage=None,
                object="response",
                model="scripted",
                created_at=0.0,
                parallel_tool_calls=False,
                tool_choice="auto",
                tools=[],
            )
            yield ResponseCompletedEvent.model_construct(
                type="response.completed", response=response, sequence_number=0
            )
            return
        async for event in self.inner.stream_response(
            system_instructions, input, model_settings, tools, output_schema, handoffs, tracing, **kwargs
        ):
            yield event
