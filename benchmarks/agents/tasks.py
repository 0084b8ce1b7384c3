"""The scripted tasks: what the scripted model asks the harness to do, step by step, in a scratch folder.

A task is a list of :class:`Step` intents (read a file, grep a pattern, run a command, answer). The scripted
server (:mod:`benchmarks.agents.scripted`) turns the intent of the current step into the tool call of the harness
in front of it (Claude Code's ``Read`` / ``Grep`` / ``Bash``, Codex's shell tool, ...), so the harness executes
its real tools and sends its real follow-up. The step played is the number of tool results already in the
conversation: the server keeps no state and the same task always gives the same traffic.

The prompt names the task and its folder (``[task:docs dir:/tmp/...]``), so one server serves any number of
sessions, users and tasks at once.
"""

from __future__ import annotations

import random
import re
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

__all__ = ["TASKS", "Intent", "Step", "Task", "find_task", "prompt_for"]


class Intent(Enum):
    """What one step of a task asks the harness for."""

    READ = "read"
    GREP = "grep"
    BASH = "bash"
    ANSWER = "answer"


@dataclass(frozen=True)
class Step:
    """One scripted model turn: ``intent`` with its ``arg`` (a path relative to the task folder, a pattern, a
    command, or the answer text) and the short text the model says before calling the tool."""

    intent: Intent
    arg: str
    say: str = ""


@dataclass(frozen=True)
class Task:
    """A scripted task: its ``name``, the user's ``instruction``, its ``steps`` (the last one answers) and the
    ``files`` (relative path -> text) of its scratch folder."""

    name: str
    instruction: str
    steps: tuple[Step, ...]
    files: tuple[tuple[str, str], ...]

    def materialise(self, folder: Path) -> Path:
        """Write the task's files under ``folder`` (made if missing); returns ``folder``, absolute."""
        folder = folder.resolve()
        for rel, text in self.files:
            path = folder / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
        return folder

    def step(self, done: int) -> Step:
        """The step after ``done`` tool results (the answer once the script has run out)."""
        return self.steps[min(done, len(self.steps) - 1)]


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
    return Task("docs", instruction, steps, files)


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
    return Task("code", instruction, steps, files)


#: every scripted task by name
TASKS: dict[str, Task] = {t.name: t for t in (_docs_task(), _code_task())}

_TAG = re.compile(r"\[task:(?P<name>[\w-]+) dir:(?P<dir>[^\]\s]+)\]")


def prompt_for(task: Task, folder: Path) -> str:
    """The prompt a harness is started with: the tag the server finds the task by, then the instruction."""
    return f"[task:{task.name} dir:{folder}] {task.instruction}"


def find_task(text: str) -> tuple[Task, Path] | None:
    """The task and folder a prompt's tag names (None when ``text`` holds no known tag)."""
    m = _TAG.search(text)
    if m is None or m.group("name") not in TASKS:
        return None
    return TASKS[m.group("name")], Path(m.group("dir"))
