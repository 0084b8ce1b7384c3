"""What the index mirrors of an engine's prefix cache: live requests on the trie and its cache-size model.

:class:`LiveTrie` holds the trie of aligned orders, the live requests ending in it (request id <-> engine
request id), the counts alignment reads (block frequencies, subtree sizes) and the tokens the modelled
cache holds. With ``capacity_tokens`` it evicts like the engine: an engine's prefix cache (SGLang's
RadixCache, llama.cpp's slots) frees the least recently used leaf of
its radix tree when it needs room; a leaf's ancestors become leaves in turn once their last child is
gone. A pinned request (in flight: SGLang's ``lock_ref``) keeps its leaf and path until unpinned.
:class:`LeafLRU` keeps that order as a lazy heap of ``(last_access, seq, node)`` entries: an entry is stale
once its node is dead, has children, or was touched again (a newer entry exists), and stale entries are
skipped when popped and dropped when the heap is compacted. Nothing here is thread-safe on
its own: :class:`~cp_memory.core.index.ContextIndex` holds the lock.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Hashable, Iterable, Sequence

from .tree import Node, radix_insert, remove_leaf

__all__ = ["LeafLRU", "LiveTrie"]


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
            # a comprehension whose `_` shadows the stamp drops live leaves)
            kept: set[int] = set()
            fresh = []
            for stamp, seq, n in self._heap:
                if _current(stamp, n) and id(n) not in kept:
                    kept.add(id(n))
                    fresh.append((stamp, seq, n))
            heapq.heapify(fresh)
            self._heap = fresh

    def evict(
        self, over: Callable[[], bool], drop: Callable[[Node], None], protect: Node | None, pinned: Iterable[Node] = ()
    ) -> int:
        """While ``over()``, ``drop`` the least recently used leaf that is not on the path of ``protect`` (the
        request being inserted) or of a ``pinned`` node (a request in flight). Returns how many leaves were
        dropped."""
        protected: set[int] = set()
        for end in (protect, *pinned):
            n = end
            while n is not None and id(n) not in protected:
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


class LiveTrie:
    """The trie with its live requests, counts and (``capacity_tokens``) LRU eviction."""

    def __init__(self, capacity_tokens: int | None = None) -> None:
        self.capacity_tokens = capacity_tokens
        self.root = Node((), None, 0)
        self.requests: dict[Hashable, Node] = {}  # insertion order = least recently used first
        self.freq: dict[Hashable, int] = {}  # block -> live requests containing it
        self.tick = 0  # access clock (Node.last_access)
        self.tokens = 0  # tokens held, once per trie node
        self.nodes = 1
        self.lru = LeafLRU()
        self.evicted_by_capacity = 0
        self.capacity_paused = False  # the engine reports its own evictions: count, order, but do not evict
        self.gone: list[Hashable] = []  # requests that left since the owner last took them (its subscribers')
        self.pins: dict[Hashable, int] = {}  # live request -> pins held (in flight: the capacity model keeps it)

    def attach(self, order: Sequence[Hashable], toks: Sequence[int] | None, rid: Hashable) -> Node:
        """Insert ``order`` as request ``rid``; touch its path, count it, evict over capacity."""
        node, created, splits = radix_insert(self.root, order, toks)
        self.nodes += len(created) + splits
        for c in created:
            self.tokens += c.tokens
        if node.requests is None:
            node.requests = set()
        node.requests.add(rid)
        self.requests[rid] = node
        self.tick += 1
        n: Node | None = node
        while n is not None:
            n.subtree += 1
            n.last_access = self.tick
            n = n.parent
        freq = self.freq
        for b in order:
            freq[b] = freq.get(b, 0) + 1
        if self.capacity_tokens is not None:
            if not node.children:
                self.lru.push(node, len(self.requests))
            if not self.capacity_paused:
                self.enforce_capacity(node)
        return node

    def evict(self, rid: Hashable) -> bool:
        """Remove request ``rid`` and prune empty ancestors; False when it is not live."""
        node = self.requests.get(rid)
        if node is None:
            return False
        self._forget(rid, node)
        self._prune(node)
        return True

    def adopt(
        self,
        root: Node,
        requests: list[tuple[Hashable, Node]],
        tick: int,
        block_tokens: Callable[[Hashable], int] | None,
    ) -> None:
        """Take over a restored tree (empty trie only): recompute every count, rebuild the LRU, fit capacity.
        ``block_tokens`` sizes blocks of nodes stored without token lengths (when capacity is modelled)."""
        nodes = []
        stack = [root]
        while stack:
            n = stack.pop()
            nodes.append(n)
            stack.extend(n.children.values())
        capped = self.capacity_tokens is not None
        for n in nodes[1:]:
            if capped and n.toks is None and block_tokens is not None:
                n.toks = tuple(block_tokens(b) for b in n.seg)
            self.tokens += n.tokens
        self.root, self.nodes, self.tick = root, len(nodes), tick
        for rid, node in requests:
            self.requests[rid] = node
            node.subtree += 1
        for n in reversed(nodes):  # every node comes after its parent in ``nodes``: sum subtrees bottom-up
            if n.parent is not None:
                n.parent.subtree += n.subtree
        for n in nodes[1:]:
            for b in n.seg:
                self.freq[b] = self.freq.get(b, 0) + n.subtree
        if capped:
            for n in sorted((n for n in nodes[1:] if not n.children), key=lambda n: n.last_access):
                self.lru.push(n, len(self.requests))
            if not self.capacity_paused:
                self.enforce_capacity(None)

    def enforce_capacity(self, protect: Node | None) -> None:
        """Evict least recently used leaves (never ``protect``'s path nor a pinned request's) until the tokens
        fit, or only protected leaves are left."""
        cap = self.capacity_tokens
        assert cap is not None
        pinned = [self.requests[rid] for rid in self.pins]
        self.evicted_by_capacity += self.lru.evict(lambda: self.tokens > cap, self.drop_leaf, protect, pinned)

    def pin(self, rid: Hashable) -> bool:
        """One more pin on live request ``rid``: the capacity model keeps its leaf and path; False if not live."""
        if rid not in self.requests:
            return False
        self.pins[rid] = self.pins.get(rid, 0) + 1
        return True

    def unpin(self, rid: Hashable) -> bool:
        """One pin less on ``rid`` (evictable again with none left); False when it held none."""
        held = self.pins.get(rid, 0)
        if held == 0:
            return False
        if held == 1:
            del self.pins[rid]
        else:
            self.pins[rid] = held - 1
        return True

    def drop_leaf(self, node: Node) -> None:
        """Remove a childless trie node with all requests ending there; prune empty ancestors."""
        for rid in list(node.requests or ()):
            self._forget(rid, node)
        self._prune(node)

    def _forget(self, rid: Hashable, node: Node) -> None:
        del self.requests[rid]
        self.pins.pop(rid, None)
        self.gone.append(rid)
        if node.requests is not None:
            node.requests.discard(rid)
        freq = self.freq
        n: Node | None = node
        while n is not None:
            n.subtree -= 1
            for b in n.seg:
                c = freq.get(b, 0) - 1
                if c > 0:
                    freq[b] = c
                else:
                    freq.pop(b, None)
            n = n.parent

    def _prune(self, node: Node) -> None:
        while node.parent is not None and not node.children and not node.requests:
            self.tokens -= node.tokens
            self.nodes -= 1
            parent = remove_leaf(node)
            if self.capacity_tokens is not None and parent.parent is not None and not parent.children:
                self.lru.push(parent, len(self.requests))
            node = parent
