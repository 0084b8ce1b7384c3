"""Claude Code for real through the gateway: ``claude -p`` (2.1.328, from scripts/setup_harnesses.sh) runs the
scripted tasks against the gateway (its own CLI, ``python -m cp_memory.gateway --upstream URL --port 0
--upstream-kind anthropic``) in front of the scripted Anthropic-shaped upstream
(:mod:`benchmarks.agents.scripted`), which asks for Read / Bash calls so Claude Code runs its real tools in a
scratch folder and sends its real follow-ups.

What the upstream received is the evidence: every request's earlier messages serialise exactly as the same
conversation sent them before (cache marks aside), never more than 4 ``cache_control`` marks, the client's key
forwarded. Two sessions run at once. Without Claude Code (or the gateway extra) the tests skip locally and
fail in strict CI mode.
"""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from benchmarks.agents.harnesses import HarnessRun, harness_binary, run_claude
from benchmarks.agents.processes import gateway_process
from benchmarks.agents.scripted import ScriptedServer
from benchmarks.agents.tasks import TASKS, Intent, prompt_for
from benchmarks.agents.trace import SCRUBBED, count_marks, prefix_breaks, session_of
from tests.support import missing

ANTHROPIC_MARK_LIMIT = 4


@pytest.fixture(scope="module")
def claude() -> Path:
    binary = harness_binary("claude")
    if binary is None:
        missing("Claude Code is not installed (scripts/setup_harnesses.sh puts it in ~/.cache/cp_memory/npm)")
    for module in ("starlette", "uvicorn", "prometheus_client"):
        try:
            __import__(module)
        except ImportError:
            missing(f"the gateway extra is not installed ({module})")
    return binary


def _run(task: str, url: str, tmp: Path) -> HarnessRun:
    folder = TASKS[task].materialise(tmp / task / "work")
    return run_claude(prompt_for(TASKS[task], folder), folder, url, tmp / task / "home", timeout=300)


def _answer(task: str) -> str:
    return TASKS[task].steps[-1].arg


def _tool_results(records: list[dict]) -> list[str]:
    return [
        json.dumps(block.get("content"))
        for r in records
        for m in r["body"]["messages"]
        if m["role"] == "user" and isinstance(m["content"], list)
        for block in m["content"]
        if isinstance(block, dict) and block.get("type") == "tool_result"
    ]


def test_claude_code_through_the_gateway_keeps_every_prefix_byte_stable(claude: Path, tmp_path: Path):
    tasks = ("docs", "code")
    with ScriptedServer(trace=tmp_path / "upstream.jsonl") as upstream:
        with gateway_process(upstream.url, "--upstream-kind", "anthropic") as gateway:
            with ThreadPoolExecutor(max_workers=len(tasks)) as pool:
                runs = dict(zip(tasks, pool.map(lambda t: _run(t, gateway.url, tmp_path), tasks), strict=True))
    for task, run in runs.items():  # both sessions finished the task with the scripted answer
        assert run.ok, f"{task}: claude exited {run.returncode}: {run.stderr[-2000:]}"
        assert run.result is not None and run.result["result"] == _answer(task)
    records = [r for r in upstream.records if r["protocol"] == "anthropic"]
    sessions = {session_of(r) for r in records}
    assert len(sessions) == 2  # two Claude Code sessions, told apart by X-Claude-Code-Session-Id
    steps = sum(len(TASKS[t].steps) for t in tasks)
    assert len(records) >= steps  # one request per scripted step at least
    # Claude Code really ran its tools in the scratch folders: the files' text came back as tool results
    results = "\n".join(_tool_results(records))
    assert "DECISION: the harbour budget is 41,000." in results and "def median" in results
    assert any(s.intent is Intent.BASH for s in TASKS["code"].steps) and '"3"' in results  # Bash ran python3
    # the invariant: what the upstream received never changed an earlier message of its conversation
    assert prefix_breaks(records) == [], prefix_breaks(records)[:1]
    assert max(count_marks(r["body"]) for r in records) <= ANTHROPIC_MARK_LIMIT
    # the client's key was forwarded (the trace keeps it scrubbed)
    assert all(r["headers"].get("x-api-key") == SCRUBBED for r in records)
    assert "sk-ant-scripted-placeholder" not in (tmp_path / "upstream.jsonl").read_text(encoding="utf-8")


def test_claude_code_directly_against_the_scripted_upstream(claude: Path, tmp_path: Path):
    """The same task without the gateway: Claude Code's own traffic (what the gateway starts from)."""
    with ScriptedServer() as upstream:
        run = _run("docs", upstream.url, tmp_path)
    assert run.ok, run.stderr[-2000:]
    assert run.result is not None and run.result["result"] == _answer("docs")
    records = upstream.records
    assert len(records) == len(TASKS["docs"].steps)
    first = records[0]
    assert first["path"].startswith("/v1/messages") and first["body"]["stream"] is True
    assert first["headers"]["x-claude-code-session-id"] == session_of(first)
    assert 1 <= count_marks(first["body"]) <= ANTHROPIC_MARK_LIMIT
    assert [len(r["body"]["messages"]) for r in records] == [2 + 2 * i for i in range(len(records))]
