"""The index's cache-size model: least-recently-used order over the trie's leaves.

An engine's prefix cache (SGLang's RadixCache, llama.cpp's slots) frees the least recently used leaf of
its radix tree when it needs room; a leaf's ancestors become leaves in turn once their last child is
gone. :class:`LeafLRU` keeps that order as a lazy heap of ``(last_access, seq, node)`` entries: an entry
is stale once its node is dead, has children, or was touched again (a newer entry exists), and stale
entries are skipped when popped and dropped when the heap is compacted. Not thread-safe on its own:
:class:`~cp_memory.index.ContextIndex` holds the lock.
"""
from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable

from .tree import Node

__all__ = ["LeafLRU"]


class LeafLRU:
    """Leaves of a trie in least-recently-used order (``Node.last_access``)."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, int, Node]] = []
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self._heap)

    def push(self, node: Node, live: int) -> None:
        """``node`` became a leaf or was touched; ``live`` (the live request count) bounds stale entries."""
        heapq.heappush(self._heap, (node.last_access, next(self._seq), node))
        if len(self._heap) > 4 * live + 1024:
            # keep each live leaf's current entry exactly once (never rebind the loop variables here:
            # issue 9 §7 was a comprehension whose `_` shadowed the stamp and dropped live leaves)
            kept: set[int] = set()
            fresh = []
            for stamp, seq, n in self._heap:
                if _current(stamp, n) and id(n) not in kept:
                    kept.add(id(n))
                    fresh.append((stamp, seq, n))
            heapq.heapify(fresh)
            self._heap = fresh

    def evict(self, over: Callable[[], bool], drop: Callable[[Node], None], protect: Node | None) -> int:
        """While ``over()``, ``drop`` the least recently used leaf that is not on ``protect``'s path
        (the request being inserted). Returns how many leaves were dropped."""
        protected = set()
        n = protect
        while n is not None:
            protected.add(id(n))
            n = n.parent
        skipped = []
        dropped = 0
        while over() and self._heap:
            stamp, seq, node = heapq.heappop(self._heap)
            if not _current(stamp, node) or node.parent is None:
                continue
            if id(node) in protected:
                skipped.append((stamp, seq, node))
                continue
            drop(node)
            dropped += 1
        for item in skipped:
            heapq.heappush(self._heap, item)
        return dropped

    def clear(self) -> None:
        self._heap.clear()


def _current(stamp: int, node: Node) -> bool:
    return node.alive and not node.children and node.last_access == stamp
