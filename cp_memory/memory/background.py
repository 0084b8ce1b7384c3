"""Turns added to mem0 off the request path: one worker thread, a bounded queue, bounded retries, logged failures.

The gateway and the mem0 proxy drop-in add each answered turn (the user's message and the answer) to mem0
*after* the answer went back: :meth:`TurnWriter.submit` never blocks and never raises (a full queue drops the
turn with a warning); the worker retries transient mem0 failures with tenacity and logs the rest. Nothing it
does reaches a response. An async mem0 ``add`` (``AsyncMemory``) runs in the worker's own event loop.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import queue
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from .proxy import retrying, transient_errors

__all__ = ["Turn", "TurnWriter"]

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Turn:
    """One turn to add: mem0 ``add``'s messages and keyword arguments (``user_id``, ``infer``, ...)."""

    messages: tuple[Mapping[str, Any], ...]
    options: Mapping[str, Any] = field(default_factory=dict)


class TurnWriter:
    """``add(messages, **options)`` called for each submitted :class:`Turn` by one daemon worker thread."""

    def __init__(self, add: Callable[..., Any], *, capacity: int = 256, attempts: int = 3, wait_s: float = 0.5) -> None:
        self._add = retrying(self._call(add), attempts, wait_s, transient_errors())
        self._queue: queue.Queue[Turn | None] = queue.Queue(capacity)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.added = 0
        self.failed = 0
        self.dropped = 0

    @staticmethod
    def _call(add: Callable[..., Any]) -> Callable[..., Any]:
        def call(messages: Sequence[Mapping[str, Any]], options: Mapping[str, Any]) -> Any:
            result = add(list(messages), **options)
            return asyncio.run(result) if inspect.isawaitable(result) else result  # type: ignore[arg-type]

        return call

    def submit(self, turn: Turn) -> bool:
        """Queue ``turn``; False (and a warning) when the queue is full or the writer is closed."""
        self._start()
        try:
            self._queue.put_nowait(turn)
        except queue.Full:
            self.dropped += 1
            logger.warning("mem0: %d turns are waiting to be added; this turn is dropped", self._queue.maxsize)
            return False
        return True

    def _start(self) -> None:
        with self._lock:
            if self._thread is None:
                self._thread = threading.Thread(target=self._work, name="cp-memory-mem0-add", daemon=True)
                self._thread.start()

    def _work(self) -> None:
        while True:
            turn = self._queue.get()
            try:
                if turn is None:
                    return
                self._add(turn.messages, turn.options)
                self.added += 1
            except Exception:  # logged, never raised: the answer went back already
                self.failed += 1
                logger.exception("mem0: adding a turn failed; it is not stored")
            finally:
                self._queue.task_done()

    def join(self, timeout_s: float = 60.0) -> bool:
        """Wait until every queued turn was handled (True) or ``timeout_s`` passed (False)."""
        done = threading.Event()

        def wait() -> None:
            self._queue.join()
            done.set()

        threading.Thread(target=wait, daemon=True).start()
        return done.wait(timeout_s)

    def close(self, timeout_s: float = 10.0) -> None:
        """Finish the queued turns (within ``timeout_s``) and stop the worker."""
        with self._lock:
            thread = self._thread
        if thread is None:
            return
        self.join(timeout_s)
        try:
            self._queue.put_nowait(None)
        except queue.Full:
            return
        thread.join(timeout_s)
