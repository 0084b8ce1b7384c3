"""The document-analysis suites: long agent sessions that read, re-read and compare documents, as the paper's
real-agent result (OpenClaw on the claw-tasks benchmark) does.

* :func:`claw_tasks` — the paper's own suite (EfficientContext/ClawTasks, Apache-2.0, synthetic documents): 22
  documents and 60 document tasks of 245 user turns, read from a given folder (never copied into the project).
  Each turn becomes a :class:`~benchmarks.agents.tasks.TaskTurn`: the files it names are read in the order it
  names them, "List all files" lists the folder, then the scripted model answers. The files' hashes are checked
  against the suite's ``MANIFEST.sha256``. The 10 coding tasks need a fixture the suite does not ship
  (``user_service.py``) and are left out.
* :func:`generated_documents` — a suite of our own in the same spirit, built here from a seed (no download): 22
  documents of 1.5-4K tokens (reports, papers, contracts: prose with facts, a table, each kind's header and
  disclaimer repeated verbatim, sections shared word for word between documents) and 60 sessions of 10-30
  requests that read several documents, re-read them after follow-up questions, read parts of them (line
  ranges), grep them and compare two; documents recur across sessions and users.

The answers are scripted (deterministic text quoting what was read); only the traffic is of interest.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from benchmarks.agents.tasks import Intent, Step, Task, TaskTurn

__all__ = [
    "CLAW_CATEGORIES",
    "CLAW_ENV",
    "ClawTasksNotFound",
    "SUITES",
    "claw_tasks",
    "find_claw_tasks",
    "generated_documents",
    "suite",
]

#: the environment variable naming the claw-tasks folder
CLAW_ENV = "CP_MEMORY_CLAW_TASKS"
#: the document-task categories of claw-tasks (its ``coding`` category is left out: see the module docstring)
CLAW_CATEGORIES = ("commercial", "legal", "compliance", "strategic")
#: where the documents go inside a session's folder (claw-tasks' turns name ``contracts/<file>``)
CLAW_FOLDER = "contracts"
_CLAW_FILE = re.compile(rf"{CLAW_FOLDER}/([\w.-]+\.txt)")
_WHERE = (
    "claw-tasks is GitHub EfficientContext/ClawTasks (Apache-2.0), commit c44214abe151b73fd770757deca042a0a02566ca: "
    "its data/workspace/*.txt and claw-tasks/<category>/tasks.json, laid out as workspace/ and tasks/<category>.json "
    "with a MANIFEST.sha256"
)


class ClawTasksNotFound(FileNotFoundError):
    """The claw-tasks folder is not where it was looked for (the message says where to get it)."""


def _shared_default() -> Path:
    return Path(__file__).resolve().parents[3] / "shared" / "data" / "claw-tasks"


def find_claw_tasks(path: str | Path | None = None) -> Path:
    """The claw-tasks folder: ``path``, else ``$CP_MEMORY_CLAW_TASKS``, else ``../shared/data/claw-tasks`` beside
    the checkout. Raises :class:`ClawTasksNotFound` (saying where to get it) when none holds ``tasks/``."""
    candidates = [Path(path)] if path is not None else []
    if path is None and os.environ.get(CLAW_ENV):
        candidates.append(Path(os.environ[CLAW_ENV]))
    if path is None:
        candidates.append(_shared_default())
    for folder in candidates:
        if (folder / "tasks").is_dir() and (folder / "workspace").is_dir():
            return folder
    looked = ", ".join(str(c) for c in candidates)
    raise ClawTasksNotFound(
        f"claw-tasks not found (looked in {looked}); {_WHERE}; pass --claw-tasks PATH or set {CLAW_ENV}"
    )


def _manifest(folder: Path) -> dict[str, str]:
    manifest = folder / "MANIFEST.sha256"
    if not manifest.exists():
        return {}
    out = {}
    for line in manifest.read_text(encoding="utf-8").splitlines():
        digest, _, name = line.partition("  ")
        if digest and name:
            out[name.removeprefix("./")] = digest
    return out


def _read_checked(folder: Path, rel: str, manifest: dict[str, str]) -> str:
    data = (folder / rel).read_bytes()
    want = manifest.get(rel)
    if want is not None and hashlib.sha256(data).hexdigest() != want:
        raise ValueError(f"claw-tasks: {folder / rel} does not match MANIFEST.sha256 (a changed copy?)")
    return data.decode("utf-8")


def _quotes(text: str, n: int, seed: int) -> list[str]:
    """Up to ``n`` short quoted facts of ``text`` (its lines with figures), picked reproducibly."""
    lines = [ln.strip() for ln in text.splitlines() if re.search(r"\d", ln) and 20 < len(ln.strip())]
    rng = random.Random(seed)
    picked = rng.sample(lines, min(n, len(lines))) if lines else []
    return [p if len(p) <= 220 else p[:217] + "..." for p in picked]


def _answer(instruction: str, read: Sequence[tuple[str, str]], seed: int) -> str:
    """A scripted answer: what was asked, then facts quoted from each document read for it, then a conclusion."""
    ask = instruction.split(". ")[0].rstrip(".")
    lines = [f"Here is what the documents say ({ask.lower()})."]
    for i, (name, text) in enumerate(read):
        lines.append("")
        lines.append(f"**{name}**")
        lines += [f"- {q}" for q in _quotes(text, 4, seed + i)]
    lines += ["", "In short: the figures above are quoted as written; no other source was used."]
    return "\n".join(lines)


def _claw_turn(instruction: str, files: dict[str, str], seen: list[str], seed: int) -> TaskTurn:
    moves: list[Step] = []
    if instruction.lower().startswith("list all files"):
        moves.append(Step(Intent.BASH, f"ls {CLAW_FOLDER}/", "Listing the folder."))
    named = [f for f in _CLAW_FILE.findall(instruction) if f in files]
    for name in named:
        moves.append(Step(Intent.READ, f"{CLAW_FOLDER}/{name}", f"Reading {name}."))
        if name not in seen:
            seen.append(name)
    read = [(n, files[n]) for n in (named or seen[-2:])]
    return TaskTurn(instruction, (*moves, Step(Intent.ANSWER, _answer(instruction, read, seed))))


def claw_tasks(path: str | Path | None = None, categories: Sequence[str] = CLAW_CATEGORIES) -> dict[str, Task]:
    """The claw-tasks document tasks as :class:`Task` records named ``claw-<task>`` (each with all 22 documents
    under ``contracts/``), in the suite's order, category by category."""
    folder = find_claw_tasks(path)
    manifest = _manifest(folder)
    docs = {
        p.name: _read_checked(folder, f"workspace/{p.name}", manifest)
        for p in sorted((folder / "workspace").glob("*.txt"))
    }
    files = tuple((f"{CLAW_FOLDER}/{name}", text) for name, text in docs.items())
    out: dict[str, Task] = {}
    for category in categories:
        rel = f"tasks/{category}.json"
        if not (folder / rel).exists():
            raise ValueError(f"claw-tasks: no {rel} in {folder} (categories: {', '.join(CLAW_CATEGORIES)})")
        for i, raw in enumerate(json.loads(_read_checked(folder, rel, manifest))):
            seen: list[str] = []
            turns = tuple(_claw_turn(text, docs, seen, seed=1000 * i + t) for t, text in enumerate(raw["turns"]))
            name = f"claw-{raw['name']}"
            out[name] = Task(name, turns, files)
    return out


