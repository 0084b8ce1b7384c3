"""Replaying a trace at its recorded concurrency: the recorder keeps when each request arrived and when its
answer was written, the scheduler sends the sessions side by side (each turn after its own session's earlier
turns were answered, no earlier than its recorded offset, with its recorded think time), a trace recorded
without timing is replayed one request at a time and says so, and the tap's calls find their requests."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from benchmarks.agents.bench import concurrency_for
from benchmarks.agents.replay import attribute
from benchmarks.agents.schedule import Concurrency, Slot, Window, due, run_slots, slots_for
from benchmarks.agents.scripted import ScriptedServer
from benchmarks.agents.tap import Tapped
from benchmarks.agents.tasks import TASKS, prompt_for
from benchmarks.agents.trace import TraceWriter, has_timings, in_flight, load_trace, summarise
from cp_memory.providers.usage import CacheUsage

TRACES = Path(__file__).resolve().parents[1] / "gateway" / "traces"
OLD_CLAUDE = TRACES / "claude_code_2.1.328_docs_code.jsonl.xz"


def _record(seq: int, session: str, sent: float, answered: float) -> dict[str, Any]:
    headers = {"session_id": session}
    return {"seq": seq, "headers": headers, "body": {"input": []}, "t_sent": sent, "t_answered": answered}


# two users: alice's second turn follows her first answer by 0.5 s of tool work; bob starts 0.2 s in
ALICE_BOB = [
    _record(0, "alice", 1.0, 1.3),
    _record(1, "bob", 1.2, 1.4),
    _record(2, "alice", 1.8, 2.0),
    _record(3, "bob", 1.9, 2.1),
]


def test_the_recorder_keeps_when_each_request_arrived_and_was_answered(tmp_path: Path) -> None:
    folder = TASKS["docs"].materialise(tmp_path / "work")
    body = {"model": "m", "max_tokens": 8, "messages": [{"role": "user", "content": prompt_for(TASKS["docs"], folder)}]}
    with ScriptedServer(trace=tmp_path / "t.jsonl", answer_delay=0.05) as server:
        for _ in range(2):
            httpx.post(server.url + "/v1/messages", json=body, headers={"session_id": "s"}).raise_for_status()
    records = load_trace(tmp_path / "t.jsonl")
    assert [r["seq"] for r in records] == [0, 1] and has_timings(records)
    first, second = records
    assert 0 <= first["t_sent"] and first["t_sent"] + 0.05 <= first["t_answered"] <= second["t_sent"]
    assert server.records == records
    assert not has_timings(load_trace(OLD_CLAUDE))  # recorded before the timing was stored


def test_the_trace_file_holds_records_in_arrival_order_whatever_order_they_finish(tmp_path: Path) -> None:
    writer = TraceWriter(tmp_path / "t.jsonl")
    first, second = writer.begin(), writer.begin()
    writer.finish(second, {"path": "/b"})  # answered first: held back until the earlier one is complete
    assert (tmp_path / "t.jsonl").read_text() == ""
    writer.finish(first, {"path": "/a"})
    writer.close()
    assert [(r["seq"], r["path"]) for r in load_trace(tmp_path / "t.jsonl")] == [(0, "/a"), (1, "/b")]


def test_each_turn_waits_for_its_own_sessions_earlier_turns_with_its_think_time() -> None:
    slots = slots_for(ALICE_BOB, Concurrency.RECORDED)
    assert slots == [
        Slot(0, offset=0.0),
        Slot(1, offset=0.2),
        Slot(2, offset=0.8, after=(0,), think=0.5),
        Slot(3, offset=0.9, after=(1,), think=0.5),
    ]
    assert due(slots[2], {}) is None  # alice's first answer is not in yet
    assert due(slots[2], {0: 0.1}) == 0.8  # a fast arm: the recorded offset
    assert due(slots[2], {0: 2.0}) == 2.5  # a slow arm: its answer plus alice's think time
    assert slots_for(ALICE_BOB, Concurrency.RECORDED, speed=2)[3] == Slot(3, offset=0.45, after=(1,), think=0.25)


def test_serially_every_request_waits_for_the_one_before_and_a_trace_without_timing_falls_back() -> None:
    serial = [Slot(0), Slot(1, after=(0,)), Slot(2, after=(1,)), Slot(3, after=(2,))]
    assert slots_for(ALICE_BOB, Concurrency.SERIAL) == serial
    old = load_trace(OLD_CLAUDE)
    with pytest.raises(ValueError, match="serially"):
        slots_for(old, Concurrency.RECORDED)
    mode, described = concurrency_for(old, None)
    assert mode is Concurrency.SERIAL and "no send/answer times" in described["reason"]
    assert concurrency_for(ALICE_BOB, None)[0] is Concurrency.RECORDED
    assert concurrency_for(ALICE_BOB, "serial")[0] is Concurrency.SERIAL
    assert [c.value for c in Concurrency] == ["recorded", "serial"]  # --concurrency's choices


class FakeArm:
    """Answers at once, except that alice's first turn is held until bob's first turn has arrived: the
    sessions must be in flight together. Logs every arrival and answer."""

    def __init__(self) -> None:
        self.log: list[tuple[str, int]] = []
        self.lock = threading.Lock()
        self.bob_arrived = threading.Event()
        self.overlapped = False

    def send(self, index: int) -> None:
        with self.lock:
            self.log.append(("sent", index))
        if index == 1:
            self.bob_arrived.set()
        if index == 0:
            self.overlapped = self.bob_arrived.wait(timeout=10)
        with self.lock:
            self.log.append(("answered", index))


def test_sessions_run_side_by_side_and_a_turn_never_overtakes_its_sessions_answer() -> None:
    arm = FakeArm()
    slots = slots_for(ALICE_BOB, Concurrency.RECORDED, speed=20)  # offsets of 10-45 ms
    before = time.monotonic()
    windows = run_slots(slots, arm.send)
    assert arm.overlapped  # bob's first turn went out while alice's first was in flight
    assert arm.log.index(("sent", 2)) > arm.log.index(("answered", 0))
    assert arm.log.index(("sent", 3)) > arm.log.index(("answered", 1))
    for slot, window in zip(slots, windows, strict=True):
        assert window.sent >= before + slot.offset  # never before its recorded offset
    assert windows[2].sent >= windows[0].answered + slots[2].think  # alice's think time kept


def test_serially_no_two_requests_are_in_flight() -> None:
    log: list[tuple[str, int]] = []
    windows = run_slots(slots_for(ALICE_BOB, Concurrency.SERIAL), lambda i: log.extend([("sent", i), ("answered", i)]))
    assert log == [(e, i) for i in range(4) for e in ("sent", "answered")]
    assert in_flight((w.sent, w.answered) for w in windows)["max"] == 1


def test_a_failing_request_is_raised_once_the_others_are_done() -> None:
    sent: list[int] = []

    def send(i: int) -> None:
        sent.append(i)
        if i == 1:
            raise RuntimeError("bob's arm failed")

    with pytest.raises(RuntimeError, match="bob's arm failed"):
        run_slots(slots_for(ALICE_BOB, Concurrency.RECORDED, speed=50), send)
    assert sorted(sent) == [0, 1, 2, 3]


def test_in_flight_counts_overlaps_and_their_mean_over_the_span() -> None:
    assert in_flight([(0.0, 2.0), (1.0, 3.0), (3.0, 4.0)]) == {"max": 2, "mean": 1.25}
    assert in_flight([]) == {"max": 0, "mean": 0.0}


def _call(arrived: float, session: str) -> Tapped:
    body = b'{"input": [], "prompt_cache_key": "%s"}' % session.encode()
    return Tapped("POST", "/v1/responses", body, 200, CacheUsage(input_tokens=10), arrived)


def test_the_taps_calls_find_their_requests_by_time_then_by_session() -> None:
    windows = [Window(0, 0.0, 1.0), Window(1, 0.5, 1.2), Window(2, 1.5, 2.5), Window(3, 1.8, 3.0)]
    calls = [_call(0.2, "alice"), _call(0.6, "bob"), _call(1.9, "bob"), _call(2.0, "alice")]
    calls += [_call(2.2, "zed"), _call(5.0, "bob")]
    matched, how = attribute(ALICE_BOB, windows, calls)
    assert [[c.arrived for c in m] for m in matched] == [[0.2], [0.6], [2.0, 2.2], [1.9]]
    assert (how.ambiguous, how.unmatched) == (1, 1)  # zed's: two in flight, neither his (the earliest); 5.0: none


def _chat(session: str | None, opening: str, arrived: float = 0.0) -> tuple[dict[str, Any], Tapped]:
    body: dict[str, Any] = {"messages": [{"role": "system", "content": "sys"}, {"role": "user", "content": opening}]}
    sent = dict(body, prompt_cache_key="gw-" + opening[-1]) if session is None else body
    headers = {} if session is None else {"session_id": session}
    record = {"headers": headers, "body": body}
    usage = CacheUsage(input_tokens=1)
    call = Tapped("POST", "/v1/chat/completions", json.dumps(sent).encode(), 200, usage, arrived, headers)
    return record, call


def test_a_call_without_the_requests_session_is_matched_by_the_opening_of_its_first_user_message() -> None:
    """OpenClaw names no session and the gateway adds a ``prompt_cache_key`` of its own: the opening tells the
    two conversations apart."""
    (one, call_one), (two, call_two) = _chat(None, "[task a] read report A"), _chat(None, "[task b] read report B")
    windows = [Window(0, 0.0, 1.0), Window(1, 0.0, 1.0)]
    matched, how = attribute([one, two], windows, [call_two, call_one])
    assert [m == [c] for m, c in zip(matched, (call_one, call_two), strict=True)] == [True, True]
    assert how.ambiguous == 0


def test_the_session_wins_over_an_opening_that_every_conversation_shares() -> None:
    """Claude Code opens each conversation with the same words; its session id is what tells them apart."""
    opening = "<system-reminder> the same words"
    (alice, call_alice), (bob, call_bob) = _chat("alice", opening), _chat("bob", opening)
    windows = [Window(0, 0.0, 1.0), Window(1, 0.0, 1.0)]
    matched, how = attribute([alice, bob], windows, [call_bob, call_alice])
    assert matched == [[call_alice], [call_bob]] and how.ambiguous == 0


@pytest.mark.parametrize("users", [4, 6])
@pytest.mark.parametrize("harness", ["claude_code_2.1.328", "codex_0.169.0"])
def test_the_committed_concurrent_traces_hold_sessions_that_overlapped(harness: str, users: int) -> None:
    path = TRACES / f"{harness}_docs_code_concurrent{'' if users == 4 else f'_{users}users'}.jsonl.xz"
    assert path.stat().st_size < 100_000
    records = load_trace(path)
    summary = summarise(records)
    assert summary["requests"] == 5 * users and summary["sessions"] == users and has_timings(records)
    assert [r["seq"] for r in records] == list(range(5 * users))
    assert all(r["t_sent"] < r["t_answered"] for r in records)
    assert summary["in_flight"]["max"] >= 4  # sessions were in flight together
    # the same traffic as the serial recording, request for request (the same tasks give the same bodies)
    serial = summarise(load_trace(TRACES / f"{harness}_docs_code.jsonl.xz"))
    assert {k: summary["body_bytes"][k] for k in ("min", "max")} == {k: serial["body_bytes"][k] for k in ("min", "max")}
