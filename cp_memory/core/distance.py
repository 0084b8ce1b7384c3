"""Context distance (paper Eq. 1), scalar and vectorised for the batch build.

    d(i, j) = 1 - |S_ij| / max(|C_i|, |C_j|) + alpha * sum_{k in S_ij} |p_i(k) - p_j(k)| / |S_ij|

``S_ij`` are the blocks contexts i and j share, ``p_i(k)`` the position of block k in context i. The
overlap term dominates (alpha in [0.001, 0.01]); the positional term breaks ties in favour of contexts
that share blocks at the same positions. Disjoint contexts are at distance 1.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import numpy as np
import numpy.typing as npt
import scipy.sparse as sp  # type: ignore[import-untyped]

__all__ = ["DEFAULT_ALPHA", "context_distance", "pairwise_distances"]

DEFAULT_ALPHA = 0.001


def context_distance(a: Sequence[Hashable], b: Sequence[Hashable], alpha: float = DEFAULT_ALPHA) -> float:
    """Eq. 1 between two contexts (ordered block ids, no repeats)."""
    if not a or not b:
        return 1.0
    pa = {x: i for i, x in enumerate(a)}
    pb = {x: i for i, x in enumerate(b)}
    shared = [x for x in pa if x in pb]
    if not shared:
        return 1.0
    pos = sum(abs(pa[x] - pb[x]) for x in shared) / len(shared)
    return 1.0 - len(shared) / max(len(pa), len(pb)) + alpha * pos


def pairwise_distances(contexts: Sequence[Sequence[Hashable]], alpha: float = DEFAULT_ALPHA) -> npt.NDArray[np.float64]:
    """Condensed (scipy ``pdist``-style) Eq. 1 distance vector for ``n`` contexts.

    Overlap counts come from one sparse product ``A @ A.T``; the positional sums from one dense update per
    block shared by several contexts, so the cost follows the number of sharing pairs, not n² Python work.
    """
    n = len(contexts)
    if n < 2:
        return np.zeros(0, dtype=np.float64)
    ids: dict[Hashable, int] = {}
    rows, cols, poss = [], [], []
    lens = np.empty(n, dtype=np.float64)
    for i, ctx in enumerate(contexts):
        lens[i] = len(ctx)
        for p, b in enumerate(ctx):
            rows.append(i)
            cols.append(ids.setdefault(b, len(ids)))
            poss.append(p)
    rows_a = np.asarray(rows, dtype=np.int64)
    cols_a = np.asarray(cols, dtype=np.int64)
    pos_a = np.asarray(poss, dtype=np.float64)
    incidence = sp.csr_matrix((np.ones(len(rows_a), dtype=np.float64), (rows_a, cols_a)), shape=(n, len(ids)))
    shared = (incidence @ incidence.T).toarray()

    displacement = np.zeros((n, n), dtype=np.float64)
    order = np.argsort(cols_a, kind="stable")
    cols_sorted = cols_a[order]
    bounds = np.flatnonzero(np.diff(cols_sorted)) + 1
    starts = np.concatenate(([0], bounds))
    ends = np.concatenate((bounds, [len(cols_sorted)]))
    for s0, e0 in zip(starts, ends):
        if e0 - s0 < 2:
            continue
        sel = order[s0:e0]
        who = rows_a[sel]
        at = pos_a[sel]
        displacement[np.ix_(who, who)] += np.abs(at[:, None] - at[None, :])

    longest = np.maximum(lens[:, None], lens[None, :])
    with np.errstate(divide="ignore", invalid="ignore"):
        dist = 1.0 - shared / longest + alpha * displacement / shared
    dist[shared == 0] = 1.0
    np.fill_diagonal(dist, 0.0)
    iu = np.triu_indices(n, k=1)
    out: npt.NDArray[np.float64] = dist[iu]
    return out