# --- the generated suite ---------------------------------------------------------------------------------

_ORGS = "Northwind Halvorsen Ardent Meridian Calloway Brightwater Okonkwo Sandvik Tamura Valdez Whitcombe Zelenko"
_NOUNS = (
    "budget schedule audit forecast pipeline warehouse contract invoice dataset model survey reactor turbine "
    "clinic harbour depot ledger portfolio roadmap backlog release incident policy review"
)
_VERBS = "approved revised reported delayed expanded reduced audited signed renewed postponed measured estimated"
_MONTHS = "January February March April May June July August September October November December"


@dataclass(frozen=True)
class _Doc:
    name: str
    kind: str
    text: str
    facts: tuple[str, ...]


def _sentence(rng: random.Random) -> str:
    org, noun, noun2 = rng.choice(_ORGS.split()), rng.choice(_NOUNS.split()), rng.choice(_NOUNS.split())
    verb, month = rng.choice(_VERBS.split()), rng.choice(_MONTHS.split())
    return (
        f"In {month} {org} {verb} the {noun} for the {noun2} programme, citing {rng.randint(2, 40)} open items "
        f"and a variance of {rng.randint(1, 19)}.{rng.randint(0, 9)} percent against plan."
    )


def _paragraph(rng: random.Random, sentences: int) -> str:
    return " ".join(_sentence(rng) for _ in range(sentences))


