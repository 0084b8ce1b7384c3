"""The scripted tasks: what the scripted model asks the harness to do, step by step, in a scratch folder.

A task is one or more :class:`TaskTurn` (a user message and the :class:`Step` intents that answer it: read a file
or part of one, grep a pattern, run a command, answer). The scripted server (:mod:`benchmarks.agents.scripted`)
turns the intent of the current step into the tool call of the harness in front of it (Claude Code's ``Read`` /
``Grep`` / ``Bash``, Codex's shell tool, OpenClaw's ``read`` / ``exec``, ...), so the harness executes its real
tools and sends its real follow-up. The turn played is the last user message's tag; the step is the number of
tool results after it: the server keeps no state and the same task always gives the same traffic.

Each user message names its task, turn and folder (``[task:docs dir:/tmp/...]`` for the first turn,
``[task:docs turn:2 dir:/tmp/...]`` after it), so one server serves any number of sessions, users and tasks at
once. :mod:`benchmarks.agents.documents` builds the document-analysis suites (the paper's claw-tasks, and a
generated one) from the same records.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

__all__ = ["TASKS", "Intent", "Step", "Task", "TaskTurn", "TurnTag", "find_task", "find_turn", "prompt_for"]


class Intent(Enum):
    """What one step of a task asks the harness for."""

    READ = "read"
    GREP = "grep"
    BASH = "bash"
    ANSWER = "answer"


@dataclass(frozen=True)
class Step:
    """One scripted model turn: ``intent`` with its ``arg`` (a path relative to the task folder, a pattern, a
    command, or the answer text) and the short text the model says before calling the tool. A read may name a
    part of the file: ``offset`` (1-based first line) and ``limit`` (lines)."""

    intent: Intent
    arg: str
    say: str = ""
    offset: int | None = None
    limit: int | None = None


@dataclass(frozen=True)
class TaskTurn:
    """One user message of a task (``instruction``) and the steps that answer it (the last one answers)."""

    instruction: str
    steps: tuple[Step, ...]

    def step(self, done: int) -> Step:
        """The step after ``done`` tool results (the answer once the script has run out)."""
        return self.steps[min(done, len(self.steps) - 1)]


@dataclass(frozen=True)
class Task:
    """A scripted task: its ``name``, its ``turns`` (one user message each, sent one after the other to one
    session) and the ``files`` (relative path -> text) of its scratch folder."""

    name: str
    turns: tuple[TaskTurn, ...]
    files: tuple[tuple[str, str], ...]

    @classmethod
    def single(cls, name: str, instruction: str, steps: tuple[Step, ...], files: tuple[tuple[str, str], ...]) -> Task:
        """A one-message task."""
        return cls(name, (TaskTurn(instruction, steps),), files)

    @property
    def instruction(self) -> str:
        """The first user message."""
        return self.turns[0].instruction

    @property
    def steps(self) -> tuple[Step, ...]:
        """Every step of every turn, in order."""
        return tuple(s for t in self.turns for s in t.steps)

    def materialise(self, folder: Path) -> Path:
        """Write the task's files under ``folder`` (made if missing); returns ``folder``, absolute."""
        folder = folder.resolve()
        for rel, text in self.files:
            path = folder / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        return folder

    def step(self, done: int, turn: int = 0) -> Step:
        """The step of ``turn`` after ``done`` tool results (the answer once the script has run out)."""
        return self.turns[min(turn, len(self.turns) - 1)].step(done)


_WORDS = (
    "meeting budget river harbour archive ledger winter signal garden bridge council market doctor village "
    "summer letter station museum festival island teacher journey camera orchard lantern factory"
).split()


def _document(seed: int, title: str, facts: list[str], paragraphs: int = 6) -> str:
    rng = random.Random(seed)
    lines = [f"# {title}", ""]
    for p in range(paragraphs):
        words = " ".join(rng.choice(_WORDS) for _ in range(40))
        lines += [f"{words.capitalize()}.", ""]
        if p < len(facts):
            lines += [facts[p], ""]
    return "\n".join(lines)


def _script(*moves: tuple[Intent, str, str], answer: str) -> tuple[Step, ...]:
    """A task's steps: each ``(intent, arg, say)`` move, then the answer."""
    return (*(Step(intent, arg, say) for intent, arg, say in moves), Step(Intent.ANSWER, answer))


