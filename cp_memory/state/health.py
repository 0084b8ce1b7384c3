"""Is the shared store usable now? One warning when it stops answering, one info line when it is back.

After a failure the store is not asked again for ``retry_s`` seconds (every search in between takes the
fallback at once instead of waiting for a timeout); the first call after that tries it again.
"""

from __future__ import annotations

import logging
import threading
import time

__all__ = ["StoreHealth"]

logger = logging.getLogger(__name__)

_FALLBACK = "turns send full memories and indexes use this process's local state"
_BACK = "shared indexes and dedup records"


class StoreHealth:
    """The store's state as its callers saw it last (thread-safe)."""

    def __init__(self, name: str, *, retry_s: float, fallback: str = _FALLBACK, back: str = _BACK) -> None:
        self.name = name
        self.fallback = fallback
        self.back = back
        self.retry_s = retry_s
        self._lock = threading.Lock()
        self._retry_at = 0.0
        self.down = False
        self.failures = 0  # every failed call since start (for tests and benchmarks)

    def usable(self) -> bool:
        with self._lock:
            return not self.down or time.monotonic() >= self._retry_at

    def failed(self, reason: object) -> None:
        with self._lock:
            self.failures += 1
            self._retry_at = time.monotonic() + self.retry_s
            first = not self.down
            self.down = True
        if first:
            logger.warning(
                "the state store %s cannot answer (%s): %s until it is back (tried again every %.1f s)",
                self.name,
                reason,
                self.fallback,
                self.retry_s,
            )

    def succeeded(self) -> None:
        with self._lock:
            back = self.down
            self.down = False
        if back:
            logger.info("the state store %s answers again: %s are back", self.name, self.back)
