"""Hand-written multi-turn sessions of the three protocols, as real clients send them, re-renderings included.

Each session is a list of request bodies, turn after turn, of an agent that reads files with a tool: the
client echoes the model's tool calls and answers back in its history, and (``rerender=True``) renders that
history differently each turn, the way real clients do:

* Anthropic Messages (Claude Code style): 3 system blocks and marks of its own, the mark moved to the newest
  message every turn, earlier ``thinking`` blocks stripped, ``tool_use.input`` keys in another order;
* OpenAI Chat Completions: ``tool_calls[].function.arguments`` re-encoded (spaces, key order), a string
  content turned into one text part;
* OpenAI Responses (Codex style): ``function_call.arguments`` re-encoded, item ``id``/``status`` dropped.

The answers are the scripted ones a model would give; sizes are realistic but small (a few thousand
tokens) so the sessions run on the test engines' contexts.
"""

from __future__ import annotations

import copy
import json
from typing import Any

FILES = {
    "notes.md": "The river crossing was postponed to Friday because of the storm. " * 12,
    "plan.md": "Stage one: survey the garden. Stage two: plant the summer beds. " * 12,
    "log.txt": "09:00 market opened; 10:30 doctor visit; 12:00 lunch with family. " * 12,
}
SYSTEM = "You are a careful assistant that reads files before answering. " * 20
TOOL = {
    "name": "read_file",
    "description": "Read a file of the project and return its text.",
    "parameters": {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]},
}
QUESTIONS = ["What happened to the river crossing?", "Compare the plan with the log.", "Summarise all three files."]
READS = [["notes.md"], ["plan.md", "log.txt"], ["notes.md", "plan.md"]]


def _args(path: str, rerender: bool, turn: int) -> str:
    """A tool call's JSON arguments; re-rendered every other turn: keys in another order, other spacing."""
    if rerender and turn % 2:
        return json.dumps({"limit": 400, "path": path}, separators=(",", ":"))
    return json.dumps({"path": path, "limit": 400})


# ------------------------------------------------------------------ Anthropic Messages
def _anthropic_turns() -> list[list[dict[str, Any]]]:
    """The conversation's messages after each turn (without marks), one list per request."""
    history: list[dict[str, Any]] = []
    requests = []
    for t, (question, reads) in enumerate(zip(QUESTIONS, READS)):
        history.append({"role": "user", "content": [{"type": "text", "text": question}]})
        for k, path in enumerate(reads):
            requests.append(copy.deepcopy(history))
            call = {
                "type": "tool_use",
                "id": f"toolu_{t}{k}",
                "name": "read_file",
                "input": {"path": path, "limit": 400},
            }
            thinking = {"type": "thinking", "thinking": f"I should read {path}.", "signature": f"sig{t}{k}"}
            history.append({"role": "assistant", "content": [thinking, call]})
            result = {
                "type": "tool_result",
                "tool_use_id": call["id"],
                "content": [{"type": "text", "text": FILES[path]}],
            }
            history.append({"role": "user", "content": [result]})
        requests.append(copy.deepcopy(history))
        history.append({"role": "assistant", "content": [{"type": "text", "text": f"Answer {t}: done."}]})
    return requests


def _anthropic_rerender(messages: list[dict[str, Any]], turn: int) -> list[dict[str, Any]]:
    out = copy.deepcopy(messages)
    for i, m in enumerate(out):
        if m["role"] == "assistant" and i < len(out) - 2:  # earlier thinking stripped
            m["content"] = [b for b in m["content"] if b["type"] != "thinking"]
        for b in m["content"]:
            if b["type"] == "tool_use" and turn % 2:
                b["input"] = dict(reversed(list(b["input"].items())))
    return out


