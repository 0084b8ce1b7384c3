"""The scripted model server, driven by the official SDKs the way a harness drives it: the model asks for a
tool, the client runs it in the task's scratch folder and sends the result back, until the scripted answer.
Streamed and not, in all three protocols; the same task gives the same traffic; keys never reach the trace.
The committed Claude Code / Codex traces load and hold what the gateway tests rely on."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from benchmarks.agents.harnesses import CLAUDE_CODE_VERSION, CODEX_VERSION
from benchmarks.agents.scripted import ScriptedServer
from benchmarks.agents.tasks import TASKS, prompt_for
from benchmarks.agents.trace import SCRUBBED, count_marks, load_trace, prefix_breaks, session_of, summarise

TRACES = Path(__file__).resolve().parents[1] / "gateway" / "traces"
CLAUDE_TRACE = TRACES / f"claude_code_{CLAUDE_CODE_VERSION}_docs_code.jsonl.xz"
CODEX_TRACE = TRACES / f"codex_{CODEX_VERSION}_docs_code.jsonl.xz"
TOOL = {"name": "shell", "description": "run a shell command", "input_schema": {"type": "object"}}


def _shell(arguments: dict[str, Any]) -> str:
    """What a harness's shell tool does with the scripted call."""
    command = arguments["command"]
    done = subprocess.run(command, cwd=arguments["workdir"], capture_output=True, text=True, timeout=30, check=False)
    return done.stdout


def _anthropic_session(client: Any, folder: Path, stream: bool) -> tuple[list[Any], str]:
    messages: list[Any] = [{"role": "user", "content": prompt_for(TASKS["docs"], folder)}]
    tools = [{**TOOL, "input_schema": {"type": "object", "properties": {"command": {"type": "array"}}}}]
    for _ in range(10):
        kwargs = {"model": "claude-test", "max_tokens": 64, "messages": messages, "tools": tools}
        if stream:
            with client.messages.stream(**kwargs, thinking={"type": "enabled", "budget_tokens": 1024}) as s:
                message = s.get_final_message()
        else:
            message = client.messages.create(**kwargs)
        messages.append({"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in message.content]})
        calls = [b for b in message.content if b.type == "tool_use"]
        if not calls:
            return messages, message.content[-1].text
        results = [{"type": "tool_result", "tool_use_id": c.id, "content": _shell(c.input)} for c in calls]
        messages.append({"role": "user", "content": results})
    raise AssertionError("the scripted task never answered")


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_anthropic_sdk_plays_the_docs_task(tmp_path: Path, stream: bool):
    anthropic = pytest.importorskip("anthropic")
    folder = TASKS["docs"].materialise(tmp_path / "work")
    with ScriptedServer(trace=tmp_path / "trace.jsonl") as server:
        client = anthropic.Anthropic(base_url=server.url, api_key="sk-ant-secret-123")
        messages, answer = _anthropic_session(client, folder, stream)
    assert answer == TASKS["docs"].steps[-1].arg
    assert len(server.records) == len(TASKS["docs"].steps)  # read, grep, read, read again, answer
    tool_results = json.dumps(messages)
    assert "DECISION: the harbour budget is 41,000." in tool_results and "38,500" in tool_results
    if stream:  # thinking came back with its signature, as Anthropic streams it
        assert messages[1]["content"][0]["type"] == "thinking" and messages[1]["content"][0]["signature"]
    text = (tmp_path / "trace.jsonl").read_text(encoding="utf-8")
    assert "sk-ant-secret-123" not in text
    for record in load_trace(tmp_path / "trace.jsonl"):  # the SDK sends x-api-key or authorization
        credentials = [v for k, v in record["headers"].items() if k in ("x-api-key", "authorization")]
        assert credentials and set(credentials) == {SCRUBBED}
    assert prefix_breaks(server.records) == []


def _responses_session(client: Any, folder: Path, stream: bool) -> tuple[list[Any], str]:
    items: list[Any] = [{"role": "user", "content": prompt_for(TASKS["code"], folder)}]
    tools = [{"type": "function", "name": "shell", "parameters": {"type": "object"}}]
    for _ in range(10):
        if stream:
            with client.responses.stream(model="gpt-test", input=items, tools=tools) as s:
                response = s.get_final_response()
        else:
            response = client.responses.create(model="gpt-test", input=items, tools=tools)
        items += [o.model_dump(exclude_none=True) for o in response.output]
        calls = [o for o in response.output if o.type == "function_call"]
        if not calls:
            return items, response.output_text
        items += [
            {"type": "function_call_output", "call_id": c.call_id, "output": _shell(json.loads(c.arguments))}
            for c in calls
        ]
    raise AssertionError("the scripted task never answered")


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_openai_responses_sdk_plays_the_code_task(tmp_path: Path, stream: bool):
    openai = pytest.importorskip("openai")
    folder = TASKS["code"].materialise(tmp_path / "work")
    with ScriptedServer() as server:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="sk-secret-456")
        items, answer = _responses_session(client, folder, stream)
    assert answer == TASKS["code"].steps[-1].arg
    assert "def median" in json.dumps(items) and any(i.get("output") == "3\n" for i in items)  # python3 ran
    assert all(r["headers"]["authorization"] == SCRUBBED for r in server.records)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_openai_chat_sdk_gets_tool_calls_and_usage(tmp_path: Path, stream: bool):
    openai = pytest.importorskip("openai")
    folder = TASKS["docs"].materialise(tmp_path / "work")
    messages: list[Any] = [{"role": "user", "content": prompt_for(TASKS["docs"], folder)}]
    tools = [{"type": "function", "function": {"name": "shell", "parameters": {"type": "object"}}}]
    with ScriptedServer() as server:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="sk-secret-789")
        if stream:
            chunks = list(
                client.chat.completions.create(
                    model="m", messages=messages, tools=tools, stream=True, stream_options={"include_usage": True}
                )
            )
            args = "".join(
                tc.function.arguments or "" for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or []
            )
            assert chunks[-1].usage is not None and chunks[-1].usage.prompt_tokens > 0
        else:
            done = client.chat.completions.create(model="m", messages=messages, tools=tools)
            args = done.choices[0].message.tool_calls[0].function.arguments
            assert done.choices[0].finish_reason == "tool_calls"
    assert json.loads(args)["command"] == ["bash", "-lc", "cat notes/minutes_march.md"]
    assert server.records[0]["protocol"] == "chat"


