"""Agent sessions for the content-rule tests, as the three protocols carry them, and a resolver that expands
every pointer the gateway wrote back into the text it points to, from the forwarded request alone.

``tool_session(api, reads)``: request k holds the question, the model's first k tool calls and their results
(``reads[j]`` = the text tool call j returned); the newest tool result carries a ``cache_control`` mark on
Anthropic, as Claude Code's do. ``resolve(api, body)`` maps each tool call id to its result's text with every
pointer expanded, reading only ``body`` (what the model sees).
"""

from __future__ import annotations

import re
from typing import Any

from cp_memory.gateway.content.finders import find_context
from cp_memory.gateway.protocols import Api

SYSTEM = "You are a coding agent. Read files with the read tool before answering."
QUESTION = "Compare the two configuration files and tell me what changed."
TOOL = {"name": "read", "description": "Read a file.", "parameters": {"type": "object", "properties": {}}}


def numbered_file(name: str, lines: int, *, changed: range | None = None) -> str:
    """A file as an agent's read tool shows it (``cat -n`` style); ``changed`` lines read differently."""
    out = []
    for i in range(1, lines + 1):
        edit = " (edited)" if changed is not None and i in changed else ""
        out.append(f"{i:>6}\t{name}: setting_{i} = value {i * 7 % 13} for the {i % 5}th worker{edit}\n")
    return "".join(out)


def _call_id(api: Api, j: int) -> str:
    return {Api.MESSAGES: f"toolu_{j:02d}", Api.CHAT: f"call_{j:02d}", Api.RESPONSES: f"fc_{j:02d}"}[api]


def _messages(reads: list[str], k: int) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": QUESTION}]
    for j in range(k):
        use = {"type": "tool_use", "id": _call_id(Api.MESSAGES, j), "name": "read", "input": {"path": f"f{j}"}}
        messages.append({"role": "assistant", "content": [{"type": "text", "text": "Reading."}, use]})
        result: dict[str, Any] = {"type": "tool_result", "tool_use_id": _call_id(Api.MESSAGES, j), "content": reads[j]}
        if j == k - 1:
            result["cache_control"] = {"type": "ephemeral"}
        messages.append({"role": "user", "content": [result]})
    tools = [{"name": "read", "description": TOOL["description"], "input_schema": TOOL["parameters"]}]
    return {"model": "m", "max_tokens": 64, "system": SYSTEM, "tools": tools, "messages": messages}


def _chat(reads: list[str], k: int) -> dict[str, Any]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]
    for j in range(k):
        call = {
            "id": _call_id(Api.CHAT, j),
            "type": "function",
            "function": {"name": "read", "arguments": f'{{"path": "f{j}"}}'},
        }
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        messages.append({"role": "tool", "tool_call_id": _call_id(Api.CHAT, j), "content": reads[j]})
    return {"model": "m", "messages": messages, "tools": [{"type": "function", "function": TOOL}]}


def _responses(reads: list[str], k: int) -> dict[str, Any]:
    items: list[dict[str, Any]] = [{"role": "user", "content": [{"type": "input_text", "text": QUESTION}]}]
    for j in range(k):
        cid = _call_id(Api.RESPONSES, j)
        items.append({"type": "function_call", "call_id": cid, "name": "read", "arguments": f'{{"path": "f{j}"}}'})
        items.append({"type": "function_call_output", "call_id": cid, "output": reads[j]})
    return {"model": "m", "instructions": SYSTEM, "input": items, "tools": [{"type": "function", **TOOL}]}


BUILDERS = {Api.MESSAGES: _messages, Api.CHAT: _chat, Api.RESPONSES: _responses}


def tool_session(api: Api, reads: list[str]) -> list[dict[str, Any]]:
    """One request per tool result, each holding all earlier ones (the client's own history)."""
    return [BUILDERS[api](reads, k) for k in range(1, len(reads) + 1)]


