"""The document-analysis suites (the paper's claw-tasks and our generated one) and multi-turn sessions on the
scripted model: each user message names its turn, the server plays that turn's steps, a harness resumes the
session between turns. OpenClaw — the paper's own agent — runs a two-turn session end to end where installed."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from benchmarks.agents.documents import (
    CLAW_FOLDER,
    ClawTasksNotFound,
    claw_tasks,
    find_claw_tasks,
    generated_documents,
)
from benchmarks.agents.harnesses import harness_binary, run_openclaw
from benchmarks.agents.record import pick
from benchmarks.agents.scripted import ScriptedServer
from benchmarks.agents.tasks import Intent, Step, Task, TaskTurn, find_turn, prompt_for
from benchmarks.agents.trace import SCRUBBED


def _claw() -> Path:
    try:
        return find_claw_tasks()
    except ClawTasksNotFound as exc:
        pytest.skip(str(exc))
        raise AssertionError("unreachable") from exc


def test_claw_tasks_are_the_papers_60_document_tasks_of_245_turns() -> None:
    tasks = claw_tasks(_claw())
    assert len(tasks) == 60 and sum(len(t.turns) for t in tasks.values()) == 245
    s01 = tasks["claw-s01_commercial_terms"]
    assert [s.intent for s in s01.turns[0].steps] == [Intent.BASH, Intent.ANSWER]  # "List all files ..."
    assert [(s.intent, s.arg) for s in s01.turns[1].steps[:-1]] == [
        (Intent.READ, f"{CLAW_FOLDER}/contract_alpha_cloud.txt")
    ]
    files = {rel for t in tasks.values() for rel, _ in t.files}
    assert len(files) == 22
    for task in tasks.values():  # every file a turn reads is in the session's folder
        assert all(s.arg in files for s in task.steps if s.intent is Intent.READ)


def test_claw_tasks_check_the_manifest_and_say_where_to_get_them(tmp_path: Path) -> None:
    copy = tmp_path / "claw"
    shutil.copytree(_claw(), copy)
    (copy / "workspace" / "nda_001_provider_b.txt").write_text("changed", encoding="utf-8")
    with pytest.raises(ValueError, match="MANIFEST"):
        claw_tasks(copy)
    with pytest.raises(ClawTasksNotFound, match="EfficientContext/ClawTasks"):
        find_claw_tasks(tmp_path / "nowhere")


def test_the_generated_suite_reads_rereads_and_shares_documents() -> None:
    suite = generated_documents()
    assert suite == generated_documents()  # the same seed gives the same suite
    assert len(suite) == 60
    docs = {rel: text for t in suite.values() for rel, text in t.files}
    assert len(docs) == 22
    assert all(1_500 <= len(text) / 4 <= 4_000 for text in docs.values())  # 1.5-4K tokens (bytes / 4)
    for task in suite.values():
        assert 10 <= len(task.steps) <= 30  # requests per session
        reads = [s.arg for s in task.steps if s.intent is Intent.READ and s.offset is None]
        assert len(reads) > len(set(reads))  # a document is read again after follow-ups
        assert any(s.offset is not None for s in task.steps)  # and part of one
    users = {t.turns[0].instruction.split(")")[0] for t in suite.values()}
    assert len(users) == 6
    read_by = {rel: sum(rel in dict(t.files) for t in suite.values()) for rel in docs}
    assert min(read_by.values()) >= 2  # every document recurs across sessions
    texts = list(docs.values())
    disclaimer = texts[0].split("\n\n")[2]
    assert sum(disclaimer in t for t in texts) >= 7  # a kind's disclaimer, verbatim in each of its documents


def test_pick_spreads_over_the_suite() -> None:
    book = generated_documents()
    assert pick(book, 4) == ["gen-docs-00", "gen-docs-15", "gen-docs-30", "gen-docs-45"]
    assert pick(book, None) == list(book) and pick(book, 100) == list(book)
    with pytest.raises(ValueError):
        pick(book, 0)


def _two_turn_task() -> Task:
    files = (("docs/a.md", "alpha line 1\nalpha line 2\nalpha line 3\n"), ("docs/b.md", "beta\n"))
    turns = (
        TaskTurn(
            "Read a and b.", (Step(Intent.READ, "docs/a.md"), Step(Intent.READ, "docs/b.md"), Step(Intent.ANSWER, "A1"))
        ),
        TaskTurn(
            "Lines 2-3 of a again.", (Step(Intent.READ, "docs/a.md", offset=2, limit=2), Step(Intent.ANSWER, "A2"))
        ),
    )
    return Task("two-turns", turns, files)


def test_a_tag_names_its_turn_and_the_newest_one_counts(tmp_path: Path) -> None:
    task = _two_turn_task()
    book = {task.name: task}
    first, second = prompt_for(task, tmp_path), prompt_for(task, tmp_path, 1)
    assert "turn:" not in first and "turn:2" in second  # turn 1's tag is the single-message tasks' tag
    tag = find_turn(first + " ... " + second, book)
    assert tag is not None and tag.turn == 1 and tag.folder == tmp_path
    assert find_turn(second) is None  # a task the book does not hold names nothing


def _read(arguments: dict[str, Any]) -> str:
    """What OpenClaw's ``read`` tool does with the scripted call (lines ``offset`` .. ``offset + limit - 1``)."""
    lines = Path(arguments["path"]).read_text(encoding="utf-8").splitlines(keepends=True)
    first = int(arguments.get("offset") or 1) - 1
    limit = arguments.get("limit")
    return "".join(lines[first : first + int(limit)] if limit else lines[first:])