_KINDS = {
    "report": (
        "QUARTERLY OPERATING REPORT\nPrepared by the Finance Office for the Board of Directors\n"
        "Distribution: Board, Audit Committee, Executive Leadership Team",
        "DISCLAIMER: This report contains forward-looking statements based on management's current expectations. "
        "Actual results may differ materially. Figures are unaudited unless stated otherwise and are presented in "
        "thousands of euros. This document is confidential and intended solely for its named recipients; any "
        "review, retransmission or dissemination by persons other than the intended recipients is prohibited.",
    ),
    "paper": (
        "TECHNICAL NOTE\nResearch and Evaluation Group\nStatus: internal pre-print, not peer reviewed",
        "NOTICE: Results in this note are preliminary. Methods, data and conclusions may change in later "
        "revisions. Please do not cite or circulate outside the group without the authors' written consent. "
        "The datasets referenced are described in the group's data register; access follows the data policy.",
    ),
    "contract": (
        "MASTER SERVICES AGREEMENT — SCHEDULE\nBetween the Client and the Supplier named below\n"
        "Governing law: the laws of England and Wales",
        "CONFIDENTIALITY: The terms of this schedule are confidential under clause 14 of the Agreement. Nothing "
        "in this schedule limits either party's liability for fraud, death or personal injury caused by "
        "negligence. In case of conflict, the Agreement prevails over this schedule unless expressly stated.",
    ),
}
_SHARED_TITLES = (
    "Definitions and interpretation",
    "Data protection and security",
    "Methodology and sources",
    "Governance and escalation",
    "Service levels and credits",
    "Risk register summary",
)


def _shared_sections(seed: int) -> dict[str, str]:
    rng = random.Random(seed)
    return {title: "\n\n".join(_paragraph(rng, 4) for _ in range(3)) for title in _SHARED_TITLES}


def _table(rng: random.Random, rows: int) -> str:
    head = "| item | owner | amount (kEUR) | due |\n|---|---|---|---|"
    body = [
        f"| {rng.choice(_NOUNS.split())} {n + 1} | {rng.choice(_ORGS.split())} | {rng.randint(10, 9_999):,} "
        f"| {rng.choice(_MONTHS.split())} {rng.randint(1, 28)} |"
        for n in range(rows)
    ]
    return "\n".join([head, *body])


def _make_doc(index: int, kind: str, shared: dict[str, str], seed: int) -> _Doc:
    rng = random.Random(seed * 7919 + index)
    header, disclaimer = _KINDS[kind]
    name = f"{kind}_{index:02d}_{rng.choice(_ORGS.split()).lower()}.md"
    facts = tuple(
        f"KEY FIGURE {k + 1}: the {rng.choice(_NOUNS.split())} total for {name[:-3]} is {rng.randint(100, 99_999):,}."
        for k in range(4)
    )
    parts = [header, f"Document {index:02d} — {kind} — reference {rng.randint(10_000, 99_999)}", disclaimer]
    sections = rng.sample(_SHARED_TITLES, 2)
    for s in range(rng.randint(3, 6)):
        parts.append(f"## {s + 1}. {rng.choice(_NOUNS.split()).capitalize()} {rng.choice(_VERBS.split())}")
        parts.append(_paragraph(rng, rng.randint(4, 7)))
        if s < len(facts):
            parts.append(facts[s])
        if s == 1:
            parts.append(_table(rng, rng.randint(5, 10)))
        if s < len(sections):
            parts.append(f"### {sections[s]}\n\n{shared[sections[s]]}")
    parts.append(disclaimer)
    return _Doc(name, kind, "\n\n".join(parts) + "\n", facts)


