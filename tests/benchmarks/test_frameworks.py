"""benchmarks.frameworks: the engine probe and the summary, without an engine."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest

from benchmarks.frameworks.probe import EngineProbe, _Transport
from benchmarks.frameworks.report import markdown, summarize
from benchmarks.frameworks.workload import count_shown, fixed_answer

RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"
BODY = {"model": "m", "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "q"}]}


def _sse(*events: dict[str, Any]) -> bytes:
    return b"".join(b"data: " + json.dumps(e).encode() + b"\n\n" for e in events) + b"data: [DONE]\n\n"


STREAM = _sse(
    {"choices": [{"delta": {"role": "assistant"}}]},
    {"choices": [{"delta": {"content": "Lis"}}]},
    {
        "choices": [{"delta": {"content": "bon"}, "finish_reason": "stop"}],
        "timings": {"cache_n": 90, "prompt_n": 10, "prompt_ms": 12.5},
    },
    {
        "choices": [],
        "usage": {"prompt_tokens": 100, "completion_tokens": 2, "prompt_tokens_details": {"cached_tokens": 90}},
    },
)


def _engine(request: httpx.Request) -> httpx.Response:
    if request.method == "GET":
        return httpx.Response(200, text="ok")
    if json.loads(request.content).get("stream"):
        return httpx.Response(200, content=STREAM, headers={"content-type": "text/event-stream"})
    return httpx.Response(
        200,
        json={
            "choices": [{"message": {"content": "Lisbon"}}],
            "timings": {"cache_n": 7, "prompt_n": 3, "prompt_ms": 4.0},
        },
    )


def test_probe_records_the_request_and_what_the_engine_reported() -> None:
    probe = EngineProbe()
    with httpx.Client(transport=_Transport(probe, httpx.MockTransport(_engine))) as client:
        with client.stream("POST", "http://e/v1/chat/completions", json={**BODY, "stream": True}) as r:
            assert b"".join(r.iter_bytes()) == STREAM  # the framework sees the answer unchanged
        client.post("http://e/v1/chat/completions", json=BODY)
        client.get("http://e/health")  # not a completion: not recorded
    streamed, plain = probe.exchanges
    assert streamed.messages == BODY["messages"] and streamed.streamed and streamed.text == "Lisbon"
    assert (streamed.prompt_tokens, streamed.cached_tokens, streamed.prefilled) == (100, 90, 10)
    assert streamed.server_prompt_ms == 12.5 and streamed.ttft_s is not None and streamed.ttft_s >= 0
    assert not plain.streamed and plain.ttft_s is None and plain.text == "Lisbon"
    assert (plain.prompt_tokens, plain.cached_tokens) == (10, 7)  # llama.cpp timings fallback


async def test_async_probe() -> None:
    probe = EngineProbe()
    transport = _Transport(probe, httpx.MockTransport(_engine))
    async with httpx.AsyncClient(transport=transport) as client:
        r = await client.post("http://e/v1/chat/completions", json={**BODY, "stream": True})
        assert r.content == STREAM
    assert probe.last.cached_tokens == 90


def _rec(arm: str, chat: int, turn: int, prefilled: int, ttft: float) -> dict[str, Any]:
    return {
        "framework": "fw",
        "answers": "fixed",
        "arm": arm,
        "chat": chat,
        "turn": turn,
        "prompt_tokens": 1000,
        "cached_tokens": 1000 - prefilled,
        "prefilled": prefilled,
        "server_prompt_ms": ttft * 1000,
        "ttft_s": ttft,
        "memories": 10,
        "pointers": 0,
    }


def test_summary_pairs_arms_by_chat_and_turn() -> None:
    records = [_rec("mem0", c, t, 300 * t, 0.3 * t) for c in range(2) for t in (1, 2)]
    records += [_rec("cp-append", c, t, 300, 0.3) for c in range(2) for t in (1, 2)]
    (s,) = summarize(records, turns=2)
    assert s["prefilled_per_turn"] == {"mem0": [300.0, 600.0], "cp-append": [300.0, 300.0]}
    assert s["prefill_ratio_last_turn"] == pytest.approx(2.0)
    assert s["prefill_ratio_turn1"] == pytest.approx(1.0)  # turn 1 and the whole chat next to the last turn
    assert s["prefill_ratio_chat"] == pytest.approx(1.5) and s["prefilled_total"] == {"mem0": 1800, "cp-append": 1200}
    assert s["ttft_ratio"]["ratio_of_sums"] == pytest.approx(1.5) and s["ttft_ratio"]["median"] == pytest.approx(1.5)
    meta = {
        "turns": 2,
        "model": "m",
        "conversation": 0,
        "chats": 2,
        "top_k": 10,
        "engine": "e",
        "max_tokens": 8,
        "machine": "test",
    }
    assert "| fw | fixed | cp-append | 300 / 300 (1.00x) | 600 / 300 (2.00x) | 1,800 / 1,200 (1.50x) |" in markdown(
        [s], meta
    )


def test_shown_memories_and_pointers_are_counted_in_both_label_styles() -> None:
    numbered = "Context:\n1 a\n2 b\n\nAlso relevant, shown before: turn 1 items 2, 3; turn 2 item 1.\n\nQuestion: q"
    assert count_shown(numbered) == (2, 3)
    paper = (
        "[Doc 1] a\n\nPlease refer to [Doc 2] in the previous conversation (turn 1).\n"
        "[Doc 1] above has the same content."
    )
    assert count_shown(paper) == (1, 2)


def test_fixed_answer_is_100_to_150_words() -> None:
    assert 100 <= len(fixed_answer("Where does Alice live?").split()) <= 150


def test_report_re_renders_the_committed_run(tmp_path: Path) -> None:
    """``--report``: the summary and the table of docs/results/frameworks.json come back from its records."""
    from benchmarks.frameworks.cli import main

    assert main(["--report", str(RESULTS / "frameworks.json"), "--out", str(tmp_path)]) == 0
    committed = json.loads((RESULTS / "frameworks.json").read_text(encoding="utf-8"))
    assert json.loads((tmp_path / "frameworks.json").read_text(encoding="utf-8"))["summary"] == committed["summary"]
    table = (tmp_path / "frameworks.md").read_text(encoding="utf-8")
    assert table == (RESULTS / "frameworks.md").read_text(encoding="utf-8")


def test_report_re_renders_a_partial_run(tmp_path: Path) -> None:
    """A run that crashed leaves frameworks.partial.json (its meta so far and the records measured): ``--report``
    renders it although it has no machine description."""
    from benchmarks.frameworks.cli import main

    committed = json.loads((RESULTS / "frameworks.json").read_text(encoding="utf-8"))
    meta = {k: v for k, v in committed["meta"].items() if k not in ("command", "machine", "git_commit")}
    partial = tmp_path / "frameworks.partial.json"
    partial.write_text(json.dumps({"meta": {**meta, "partial": True}, "records": committed["records"]}))
    assert main(["--report", str(partial), "--out", str(tmp_path / "out")]) == 0
    lines = (RESULTS / "frameworks.md").read_text(encoding="utf-8").splitlines()
    row = next(line for line in lines if line.startswith("| langgraph | fixed | cp-append |"))
    turn1 = "|".join(row.split("|")[:5]) + "|"  # framework, answers, arm, turn 1 (e.g. "340 / 339 (1.00x)")
    assert turn1 in (tmp_path / "out" / "frameworks.md").read_text(encoding="utf-8")