def tool_results(api: Api, body: dict[str, Any]) -> list[tuple[str, str]]:
    """(call id, text) of every tool result of a request, in order."""
    out = []
    if api is Api.MESSAGES:
        for m in body["messages"]:
            for b in m["content"] if isinstance(m["content"], list) else []:
                if b.get("type") == "tool_result":
                    out.append((b["tool_use_id"], b["content"]))
    elif api is Api.CHAT:
        out = [(m["tool_call_id"], m["content"]) for m in body["messages"] if m["role"] == "tool"]
    else:
        out = [(i["call_id"], i["output"]) for i in body["input"] if i.get("type") == "function_call_output"]
    return out


WHOLE = re.compile(r"^Please refer to the result of tool call (\S+) in the previous conversation\.$")
SAME = re.compile(r"^the result of tool call (\S+) above has the same content\.$")
LINES = re.compile(
    r"^( *\d+(?:\t|\u2192))?Please refer to (?:lines (\d+)-(\d+)|line (\d+)) of the result of tool call (\S+) "
    r"in the previous conversation\.$"
)
LABEL = re.compile(r"^ *\d+(?:\t|\u2192)")
#: a block of an earlier result (a markdown section, a tagged document), named by its label
BLOCK = re.compile(r"^Please refer to (.+) in the result of tool call (\S+) in the previous conversation\.$")


EXEC = re.compile(r"\A((?:[A-Z][^\n]*\n)*?Output:\n)(.*)\Z", re.S)


def exec_output(body: str, run: int) -> str:
    """A shell run's result as Codex shows it: a header that changes every run, then the command's output."""
    return (
        f"Chunk ID: {run:06x}\nWall time: 0.00{run % 10} seconds\nProcess exited with code 0\n"
        f"Original token count: {len(body) // 4}\nOutput:\n{body}"
    )


def _exec_body(text: str) -> str:
    m = EXEC.match(text)
    return m.group(2) if m else text


def _expand(text: str, seen: dict[str, str]) -> str:
    whole = WHOLE.match(text) or SAME.match(text)
    if whole:
        return seen[whole.group(1)]  # KeyError: a pointer to something the history does not show
    run = EXEC.match(text)
    inner = (WHOLE.match(run.group(2)) or SAME.match(run.group(2))) if run else None
    if run and inner:  # a shell run's output replaced by a pointer to an earlier run's output
        return run.group(1) + _exec_body(seen[inner.group(1)])
    out = []
    for line in text.splitlines(keepends=True):
        m = LINES.match(line.rstrip("\n"))
        block = BLOCK.match(line.rstrip("\n")) if m is None else None
        if block is not None:  # the body of the earlier result's block of that label
            source = seen[block.group(2)]
            context = find_context(source)
            found = [b for b in context.blocks if b.label == block.group(1)] if context is not None else []
            out.append(found[0].body(source) + ("\n" if line.endswith("\n") else ""))
            continue
        if m is None:
            out.append(line)
            continue
        first = int(m.group(2) or m.group(4))
        last, source = int(m.group(3) or first), m.group(5)
        lines = seen[source].splitlines(keepends=True)[first - 1 : last]
        if m.group(1):  # a numbered line: its own number, the earlier line's text after that one's number
            lines = [m.group(1) + LABEL.sub("", lines[0], count=1).rstrip("\n") + ("\n" if line.endswith("\n") else "")]
        out.append("".join(lines))
    return "".join(out)


def resolve(api: Api, body: dict[str, Any]) -> dict[str, str]:
    """Each tool call's result with its pointers expanded, using only earlier results as the model sees them
    (a pointer may only point back); raises KeyError for a pointer to a result the request does not show."""
    shown: dict[str, str] = {}
    expanded: dict[str, str] = {}
    for call_id, text in tool_results(api, body):
        expanded[call_id] = _expand(text, shown)
        shown[call_id] = text
    return expanded


def pointers_in(raw: bytes | str) -> int:
    """How many pointers the gateway wrote into a forwarded body."""
    text = raw.decode() if isinstance(raw, bytes) else raw
    return len(re.findall(r"Please refer to|above has the same content", text))
