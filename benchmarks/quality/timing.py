"""Where a quality run's time goes: a clock of exclusive phases (``mem0``, ``build``, ``engine``, ``cache``;
a phase entered inside another pauses it) and the engine's own prefill figures, so the report can say how many
answers a minute the harness reached and what the time that is not the model went to. Each run appends one
line to ``runs/<model>.jsonl`` in its answer cache's folder; the report reads them back."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["PHASES", "HarnessClock", "read_runs", "runs_path", "write_run"]

PHASES = ("ingest", "mem0", "build", "engine", "cache")


@dataclass
class HarnessClock:
    """Seconds per phase (exclusive: the innermost open phase is charged), and what the engine reported."""

    seconds: dict[str, float] = field(default_factory=lambda: dict.fromkeys(PHASES, 0.0))
    engine_requests: int = 0
    server_prefill_ms: float = 0.0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    by_k: dict[int, list[float]] = field(default_factory=dict)  # k -> [answers asked, seconds]
    started: float = field(default_factory=time.perf_counter)
    _stack: list[tuple[str, float]] = field(default_factory=list)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        if name not in self.seconds:
            raise ValueError(f"unknown phase {name!r}: one of {PHASES}")
        now = time.perf_counter()
        if self._stack:  # pause the outer phase
            outer, since = self._stack[-1]
            self.seconds[outer] += now - since
        self._stack.append((name, now))
        try:
            yield
        finally:
            inner, since = self._stack.pop()
            now = time.perf_counter()
            self.seconds[inner] += now - since
            if self._stack:  # the outer phase runs again from now
                self._stack[-1] = (self._stack[-1][0], now)

    def engine_reply(self, server_prompt_ms: float | None, prompt_tokens: int | None, cached: int | None) -> None:
        self.engine_requests += 1
        self.server_prefill_ms += server_prompt_ms or 0.0
        self.prompt_tokens += prompt_tokens or 0
        self.cached_tokens += cached or 0

    def k_done(self, k: int, answers: int, seconds: float) -> None:
        """One conversation's questions at ``k`` through every arm: ``answers`` asked in ``seconds``."""
        done = self.by_k.setdefault(k, [0, 0.0])
        done[0] += answers
        done[1] += seconds

    def summary(self, answers: int) -> dict[str, Any]:
        """The run's figures: answers a minute over the measured part (everything after ingestion), the
        seconds per phase, the rest (the loop itself), the engine's prefill share and tokens."""
        wall = time.perf_counter() - self.started
        loop = wall - self.seconds["ingest"]
        phases = {k: round(v, 2) for k, v in self.seconds.items()}
        prefilled = self.prompt_tokens - self.cached_tokens
        return {
            "answers": answers,
            "engine_requests": self.engine_requests,
            "wall_s": round(wall, 1),
            "measured_s": round(loop, 1),
            "answers_per_minute": _per_minute(answers, loop),
            "seconds": phases,
            "other_s": round(loop - sum(v for k, v in self.seconds.items() if k != "ingest"), 2),
            "server_prefill_s": round(self.server_prefill_ms / 1000, 2),
            "prompt_tokens": self.prompt_tokens,
            "prefilled_tokens": prefilled,
            "prefill_tokens_per_s": round(prefilled / (self.server_prefill_ms / 1000), 1)
            if self.server_prefill_ms
            else None,
            "by_k": {
                str(k): {"answers": int(n), "seconds": round(sec, 1), "answers_per_minute": _per_minute(n, sec)}
                for k, (n, sec) in sorted(self.by_k.items())
            },
            "load_average": [round(x, 2) for x in os.getloadavg()],
            "cpus": os.cpu_count(),
        }


def _per_minute(answers: float, seconds: float) -> float | None:
    return round(60 * answers / seconds, 1) if seconds > 0 and answers else None


def runs_path(cache_path: str | Path) -> Path:
    """``.../quality_answers/smollm2.jsonl`` -> ``.../quality_answers/runs/smollm2.jsonl``."""
    p = Path(cache_path)
    return p.parent / "runs" / p.name


def write_run(cache_path: str | Path, record: dict[str, Any]) -> None:
    path = runs_path(cache_path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as f:
        f.write(json.dumps(record, ensure_ascii=False) + "\n")


def read_runs(cache_path: str | Path) -> list[dict[str, Any]]:
    path = runs_path(cache_path)
    if not path.exists():
        return []
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out