def test_a_chat_session_of_two_turns_plays_each_turns_steps(tmp_path: Path) -> None:
    openai = pytest.importorskip("openai")
    task = _two_turn_task()
    folder = task.materialise(tmp_path / "work")
    tools = [
        {"type": "function", "function": {"name": "read", "parameters": {"type": "object", "properties": {}}}},
        {"type": "function", "function": {"name": "exec", "parameters": {"type": "object", "properties": {}}}},
    ]
    with ScriptedServer(tasks={task.name: task}) as server:
        client = openai.OpenAI(base_url=f"{server.url}/v1", api_key="sk-test")
        messages: list[Any] = []
        answers, calls = [], []
        for turn in range(2):
            messages.append({"role": "user", "content": prompt_for(task, folder, turn)})
            for _ in range(5):
                reply = client.chat.completions.create(model="scripted", messages=messages, tools=tools)
                message = reply.choices[0].message
                messages.append(message.model_dump(exclude_none=True))
                if not message.tool_calls:
                    answers.append(message.content)
                    break
                for call in message.tool_calls:
                    arguments = json.loads(call.function.arguments)
                    calls.append((call.function.name, arguments))
                    messages.append({"role": "tool", "tool_call_id": call.id, "content": _read(arguments)})
    assert answers == ["A1", "A2"]
    assert [(n, Path(a["path"]).name, a.get("offset")) for n, a in calls] == [
        ("read", "a.md", None),
        ("read", "b.md", None),
        ("read", "a.md", 2),
    ]
    assert calls[-1][1]["limit"] == 2 and _read(calls[-1][1]) == "alpha line 2\nalpha line 3\n"
    assert len(server.records) == 5  # read, read, answer; read part, answer


@pytest.mark.slow
def test_openclaw_resumes_its_session_and_runs_its_own_read_tool(tmp_path: Path) -> None:
    """The paper's agent, for real: two turns of one OpenClaw session (``openclaw agent --local``) against the
    scripted model through its ``sglang`` provider (Chat Completions); its own ``read`` tool reads the files."""
    if harness_binary("openclaw") is None:
        pytest.skip("openclaw not installed: run scripts/setup_harnesses.sh")
    try:
        subprocess.run([str(harness_binary("openclaw")), "--version"], capture_output=True, timeout=60, check=False)
    except OSError as exc:
        pytest.skip(f"openclaw does not start here: {exc}")
    task = _two_turn_task()
    folder = task.materialise(tmp_path / "work")
    with ScriptedServer(tasks={task.name: task}) as server:
        for turn in range(2):
            run = run_openclaw(prompt_for(task, folder, turn), folder, server.url, tmp_path / "home", resume=turn > 0)
            assert run.ok, run.stderr[-2000:]
    generations = [r for r in server.records if r["path"].endswith("/chat/completions")]
    assert len(generations) == 5
    last = generations[-1]["body"]["messages"]
    tool_texts = [json.dumps(m["content"]) for m in last if m["role"] == "tool"]
    assert len(tool_texts) == 3  # the session kept turn 1's two reads and added turn 2's
    assert "alpha line 1" in tool_texts[0] and "beta" in tool_texts[1]
    assert "alpha line 2" in tool_texts[2] and "alpha line 1" not in tool_texts[2]  # the part asked for
    assert all(r["headers"].get("authorization") in (None, SCRUBBED) for r in generations)


def _chat_record(messages: list[Any]) -> dict[str, Any]:
    return {
        "path": "/v1/chat/completions",
        "protocol": "chat",
        "headers": {},
        "body": {"model": "m", "messages": messages},
    }


def test_repetition_counts_rereads_and_shared_paragraphs_once_per_session() -> None:
    from benchmarks.agents.repetition import MIN_LINE_CHARS, repetition
    from benchmarks.agents.trace import session_of

    shared = "S" * MIN_LINE_CHARS
    a, b = f"{shared}\nalpha {'a' * MIN_LINE_CHARS}\n", f"beta\n{shared}\n"
    call = {"role": "assistant", "content": None}
    history = [{"role": "user", "content": "[task:x dir:/t] read"}]
    steps = [*history, call, {"role": "tool", "content": a}, call, {"role": "tool", "content": b}]
    steps += [call, {"role": "tool", "content": a}]  # a re-read
    records = [_chat_record(steps[:3]), _chat_record(steps[:5]), _chat_record(steps)]
    other = _chat_record([{"role": "user", "content": "another session"}])
    assert len({session_of(r) for r in records}) == 1 and session_of(other) != session_of(records[0])
    rep = repetition(records)
    assert rep.sessions == 1 and rep.tool_results == 3
    assert rep.reread_chars == len(a) and rep.repeated_line_chars == len(shared) + 1
    # request 2 carries b's repeated line, request 3 that and the re-read
    assert rep.repeated_prompt_chars == (len(shared) + 1) * 2 + len(a)
    assert rep.as_dict()["repeated_share_of_tool_results"] == round(rep.repeated_chars / (2 * len(a) + len(b)), 4)
