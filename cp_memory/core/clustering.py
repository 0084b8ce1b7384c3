"""Offline index construction (paper §4.1, Algorithm 4).

1. Eq. 1 distances between all distinct contexts, hierarchical clustering (scipy ``linkage``).
2. Leaves are contexts; contexts with the same blocks share one leaf (and so get the same order).
3. Each merge makes an internal node holding the intersection of its children's blocks.
4. Empty internal nodes are dropped (their children hang from the root).
5. Top-down, each node inherits its parent's order as its prefix and appends its own new blocks.

The paper orders an internal node's new blocks as a "sorted intersection". We sort them by how many
contexts of the batch contain them (most first), ties by id: the most shared blocks lead, which is what
lets the most contexts share a prefix, and it reproduces Fig. 4 (C4 = {1, 2}: block 1 is in all three
contexts). A leaf's own new blocks follow the index's tail policy (retrieval order, or frequency first).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any, Literal, get_args

import numpy as np
from scipy.cluster.hierarchy import linkage  # type: ignore[import-untyped]

from .alignment import TailOrder
from .distance import DEFAULT_ALPHA, pairwise_distances

__all__ = ["DEFAULT_LINKAGE", "LINKAGES", "Linkage", "cluster_orders"]

#: scipy ``linkage`` methods that are defined for an arbitrary (non-Euclidean) distance such as Eq. 1.
Linkage = Literal["average", "single", "complete", "weighted"]
LINKAGES: tuple[Linkage, ...] = get_args(Linkage)
DEFAULT_LINKAGE: Linkage = "average"


def _id_sort_key(ids: Sequence[Hashable]) -> Callable[[Hashable], Any]:
    try:
        sorted(ids)  # type: ignore[type-var]  # ids of one comparable type sort as themselves
        return lambda b: b
    except TypeError:
        return lambda b: (type(b).__name__, repr(b))


def cluster_orders(
    contexts: Sequence[Sequence[Hashable]],
    *,
    alpha: float = DEFAULT_ALPHA,
    method: Linkage = DEFAULT_LINKAGE,
    tail_order: TailOrder = "frequency",
) -> list[tuple[Hashable, ...]]:
    """Aligned order for each context of a batch (Algorithm 4). Contexts must hold distinct ids."""
    leaves, leaf_of = _leaves(contexts)
    if not leaves:
        return [() for _ in contexts]
    content, parent = _merge_tree(leaves, alpha, method)
    freq = Counter(b for ctx in contexts for b in ctx)
    orders = _top_down_orders(leaves, content, parent, freq, tail_order)
    return [orders[u] if u >= 0 else () for u in leaf_of]


def _leaves(contexts: Sequence[Sequence[Hashable]]) -> tuple[list[Sequence[Hashable]], list[int]]:
    """Step 2: one leaf per distinct block set (its first context in the batch), and each context's leaf
    (-1 for an empty context)."""
    uniq: dict[frozenset[Hashable], int] = {}
    leaves: list[Sequence[Hashable]] = []
    leaf_of = []
    for ctx in contexts:
        if not ctx:
            leaf_of.append(-1)
            continue
        key = frozenset(ctx)
        u = uniq.get(key)
        if u is None:
            u = uniq[key] = len(leaves)
            leaves.append(ctx)
        leaf_of.append(u)
    return leaves, leaf_of


def _merge_tree(
    leaves: Sequence[Sequence[Hashable]], alpha: float, method: Linkage
) -> tuple[list[frozenset[Hashable]], list[int]]:
    """Steps 1 and 3: the clustering tree as each node's blocks (leaves first, then one internal node per
    merge, holding the intersection of its children) and each node's parent (-1: the root)."""
    m = len(leaves)
    content: list[frozenset[Hashable]] = [frozenset(r) for r in leaves]
    parent = [-1] * m
    if m > 1:
        z = linkage(pairwise_distances(leaves, alpha), method=method)
        parent.extend([-1] * (m - 1))
        for i, (a, b) in enumerate(np.asarray(z[:, :2], dtype=np.int64)):
            v = m + i
            content.append(content[a] & content[b])
            parent[a] = parent[b] = v
    return content, parent


def _top_down_orders(
    leaves: Sequence[Sequence[Hashable]],
    content: Sequence[frozenset[Hashable]],
    parent: Sequence[int],
    freq: Counter[Hashable],
    tail_order: TailOrder,
) -> list[tuple[Hashable, ...]]:
    """Steps 4 and 5: each node's order, its parent's order followed by its own new blocks (empty internal
    nodes dropped: their children hang from the root)."""
    idkey = _id_sort_key(list(freq))

    def shared_order(blocks: Iterable[Hashable]) -> list[Hashable]:
        return sorted(blocks, key=lambda b: (-freq[b], idkey(b)))

    def leaf_order(ctx: Sequence[Hashable], own: set[Hashable]) -> list[Hashable]:
        rest = [b for b in ctx if b in own]
        if tail_order == "frequency":
            rank = {b: i for i, b in enumerate(ctx)}
            rest.sort(key=lambda b: (-freq[b], rank[b]))
        return rest

    m = len(leaves)
    total = len(content)
    # drop empty internal nodes: intersections only shrink upwards, so above an empty node all are empty
    eff = [p if p >= 0 and content[p] else -1 for p in parent]
    docs: list[tuple[Hashable, ...]] = [()] * total
    for v in range(total - 1, -1, -1):  # linkage numbers parents after their children
        if v >= m and not content[v]:
            continue
        p = eff[v]
        base = docs[p] if p >= 0 else ()
        own = content[v] - content[p] if p >= 0 else content[v]
        if v < m:
            docs[v] = base + tuple(leaf_order(leaves[v], set(own)))
        else:
            docs[v] = base + tuple(shared_order(own))
    return docs