def test_the_same_task_gives_the_same_traffic(tmp_path: Path):
    anthropic = pytest.importorskip("anthropic")
    folder = TASKS["docs"].materialise(tmp_path / "work")
    bodies = []
    for _ in range(2):
        with ScriptedServer() as server:
            _anthropic_session(anthropic.Anthropic(base_url=server.url, api_key="k"), folder, stream=True)
        bodies.append([(r["body"], r["reply"]) for r in server.records])
    assert bodies[0] == bodies[1]


def test_unknown_paths_and_untagged_prompts(tmp_path: Path):
    httpx = pytest.importorskip("httpx")
    with ScriptedServer() as server:
        assert httpx.get(server.url + "/v1/models").json()["data"][0]["id"] == "scripted"
        assert httpx.post(server.url + "/v1/nothing", json={}).status_code == 404
        assert httpx.post(server.url + "/v1/messages", content=b"{not json").status_code == 400
        plain = httpx.post(
            server.url + "/v1/messages", json={"model": "m", "messages": [{"role": "user", "content": "hi"}]}
        )
        assert plain.json()["content"] == [{"type": "text", "text": "OK."}]
        counted = httpx.post(server.url + "/v1/messages/count_tokens", json={"messages": []}).json()
        assert counted["input_tokens"] >= 1
    assert [r["path"] for r in server.records][:2] == ["/v1/models", "/v1/nothing"]


@pytest.mark.parametrize("trace", [CLAUDE_TRACE, CODEX_TRACE], ids=["claude_code", "codex"])
def test_the_committed_traces(trace: Path):
    assert trace.stat().st_size < 300_000
    records = load_trace(trace)
    summary = summarise(records)
    assert summary["sessions"] == 4 and summary["requests"] == 20  # docs + code, 2 sessions each, 5 steps
    assert all(v == SCRUBBED for r in records for k, v in r["headers"].items() if "key" in k or "auth" in k)
    first = records[0]
    if trace == CLAUDE_TRACE:  # as issue 29 describes it
        body = first["body"]
        assert first["headers"]["user-agent"].startswith(f"claude-cli/{CLAUDE_CODE_VERSION}")
        names = {t["name"] for t in body["tools"]}  # 12 tools, 14 with --allowedTools naming Grep and Glob
        assert len(body["system"]) == 3 and len(names) == 14 and {"Read", "Bash", "Grep"} <= names
        assert count_marks(body) == 3
        assert json.loads(body["metadata"]["user_id"])["session_id"] == session_of(first)
        assert body["messages"][1]["role"] == "system" and body["thinking"] and body["context_management"]
        # Claude Code re-renders its history: the system-role message, marked as a block list when newest,
        # comes back as a plain string next turn (the gateway's prefix replay must undo it)
        assert {b.index for b in prefix_breaks(records)} == {1}
    else:
        assert first["path"] == "/v1/responses" and first["body"]["prompt_cache_key"] == session_of(first)
        assert CODEX_VERSION in first["headers"]["user-agent"]
        assert prefix_breaks(records) == [] and summary["max_marks"] == 0
