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

Beyond the paper, a request may adopt a cached prefix holding blocks it did not retrieve: superset
alignment adds them, swap alignment replaces its lowest-ranked blocks with them (:mod:`cp_memory.core.superset`;
the choice is one :class:`~cp_memory.core.alignment_mode.AlignmentMode`).
:func:`align_request` puts it together for one request; the index calls it for insert and match.
"""

from __future__ import annotations

import math
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal, get_args

from .alignment_mode import AlignmentKind, AlignmentMode
from .superset import superset_prefix, swap_prefix
from .tree import Match, Node

__all__ = [
    "DEFAULT_TAIL_ORDER",
    "TAIL_ORDERS",
    "Alignment",
    "Match",
    "TailOrder",
    "align_request",
    "longest_prefix",
    "order_tail",
    "protected_count",
]

#: How the blocks after the matched prefix are ordered (module doc).
TailOrder = Literal["frequency", "retrieval"]
TAIL_ORDERS: tuple[TailOrder, ...] = get_args(TailOrder)
#: the default tail order (measured by benchmarks/index_bench.py; the one source of this default)
DEFAULT_TAIL_ORDER: TailOrder = "frequency"


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
        cands: Sequence[Node]
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


def order_tail(
    blocks: Sequence[Hashable], rank: Mapping[Hashable, int], freq: Mapping[Hashable, int], policy: TailOrder
) -> list[Hashable]:
    """Order the blocks after the matched prefix (see module doc)."""
    if policy == "retrieval" or len(blocks) < 2:
        return list(blocks)
    if policy == "frequency":
        get = freq.get
        return sorted(blocks, key=lambda b: (-get(b, 0), rank[b]))
    raise ValueError(f"tail_order must be one of {TAIL_ORDERS}, got {policy!r}")


def protected_count(n: int, protect: float) -> int:
    """How many top-ranked blocks of an ``n``-block request swap alignment never drops: ``ceil(protect*n)``."""
    return min(n, math.ceil(protect * n - 1e-9))


@dataclass(frozen=True)
class Alignment:
    """One request's alignment: ``order`` = prefix + tail; ``extra`` adopted blocks it did not retrieve,
    ``dropped`` its own blocks left out for them (swap only), ``match`` where the prefix ends."""

    order: tuple[Hashable, ...]
    prefix_len: int
    extra: tuple[Hashable, ...]
    dropped: tuple[Hashable, ...]
    match: Match


def align_request(
    root: Node,
    blocks: Sequence[Hashable],
    freq: Mapping[Hashable, int],
    *,
    tail_order: TailOrder = DEFAULT_TAIL_ORDER,
    mode: AlignmentMode | None = None,
) -> Alignment:
    """Align distinct ``blocks`` (retrieval order) against the trie under ``root``; changes nothing.

    Exact matched prefix; then, when ``mode`` is superset or swap, a wider prefix if it reuses more (see
    :mod:`cp_memory.core.superset`); the request's remaining blocks follow in ``tail_order``. ``mode`` None:
    exact alignment.
    """
    if mode is None:
        mode = AlignmentMode()
    n = len(blocks)
    rank = {b: i for i, b in enumerate(blocks)}
    match = longest_prefix(root, rank)
    protected = n
    swapping = mode.kind is AlignmentKind.SWAP
    if mode.kind is AlignmentKind.SUPERSET and root.children:
        budget = int(mode.budget * n)
        if budget > 0:
            wider = superset_prefix(root, rank, budget)
            if (wider.hits, -wider.extras) > (match.hits, -match.extras):
                match = wider
    elif swapping and root.children:
        budget = int(mode.budget * n)
        protected = protected_count(n, mode.protect)
        if budget > 0 and protected < n:
            wider = swap_prefix(root, rank, budget, protected)
            if wider.length > match.length:
                match = wider
    prefix = match.blocks()
    in_prefix = set(prefix)
    extra = tuple(b for b in prefix if b not in rank)
    dropped: tuple[Hashable, ...] = ()
    if extra and swapping:
        # the lowest-ranked droppable blocks not on the prefix, one per extra (reported in rank order)
        spare = [b for b in blocks[protected:] if b not in in_prefix]
        dropped = tuple(spare[len(spare) - len(extra) :])
        in_prefix.update(dropped)
    rest = [b for b in blocks if b not in in_prefix]
    tail = order_tail(rest, rank, freq, tail_order)
    return Alignment(prefix + tuple(tail), len(prefix), extra, dropped, match)
