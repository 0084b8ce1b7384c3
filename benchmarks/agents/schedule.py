"""When each request of a replayed trace goes out: at the recorded concurrency, or one at a time.

At the recorded concurrency (every record carries ``t_sent`` and ``t_answered``,
:func:`benchmarks.agents.trace.has_timings`) the sessions (users: :func:`benchmarks.agents.trace.session_of`)
run side by side, and a request

- waits for its *predecessors*: the requests of its own session that the recording had answered before it was
  sent (the conversation's earlier turns, whose answers it holds), as the arm answers them;
- goes out no earlier than its recorded offset from the first request (:attr:`Slot.offset`);
- keeps its recorded think time: it goes out no earlier than the last predecessor's answer through the arm plus
  the gap between that answer and this send in the recording (:attr:`Slot.think`: the harness running its
  tools).

So a slower arm or engine delays a session's later turns, never reorders them, and sessions overlap as they
did. Requests of one session that overlapped in the recording (a side request) overlap again.

Serially (:attr:`Concurrency.SERIAL`, and the fallback for a trace without timing) every request waits for the
one before it in recorded order, with no offset and no think time.

:func:`slots_for` makes the :class:`Slot` of each request, :func:`due` says when a slot may go given the arm's answers
so far (a pure function), and :func:`run_slots` sends them (one thread per request in flight) and returns each
request's :class:`Window`.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from enum import Enum
from typing import Any

from benchmarks.agents.trace import has_timings, session_of

__all__ = ["Concurrency", "Slot", "Window", "due", "slots_for", "run_slots"]

#: the most requests :func:`run_slots` has in flight at once
MAX_IN_FLIGHT = 64


class Concurrency(Enum):
    """How a trace is replayed: at its recorded concurrency, or one request at a time in recorded order."""

    RECORDED = "recorded"
    SERIAL = "serial"


@dataclass(frozen=True)
class Slot:
    """Request ``index`` (its position in the replayed records): no earlier than ``offset`` seconds after the
    replay started, nor before every request of ``after`` was answered, plus ``think`` seconds after the last
    of those answers."""

    index: int
    offset: float = 0.0
    after: tuple[int, ...] = ()
    think: float = 0.0


@dataclass(frozen=True)
class Window:
    """Request ``index`` went out at ``sent`` and its answer was read whole at ``answered`` (the clock's
    seconds)."""

    index: int
    sent: float
    answered: float


def _serial(count: int) -> list[Slot]:
    return [Slot(i, after=(i - 1,) if i else ()) for i in range(count)]


def slots_for(records: Sequence[Mapping[str, Any]], concurrency: Concurrency, *, speed: float = 1.0) -> list[Slot]:
    """The slot of each record (in order). :attr:`Concurrency.RECORDED` needs every record's timing; a trace
    without it raises ValueError (check :func:`benchmarks.agents.trace.has_timings` first). ``speed`` divides
    the recorded offsets and think times (1: as recorded; 4: the same order of events in a quarter of the time,
    where the arm answers as fast as the recording server did)."""
    if speed <= 0:
        raise ValueError(f"speed must be > 0, got {speed}")
    if concurrency is Concurrency.SERIAL:
        return _serial(len(records))
    if not has_timings(records):
        raise ValueError("the trace holds no t_sent/t_answered: it can only be replayed serially")
    start = min(float(r["t_sent"]) for r in records)
    sessions = [session_of(r) for r in records]
    slots = []
    for i, record in enumerate(records):
        sent = float(record["t_sent"])
        after = tuple(
            j
            for j in range(len(records))
            if j != i and sessions[j] == sessions[i] and float(records[j]["t_answered"]) <= sent
        )
        last = max((float(records[j]["t_answered"]) for j in after), default=sent)
        slots.append(Slot(i, round((sent - start) / speed, 4), after, round(max(0.0, sent - last) / speed, 4)))
    return slots


def due(slot: Slot, answered: Mapping[int, float]) -> float | None:
    """When ``slot`` may go, in seconds since the replay started, given when the arm answered each request so
    far (``answered``: index -> seconds); None while a predecessor is unanswered."""
    if any(j not in answered for j in slot.after):
        return None
    last = max((answered[j] for j in slot.after), default=None)
    return slot.offset if last is None else max(slot.offset, last + slot.think)


class _Runner:
    """One :func:`run_slots`: the slots still waiting, the answers so far, the windows."""

    def __init__(self, slots: Sequence[Slot], send: Callable[[int], object], clock: Callable[[], float]) -> None:
        indices = {s.index for s in slots}
        missing = sorted({j for s in slots for j in s.after} - indices)
        if missing:
            raise ValueError(f"slots wait for requests that are not replayed: {missing}")
        self.waiting = sorted(slots, key=lambda s: (s.offset, s.index))
        self.send, self.clock = send, clock
        self.start = clock()
        self.answered: dict[int, float] = {}
        self.windows: dict[int, Window] = {}
        self.errors: list[BaseException] = []
        self.done: queue.Queue[Window] = queue.Queue()
        self.running = 0

    def now(self) -> float:
        return self.clock() - self.start

    def go(self, index: int) -> None:
        sent = self.clock()
        try:
            self.send(index)
        except BaseException as exc:  # re-raised by run_slots() once every request is done
            self.errors.append(exc)
        finally:
            self.done.put(Window(index, sent, self.clock()))

    def launch(self, pool: ThreadPoolExecutor) -> float | None:
        """Start every slot that is due; returns the seconds until the next one is (None: waits for answers)."""
        now, later, nearest = self.now(), [], None
        for slot in self.waiting:
            when = due(slot, self.answered)
            if when is not None and when <= now:
                self.running += 1
                pool.submit(self.go, slot.index)
                continue
            later.append(slot)
            if when is not None:
                nearest = when if nearest is None else min(nearest, when)
        self.waiting = later
        return None if nearest is None else max(0.0, nearest - self.now())

    def collect(self, timeout: float | None) -> None:
        """Wait up to ``timeout`` seconds (None: until one comes) for an answer; take every one that came."""
        try:
            window = self.done.get(timeout=timeout)
        except queue.Empty:
            return
        while True:
            self.windows[window.index] = window
            self.answered[window.index] = window.answered - self.start
            self.running -= 1
            try:
                window = self.done.get_nowait()
            except queue.Empty:
                return


def run_slots(
    slots: Sequence[Slot], send: Callable[[int], object], *, clock: Callable[[], float] = time.monotonic
) -> list[Window]:
    """Call ``send(index)`` for every slot as :func:`due` allows (each in a thread of its own, up to
    :data:`MAX_IN_FLIGHT` at once); returns each request's :class:`Window`, in slot order. An exception a
    ``send`` raised is raised again once every request is done."""
    runner = _Runner(slots, send, clock)
    with ThreadPoolExecutor(max_workers=max(1, min(MAX_IN_FLIGHT, len(slots)))) as pool:
        while runner.waiting or runner.running:
            wait = runner.launch(pool)
            if wait is None and not runner.running:
                raise RuntimeError(f"no request can go: {[s.index for s in runner.waiting]} wait on each other")
            runner.collect(wait)
    if runner.errors:
        raise runner.errors[0]
    return [runner.windows[s.index] for s in slots]