def _docs(seed: int, n: int = 22) -> list[_Doc]:
    shared = _shared_sections(seed)
    kinds = ("report", "paper", "contract")
    return [_make_doc(i + 1, kinds[i % 3], shared, seed) for i in range(n)]


_FOLLOW_UPS = (
    "Which of these figures should worry us most, and why?",
    "Summarise what you have found so far in three bullet points.",
    "Are the two documents consistent with each other? Point to the sections.",
    "What would you ask the authors before signing off?",
    "Draft a two-sentence note for the board.",
)


def _generated_task(n: int, docs: list[_Doc], seed: int) -> Task:
    rng = random.Random(seed * 104729 + n)
    user = f"user{n % 6}"
    picked = rng.sample(docs, rng.randint(3, 5))
    files = tuple((f"docs/{d.name}", d.text) for d in picked)
    turns: list[TaskTurn] = []
    first, second = picked[0], picked[1]

    def turn(instruction: str, moves: list[Step], read: list[_Doc]) -> None:
        answer = _answer(instruction, [(d.name, d.text) for d in read], seed=n * 100 + len(turns))
        turns.append(TaskTurn(f"({user}) {instruction}", (*moves, Step(Intent.ANSWER, answer))))

    turn(
        f"Read docs/{first.name} and docs/{second.name} and summarise their key figures.",
        [Step(Intent.READ, f"docs/{d.name}", f"Reading {d.name}.") for d in (first, second)],
        [first, second],
    )
    for k, doc in enumerate(picked[2:]):
        turn(
            f"Now read docs/{doc.name}. How does it compare with the first two?",
            [Step(Intent.READ, f"docs/{doc.name}")],
            [doc],
        )
        turn(rng.choice(_FOLLOW_UPS), [], [doc])
        if k == 0:
            turn(
                "Find every KEY FIGURE line across docs/ and list them.",
                [Step(Intent.GREP, "KEY FIGURE", "Searching every document for the key figures.")],
                picked,
            )
    lines = first.text.count("\n")
    half = max(1, lines // 2)
    turn(
        f"Look again at the second half of docs/{first.name}: what does it say about risk?",
        [Step(Intent.READ, f"docs/{first.name}", "Re-reading the second half.", offset=half, limit=lines - half + 1)],
        [first],
    )
    turn(
        f"Re-read docs/{first.name} and docs/{second.name} in full and give the final comparison table.",
        [Step(Intent.READ, f"docs/{d.name}", f"Re-reading {d.name}.") for d in (first, second)],
        [first, second],
    )
    return Task(f"gen-docs-{n:02d}", tuple(turns), files)


def generated_documents(seed: int = 0, tasks: int = 60) -> dict[str, Task]:
    """The generated document-analysis suite: ``tasks`` sessions (``gen-docs-NN``) over 22 documents."""
    docs = _docs(seed)
    return {t.name: t for t in (_generated_task(n, docs, seed) for n in range(tasks))}


#: the document suites by name
SUITES = ("claw", "gen-docs")


def suite(name: str, claw_path: str | Path | None = None) -> dict[str, Task]:
    """A document suite by name (``claw``: :func:`claw_tasks`; ``gen-docs``: :func:`generated_documents`)."""
    if name == "claw":
        return claw_tasks(claw_path)
    if name == "gen-docs":
        return generated_documents()
    raise ValueError(f"unknown document suite {name!r} (have: {', '.join(SUITES)})")