def _docs_task() -> Task:
    files = (
        (
            "notes/minutes_march.md",
            _document(
                1,
                "Minutes, March",
                ["DECISION: the harbour budget is 41,000.", "OWNER: Priya keeps the archive ledger."],
            ),
        ),
        (
            "notes/minutes_april.md",
            _document(
                2, "Minutes, April", ["DECISION: the harbour budget is 38,500.", "OWNER: Tomas takes over the ledger."]
            ),
        ),
        ("notes/letter_council.md", _document(3, "Letter to the council", ["The festival moves to the orchard."])),
    )
    steps = _script(
        (Intent.READ, "notes/minutes_march.md", "I will read the March minutes first."),
        (Intent.GREP, "DECISION", "Now every decision recorded in the notes."),
        (Intent.READ, "notes/minutes_april.md", "The April minutes change the budget; reading them."),
        (Intent.READ, "notes/minutes_march.md", "Re-reading March to compare the two budgets."),
        answer="The harbour budget fell from 41,000 (March) to 38,500 (April); the ledger moved from Priya to Tomas.",
    )
    instruction = (
        "Compare the harbour budget decisions across the meeting notes in this folder and say who "
        "keeps the ledger. Use the tools to read the files."
    )
    return Task.single("docs", instruction, steps, files)


def _code_task() -> Task:
    source = "\n".join(
        [
            '"""A tiny calculator."""',
            "",
            "",
            "def add(a: int, b: int) -> int:",
            "    return a + b",
            "",
            "",
            "def mean(xs: list[float]) -> float:",
            "    return sum(xs) / len(xs)",
            "",
            "",
            "def median(xs: list[float]) -> float:",
            "    s = sorted(xs)",
            "    return s[len(s) // 2]",
            "",
        ]
    )
    test = "\n".join(
        [
            "from calc import add, mean, median",
            "",
            "",
            "def test_add():",
            "    assert add(2, 3) == 5",
            "",
            "",
            "def test_median_even():",
            "    assert median([1, 2, 3, 4]) == 2.5",
            "",
        ]
    )
    files = (("calc.py", source), ("test_calc.py", test))
    steps = _script(
        (Intent.READ, "calc.py", "Reading the module."),
        (Intent.GREP, "def test_", "Which behaviours are tested?"),
        (Intent.BASH, "python3 -c 'import calc; print(calc.median([1, 2, 3, 4]))'", "Checking the median."),
        (Intent.READ, "calc.py", "Back to the module to locate the bug."),
        answer="median() returns the upper middle element for an even-length list (3 for "
        "[1, 2, 3, 4]); it should average the two middle values (2.5).",
    )
    instruction = "Find the bug in calc.py that test_calc.py exposes, without editing files. Use the tools."
    return Task.single("code", instruction, steps, files)


#: every scripted task by name
TASKS: dict[str, Task] = {t.name: t for t in (_docs_task(), _code_task())}

_TAG = re.compile(r"\[task:(?P<name>[\w-]+)(?: turn:(?P<turn>\d+))? dir:(?P<dir>[^\]\s]+)\]")


@dataclass(frozen=True)
class TurnTag:
    """What one user message's tag names: the task, its turn (0-based) and the session's folder."""

    task: Task
    turn: int
    folder: Path


def prompt_for(task: Task, folder: Path, turn: int = 0) -> str:
    """The user message of ``turn``: the tag the server finds the task by, then the instruction (the first turn's
    tag names no turn, as the single-message tasks' committed traces do)."""
    number = f" turn:{turn + 1}" if turn else ""
    return f"[task:{task.name}{number} dir:{folder}] {task.turns[turn].instruction}"


def find_turn(text: str, tasks: Mapping[str, Task] | None = None) -> TurnTag | None:
    """The last known tag in ``text`` (None when there is none); ``tasks``: by name (default :data:`TASKS`)."""
    book = TASKS if tasks is None else tasks
    found = None
    for m in _TAG.finditer(text):
        if m.group("name") in book:
            task = book[m.group("name")]
            turn = int(m.group("turn") or 1) - 1
            if 0 <= turn < len(task.turns):
                found = TurnTag(task, turn, Path(m.group("dir")))
    return found


def find_task(text: str, tasks: Mapping[str, Task] | None = None) -> tuple[Task, Path] | None:
    """The task and folder a prompt's (last) tag names (None when ``text`` holds no known tag)."""
    tag = find_turn(text, tasks)
    return None if tag is None else (tag.task, tag.folder)
