"""Context alignment (paper §5, Algorithms 1–2), aimed at what a prefix cache can reuse.

A request's blocks are aligned as **matched prefix + tail**:

* the **matched prefix** is the longest prefix of any live indexed context made only of the request's
  blocks. The paper's Algorithm 1 descends greedily by Eq. 1 distance and stops when children are
  equidistant; greedy descent can pick a branch that shares blocks but not a *prefix*, and an engine only
  reuses exact prefixes. We search the trie exhaustively instead (:func:`longest_prefix`): every node whose
  path consists of request blocks is visited, so no live context offers a longer reusable prefix than the
  one chosen. The cost is bounded by the number of such nodes, which alignment itself keeps small.
  Ties: a match ending exactly at a node (no split, the paper's "stop at an internal node") beats one
  ending inside a node's segment, then the subtree serving more requests wins. This reproduces Fig. 5
  (C6 {2,1,4} stops at C4 {1,2} rather than C3's prefix {1,4}).
* the **tail** — the request's remaining blocks — is ordered for *future* requests. ``"retrieval"`` keeps
  the retrieval order (the paper); ``"frequency"`` puts blocks that more live contexts contain first
  (ties in retrieval order), so the next request that shares them extends this prefix further. The
  benchmark (benchmarks/index_bench.py) measures both on LoCoMo; the default follows it.

Superset alignment (:func:`superset_prefix`, not in the paper): a request may adopt a cached prefix that
contains up to ``budget`` blocks it did not retrieve, when that reaches more of its own blocks.
"""
from __future__ import annotations

from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, get_args

from .tree import Node

__all__ = ["Match", "longest_prefix", "superset_prefix", "order_tail", "TailOrder", "TAIL_ORDERS"]

#: How the blocks after the matched prefix are ordered (module doc).
TailOrder = Literal["frequency", "retrieval"]
TAIL_ORDERS: tuple[TailOrder, ...] = get_args(TailOrder)


@dataclass
class Match:
    """Where a request's reusable prefix ends: at ``node``, plus ``m`` blocks into ``child``'s segment."""

    node: Node
    child: Node | None = None
    m: int = 0
    hits: int = 0        # request blocks in the prefix
    extras: int = 0      # blocks of the prefix the request lacks (superset mode only)

    @property
    def length(self) -> int:
        return self.node.depth + self.m

    def key(self) -> tuple:
        full = self.child is None
        subtree = self.node.subtree if full else self.child.subtree  # type: ignore[union-attr]
        return (self.hits, -self.extras, full, subtree)


def _candidates(node: Node, req: Mapping[Hashable, int]):
    children = node.children
    if not children:
        return ()
    if len(children) <= len(req):
        return [c for b, c in children.items() if b in req]
    get = children.get
    return [c for c in map(get, req) if c is not None]


def longest_prefix(root: Node, req: Mapping[Hashable, int]) -> Match:
    """Exhaustive search for the longest prefix, made only of ``req``'s blocks, of any path in the trie.

    Visits exactly the nodes whose path consists of request blocks (hot path: kept flat and inlined).
    """
    best_node, best_child, best_m = root, None, 0
    best_key = (0, True, root.subtree)
    nreq = len(req)
    stack = [root]
    pop, push = stack.pop, stack.append
    while stack:
        node = pop()
        children = node.children
        if len(children) == 1:
            for b, c in children.items():
                cands = (c,) if b in req else ()
        elif len(children) <= nreq:
            cands = [c for b, c in children.items() if b in req]
        else:
            get = children.get
            cands = [c for c in map(get, req) if c is not None]
        base = node.depth
        for child in cands:
            seg = child.seg
            n = len(seg)
            m = 1
            while m < n and seg[m] in req:
                m += 1
            full = m == n
            if full and child.children:
                push(child)
            hits = base + m
            if hits < best_key[0]:
                continue
            key = (hits, full, child.subtree)
            if key > best_key:
                best_key = key
                if full:
                    best_node, best_child, best_m = child, None, 0
                else:
                    best_node, best_child, best_m = node, child, m
    return Match(best_node, best_child, best_m, best_key[0])


def superset_prefix(root: Node, req: Mapping[Hashable, int], budget: int, *, max_branch: int = 64,
                    max_visits: int = 20_000) -> Match:
    """Best cached prefix holding at most ``budget`` blocks outside ``req``; ends on a request block.

    Maximises the request blocks covered, then fewer extras. Children not starting with a request block are
    explored only at nodes with at most ``max_branch`` children (the most requested first), and at most
    ``max_visits`` nodes are visited; callers keep the exact :func:`longest_prefix` result when this one
    is not better, so the guarantee on request-only prefixes always holds.
    """
    best = Match(root)
    best_key = best.key()
    stack: list[tuple[Node, int, int]] = [(root, 0, 0)]
    visits = 0
    while stack and visits < max_visits:
        node, hits, extras = stack.pop()
        visits += 1
        children = node.children
        if not children:
            continue
        if extras < budget and len(children) <= max_branch:
            cands = sorted(children.values(), key=lambda c: c.subtree, reverse=True)
        else:
            cands = _candidates(node, req)
        for child in cands:
            h, x = hits, extras
            full = True
            for i, b in enumerate(child.seg):
                if b in req:
                    h += 1
                    if i + 1 < len(child.seg):
                        cand = Match(node, child, i + 1, h, x)
                        key = cand.key()
                        if key > best_key:
                            best, best_key = cand, key
                else:
                    x += 1
                    if x > budget:
                        full = False
                        break
            if full:
                if child.seg[-1] in req:
                    cand = Match(child, None, 0, h, x)
                    key = cand.key()
                    if key > best_key:
                        best, best_key = cand, key
                if child.children:
                    stack.append((child, h, x))
    return best


def order_tail(blocks: Sequence[Hashable], rank: Mapping[Hashable, int], freq: Mapping[Hashable, int],
               policy: TailOrder) -> list[Hashable]:
    """Order the blocks after the matched prefix (see module doc)."""
    if policy == "retrieval" or len(blocks) < 2:
        return list(blocks)
    if policy == "frequency":
        get = freq.get
        return sorted(blocks, key=lambda b: (-get(b, 0), rank[b]))
    raise ValueError(f"tail_order must be one of {TAIL_ORDERS}, got {policy!r}")
