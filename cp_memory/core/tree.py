"""The context index tree: a compressed trie of aligned block orders.

The paper's index (§4) is a tree whose root is the empty context, whose internal ("virtual") nodes hold a
prefix shared by their children, and whose leaves are requests. Because every child inherits its parent's
blocks as its prefix (Algorithm 4, phase 3), that tree *is* a compressed trie over the aligned orders —
the same shape as SGLang's RadixCache over the prompts' block sections. We store it as one:

* a node's ``seg`` holds the blocks it adds to its parent's prefix, children are keyed by their first block
  (siblings never start with the same block);
* ``slot`` is the node's position among its parent's children, assigned once, so search paths read like
  the paper's ([0, 0, 2] = first child of the root, its first child, that node's third child);
* requests end at a node (``requests``); a node can end requests and have children (a request whose blocks
  are a prefix of another's).

Nothing here is thread-safe on its own: :class:`~cp_memory.core.index.ContextIndex` holds the lock.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass

__all__ = ["Match", "Node", "children_in", "path_of", "prefix_of", "radix_insert", "remove_leaf"]


class Node:
    __slots__ = (
        "alive",
        "children",
        "depth",
        "last_access",
        "next_slot",
        "parent",
        "requests",
        "seg",
        "slot",
        "subtree",
        "toks",
    )

    def __init__(
        self, seg: tuple[Hashable, ...], parent: Node | None, slot: int, toks: tuple[int, ...] | None = None
    ) -> None:
        self.seg = seg
        self.toks = toks
        self.parent = parent
        self.children: dict[Hashable, Node] = {}
        self.slot = slot
        self.next_slot = 0
        self.requests: set[Hashable] | None = None
        self.depth: int = (parent.depth if parent is not None else 0) + len(seg)
        self.subtree = 0  # live requests ending in this subtree
        self.last_access = 0
        self.alive = True

    @property
    def tokens(self) -> int:
        return sum(self.toks) if self.toks is not None else len(self.seg)

    def __repr__(self) -> str:  # pragma: no cover - debugging aid
        return f"Node(seg={self.seg!r}, slot={self.slot}, depth={self.depth}, n_req={len(self.requests or ())})"


@dataclass
class Match:
    """Where a request's reusable prefix ends: at ``node``, plus ``m`` blocks into ``child``'s segment."""

    node: Node
    child: Node | None = None
    m: int = 0
    hits: int = 0  # request blocks in the prefix
    extras: int = 0  # blocks of the prefix the request lacks (superset and swap only)

    @property
    def length(self) -> int:
        """Blocks in the prefix (request blocks + extras): what the cache reuses."""
        return self.node.depth + self.m

    @property
    def end(self) -> Node:
        """The node holding the prefix's last block."""
        return self.child if self.child is not None and self.m else self.node

    def blocks(self) -> tuple[Hashable, ...]:
        """The prefix itself."""
        prefix = prefix_of(self.node)
        if self.child is not None and self.m:
            prefix += self.child.seg[: self.m]
        return prefix


def children_in(node: Node, req: Mapping[Hashable, int]) -> Sequence[Node]:
    """``node``'s children whose first block is in ``req`` (iterating the smaller side)."""
    children = node.children
    if not children:
        return ()
    if len(children) <= len(req):
        return [c for b, c in children.items() if b in req]
    get = children.get
    return [c for c in map(get, req) if c is not None]


def prefix_of(node: Node) -> tuple[Hashable, ...]:
    """Full block order from the root down to ``node``."""
    segs = []
    while node.parent is not None:
        segs.append(node.seg)
        node = node.parent
    out: list[Hashable] = []
    for seg in reversed(segs):
        out.extend(seg)
    return tuple(out)


def path_of(node: Node) -> tuple[int, ...]:
    """Search path (slots from the root) of ``node``."""
    slots = []
    while node.parent is not None:
        slots.append(node.slot)
        node = node.parent
    return tuple(reversed(slots))


def _new_child(parent: Node, seg: tuple[Hashable, ...], toks: tuple[int, ...] | None) -> Node:
    child = Node(seg, parent, parent.next_slot, toks)
    parent.next_slot += 1
    parent.children[seg[0]] = child
    return child


def _split(node: Node, at: int) -> Node:
    """Split ``node`` after ``at`` blocks; the upper part takes its place and slot. Returns the upper part."""
    parent = node.parent
    assert parent is not None and 0 < at < len(node.seg)
    upper = Node(node.seg[:at], parent, node.slot, node.toks[:at] if node.toks is not None else None)
    upper.subtree = node.subtree
    upper.last_access = node.last_access
    parent.children[upper.seg[0]] = upper
    node.seg = node.seg[at:]
    if node.toks is not None:
        node.toks = node.toks[at:]
    node.parent = upper
    node.slot = 0
    upper.next_slot = 1
    upper.children[node.seg[0]] = node
    return upper


def radix_insert(root: Node, order: Sequence[Hashable], toks: Sequence[int] | None) -> tuple[Node, list[Node], int]:
    """Insert ``order`` (distinct blocks) below ``root``; split nodes where it diverges.

    Returns the node where the order ends, the nodes created with new blocks (for token accounting) and
    the number of splits (nodes created without new blocks).
    """
    node = root
    i = 0
    n = len(order)
    created: list[Node] = []
    splits = 0
    while i < n:
        child = node.children.get(order[i])
        if child is None:
            leaf = _new_child(node, tuple(order[i:]), tuple(toks[i:]) if toks is not None else None)
            created.append(leaf)
            return leaf, created, splits
        seg = child.seg
        j = 1
        limit = min(len(seg), n - i)
        while j < limit and seg[j] == order[i + j]:
            j += 1
        if j < len(seg):
            child = _split(child, j)
            splits += 1
        node = child
        i += j
    return node, created, splits


def remove_leaf(node: Node) -> Node:
    """Unlink a childless node from its parent; returns the parent."""
    parent = node.parent
    assert parent is not None and not node.children
    del parent.children[node.seg[0]]
    node.alive = False
    return parent
