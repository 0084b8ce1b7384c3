"""Foreign traffic: other applications sharing the arm's engines while the chain runs.

A deployment's engines rarely serve one client. Here a background sender submits one-off prompts (unique
random words, no prefix shared with anything) at a fixed rate while the questions run, the way other
applications would reach the engines:

* ``sglang`` arms: through the gateway (``sglang-router`` fronts the engines for everyone, so it sees this
  traffic: it counts it in its loads and inserts it into its prefix trees);
* ``agent`` arms: straight to the workers, in rotation (other applications do not go through
  ChainOfAgents' in-process ``AgentRouter``, whose cache models and loads therefore do not see it).

This is the workload class text-prefix routing at a gateway is built for; the chain's own numbers
(prefilled tokens, hit ratio) exclude the foreign requests, which are reported on their own.
"""

from __future__ import annotations

import logging
import random
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from types import TracebackType

from cp_memory.engine import EngineClient, EngineError

logger = logging.getLogger("benchmarks.coa")

__all__ = ["ForeignStats", "ForeignTraffic", "foreign_prompt"]

_SYLLABLES = ("ka", "lo", "mi", "ne", "ru", "sa", "ti", "vo", "ze", "qu", "dra", "pel", "sun", "tor", "wix")


def foreign_prompt(index: int, words: int, seed: int = 0) -> str:
    """A one-off prompt: request number first (no two share a prefix), then ``words`` random words."""
    rng = random.Random(f"{seed}/{index}")
    body = " ".join("".join(rng.choices(_SYLLABLES, k=rng.randint(1, 3))) for _ in range(words))
    return f"Request {index}-{rng.getrandbits(32):08x}: {body}\nSummary:"


@dataclass(frozen=True)
class ForeignStats:
    requests: int
    failed: int
    prompt_tokens: int
    cached_tokens: int

    @property
    def prefilled_tokens(self) -> int:
        return self.prompt_tokens - self.cached_tokens


class ForeignTraffic:
    """``with ForeignTraffic(targets, rate=1.0, words=400) as ft: ...`` — sends ``rate`` requests per second
    (a fixed schedule, rotating over ``targets``) until the block ends, then waits for those in flight;
    ``ft.stats()`` totals them. ``rate=0`` sends nothing."""

    def __init__(
        self,
        targets: Sequence[EngineClient],
        *,
        rate: float,
        words: int = 400,
        max_tokens: int = 4,
        seed: int = 0,
        max_in_flight: int = 8,
    ) -> None:
        if rate < 0:
            raise ValueError(f"rate must be >= 0, got {rate}")
        if rate > 0 and not targets:
            raise ValueError("foreign traffic needs at least one target")
        self.targets = list(targets)
        self.rate = rate
        self.words = words
        self.max_tokens = max_tokens
        self.seed = seed
        self._stop = threading.Event()
        self._pool = ThreadPoolExecutor(max_workers=max_in_flight, thread_name_prefix="foreign")
        self._futures: list[Future[tuple[int, int] | None]] = []
        self._thread: threading.Thread | None = None

    def __enter__(self) -> ForeignTraffic:
        if self.rate > 0:
            self._thread = threading.Thread(target=self._send_loop, name="foreign-sender", daemon=True)
            self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._pool.shutdown(wait=True)

    def _send_loop(self) -> None:
        start = time.perf_counter()
        i = 0
        while not self._stop.is_set():
            due = start + i / self.rate
            if self._stop.wait(max(0.0, due - time.perf_counter())):
                break
            self._futures.append(self._pool.submit(self._one, i))
            i += 1

    def _one(self, i: int) -> tuple[int, int] | None:
        client = self.targets[i % len(self.targets)]
        try:
            res = client.complete(foreign_prompt(i, self.words, self.seed), max_tokens=self.max_tokens)
        except EngineError as exc:
            logger.warning("foreign request %d failed: %s", i, exc)
            return None
        return res.prompt_tokens or 0, res.cached_tokens or 0

    def stats(self) -> ForeignStats:
        done = [f.result() for f in self._futures]
        ok = [d for d in done if d is not None]
        return ForeignStats(len(done), len(done) - len(ok), sum(p for p, _ in ok), sum(c for _, c in ok))
