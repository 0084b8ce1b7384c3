"""The recorded agent sessions (tests/gateway/traces: Claude Code 2.1.328 over Anthropic Messages, Codex
0.169.0 over the Responses API; each task re-reads a file) through the gateway's flow: the re-read goes out as
a pointer that resolves to the first read in what the model sees, every request still starts with the bytes
the one before it was sent with, and the forwarded prompts are smaller than with the content rules off
(prompt tokens counted with o200k_base on the prompt's text: modelled, not an engine's count)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks.agents.trace import load_trace, prefix_breaks, session_of
from cp_memory.gateway.memories import leaf_text
from cp_memory.gateway.protocols import Api
from cp_memory.providers.tokens import default_counting

from .content_sessions import pointers_in, resolve, tool_results
from .test_content import gateway

TRACES = Path(__file__).with_name("traces")
FILES = {
    Api.MESSAGES: TRACES / "claude_code_2.1.328_docs_code.jsonl.xz",
    Api.RESPONSES: TRACES / "codex_0.169.0_docs_code.jsonl.xz",
}

#: pointers written: each of the 4 sessions re-reads one file: Claude Code's re-read is one whole-result
#: pointer; Codex's shell output starts with a header that differs on every run (chunk id, wall time), so its
#: re-read keeps its new header and its output becomes one pointer (the ``exec_output`` rule)
REREADS = {Api.MESSAGES: 4, Api.RESPONSES: 4}


def _through(api: Api, records: list[dict[str, Any]], steps: Any = None) -> list[dict[str, Any]]:
    """Every request of the trace through one gateway (plan, commit), as the records they became."""
    gw = gateway() if steps is None else gateway(content_steps=steps)
    out = []
    for r in records:
        headers = {k: v for k, v in r["headers"].items() if not k.startswith("x-cp-")}
        plan = gw.plan(api, headers, json.dumps(r["body"]).encode())
        assert not plan.failed_open
        gw.commit(plan)
        out.append({**r, "body": json.loads(plan.content)})
    return out


def _tokens(records: list[dict[str, Any]]) -> int:
    counting = default_counting()
    return sum(counting.tokens(leaf_text(r["body"].get("messages") or r["body"].get("input"))) for r in records)


@pytest.mark.parametrize("api", list(FILES))
def test_a_recorded_agent_session_that_re_reads_a_file_sends_it_once(api: Api) -> None:
    records = load_trace(FILES[api])
    sent = _through(api, records)
    assert prefix_breaks(sent) == []  # byte stability, content rules included
    pointers = 0
    for session in {session_of(r) for r in sent}:
        last = [r for r in sent if session_of(r) == session][-1]["body"]
        client = [r for r in records if session_of(r) == session][-1]["body"]
        expanded = resolve(api, last)
        assert expanded == dict(tool_results(api, client))  # every pointer resolves to the client's own text
        pointers += sum(pointers_in(t) for _, t in tool_results(api, last))
    assert pointers == REREADS[api]
    with_rules, without = _tokens(sent), _tokens(_through(api, records, frozenset()))
    print(
        f"{api.value}: forwarded prompt text {without} -> {with_rules} tokens (o200k_base) over {len(records)} requests"
    )
    assert with_rules < without