def anthropic_session(*, rerender: bool, model: str = "claude-sonnet-4-5") -> list[dict[str, Any]]:
    system = [
        {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.328"},
        {"type": "text", "text": "You are Claude Code, Anthropic's official CLI for Claude."},
        {"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}},
    ]
    tools = [{"name": TOOL["name"], "description": TOOL["description"], "input_schema": TOOL["parameters"]}]
    bodies = []
    for turn, messages in enumerate(_anthropic_turns()):
        messages = _anthropic_rerender(messages, turn) if rerender else messages
        last = messages[-1]["content"][-1]
        last["cache_control"] = {"type": "ephemeral"}  # the client's moving mark on the newest block
        body = {"model": model, "max_tokens": 64, "system": system, "tools": tools, "messages": messages}
        body["metadata"] = {"user_id": json.dumps({"device_id": "d", "session_id": "sess-anthropic-1"})}
        bodies.append(body)
    return bodies


# ------------------------------------------------------------------ OpenAI Chat Completions
def chat_session(*, rerender: bool, model: str = "model") -> list[dict[str, Any]]:
    history: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}]
    bodies = []
    turn = 0
    for t, (question, reads) in enumerate(zip(QUESTIONS, READS)):
        history.append({"role": "user", "content": question})
        for k, path in enumerate(reads):
            bodies.append(_chat_body(history, model, rerender, turn))
            turn += 1
            call = {
                "id": f"call_{t}{k}",
                "type": "function",
                "function": {"name": "read_file", "arguments": "PATH:" + path},
            }
            history.append({"role": "assistant", "content": None, "tool_calls": [call]})
            history.append({"role": "tool", "tool_call_id": call["id"], "content": FILES[path]})
        bodies.append(_chat_body(history, model, rerender, turn))
        turn += 1
        history.append({"role": "assistant", "content": f"Answer {t}: done."})
    return bodies


def _chat_body(history: list[dict[str, Any]], model: str, rerender: bool, turn: int) -> dict[str, Any]:
    messages = copy.deepcopy(history)
    for m in messages:
        for call in m.get("tool_calls") or []:
            path = call["function"]["arguments"].removeprefix("PATH:")
            call["function"]["arguments"] = _args(path, rerender, turn)
        if rerender and turn % 2 and m["role"] == "user" and isinstance(m["content"], str) and m is not messages[-1]:
            m["content"] = [{"type": "text", "text": m["content"]}]
    return {
        "model": model,
        "max_tokens": 16,
        "temperature": 0,
        "tools": [{"type": "function", "function": TOOL}],
        "messages": messages,
    }


# ------------------------------------------------------------------ OpenAI Responses
def responses_session(*, rerender: bool, model: str = "model") -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    bodies = []
    turn = 0
    for t, (question, reads) in enumerate(zip(QUESTIONS, READS)):
        items.append({"type": "message", "role": "user", "content": [{"type": "input_text", "text": question}]})
        for k, path in enumerate(reads):
            bodies.append(_responses_body(items, model, rerender, turn))
            turn += 1
            items.append(
                {
                    "type": "function_call",
                    "id": f"fc_{t}{k}",
                    "call_id": f"call_{t}{k}",
                    "name": "read_file",
                    "arguments": "PATH:" + path,
                    "status": "completed",
                }
            )
            items.append({"type": "function_call_output", "call_id": f"call_{t}{k}", "output": FILES[path]})
        bodies.append(_responses_body(items, model, rerender, turn))
        turn += 1
        items.append(
            {
                "type": "message",
                "role": "assistant",
                "id": f"msg_{t}",
                "status": "completed",
                "content": [{"type": "output_text", "text": f"Answer {t}: done."}],
            }
        )
    return bodies


def _responses_body(items: list[dict[str, Any]], model: str, rerender: bool, turn: int) -> dict[str, Any]:
    out = copy.deepcopy(items)
    for item in out:
        if item["type"] == "function_call":
            item["arguments"] = _args(item["arguments"].removeprefix("PATH:"), rerender, turn)
        if rerender and turn % 2:
            item.pop("id", None)
            item.pop("status", None)
    tools = [
        {"type": "function", "name": TOOL["name"], "description": TOOL["description"], "parameters": TOOL["parameters"]}
    ]
    return {"model": model, "instructions": SYSTEM, "tools": tools, "input": out, "max_output_tokens": 16}
