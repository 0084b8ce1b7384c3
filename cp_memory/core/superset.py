"""Adopting a cached prefix that holds blocks the request did not retrieve (not in the paper).

Exact alignment (:func:`~cp_memory.core.alignment.longest_prefix`) reuses only prefixes made of the request's
own blocks. When a live context's prefix holds most of the request's blocks plus a few others, adopting
that prefix reuses far more cache. Two modes, one option each on :class:`~cp_memory.core.index.ContextIndex`:

* **superset** (``extra_budget``, :func:`superset_prefix`): the prompt *adds* up to ``B`` unretrieved
  blocks; every retrieved block stays, the prompt grows by up to ``B`` blocks. The prefix is chosen to
  cover the most request blocks, then with the fewest extras, and ends on a request block.
* **swap** (``swap_budget`` + ``protect``, :func:`swap_prefix`): length-neutral. Each adopted extra
  *replaces* one of the request's lowest-ranked blocks that is not on the prefix and not in the top
  ``protect`` fraction of the ranking, so the prompt keeps exactly as many blocks as were retrieved. The
  prefix is chosen to maximise what the engine really reuses — the prefix length in blocks, extras
  included — then with the fewest extras (fewest retrieved blocks dropped).

The two are exclusive (the index validates it): superset trades prompt length for reuse, swap trades the
lowest-ranked evidence for reuse at constant length. Both searches visit children that do not start with
a request block only at nodes with at most ``max_branch`` children (the most requested first) and at most
``max_visits`` nodes; callers keep the exact result when it is not beaten, so exact alignment's guarantee
(no live context offers a longer request-only prefix) always holds.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping

from .tree import Match, Node, children_in

__all__ = ["superset_prefix", "swap_prefix"]


def _superset_key(m: Match) -> tuple[int, int, bool, int]:
    full = m.child is None
    subtree = m.node.subtree if m.child is None else m.child.subtree
    return (m.hits, -m.extras, full, subtree)


def superset_prefix(
    root: Node, req: Mapping[Hashable, int], budget: int, *, max_branch: int = 64, max_visits: int = 20_000
) -> Match:
    """Best cached prefix holding at most ``budget`` blocks outside ``req``; ends on a request block.

    Maximises the request blocks covered, then fewer extras (then a match ending at a node, then the
    busier subtree).
    """
    best = Match(root)
    best_key = _superset_key(best)
    stack: list[tuple[Node, int, int]] = [(root, 0, 0)]
    visits = 0
    while stack and visits < max_visits:
        node, hits, extras = stack.pop()
        visits += 1
        children = node.children
        if not children:
            continue
        cands = _candidates(node, req, extras < budget, max_branch)
        for child in cands:
            h, x = hits, extras
            full = True
            for i, b in enumerate(child.seg):
                if b in req:
                    h += 1
                    if i + 1 < len(child.seg):
                        cand = Match(node, child, i + 1, h, x)
                        key = _superset_key(cand)
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
                    key = _superset_key(cand)
                    if key > best_key:
                        best, best_key = cand, key
                if child.children:
                    stack.append((child, h, x))
    return best


def swap_prefix(
    root: Node,
    req: Mapping[Hashable, int],
    budget: int,
    protected: int,
    *,
    max_branch: int = 64,
    max_visits: int = 20_000,
) -> Match:
    """Longest cached prefix whose extras can each replace a droppable request block.

    ``req`` maps the request's blocks to their retrieval rank (0 = best). Ranks ``>= protected`` are
    droppable. A prefix is feasible when its extras ``x`` satisfy ``x <= budget`` and ``x <=`` the
    droppable blocks *not* on the prefix. Maximises the prefix length (request blocks + extras: the
    engine's reuse), then fewer extras, then a match ending at a node, then the busier subtree. Feasibility
    only shrinks as a path grows, so the search stops descending at the first infeasible block.
    """
    droppable = sum(1 for r in req.values() if r >= protected)
    best = Match(root)
    best_key = (0, 0, True, root.subtree)
    stack: list[tuple[Node, int, int, int]] = [(root, 0, 0, 0)]  # node, hits, extras, droppable hits
    visits = 0
    get = req.get
    while stack and visits < max_visits:
        node, hits, extras, dhits = stack.pop()
        visits += 1
        children = node.children
        if not children:
            continue
        cands = _candidates(node, req, extras < budget, max_branch)
        for child in cands:
            h, x, d = hits, extras, dhits
            m = 0
            at = (h, x)
            for b in child.seg:
                r = get(b)
                if r is None:
                    x += 1
                else:
                    h += 1
                    if r >= protected:
                        d += 1
                if x > budget or x > droppable - d:
                    break
                m += 1
                at = (h, x)
            if m == 0:
                continue
            full = m == len(child.seg)
            cand = Match(child, None, 0, *at) if full else Match(node, child, m, *at)
            key = (cand.length, -cand.extras, full, child.subtree)
            if key > best_key:
                best, best_key = cand, key
            if full and child.children:
                stack.append((child, at[0], at[1], d))
    return best


def _candidates(node: Node, req: Mapping[Hashable, int], may_adopt: bool, max_branch: int) -> list[Node]:
    """Children to explore: all of them (largest subtree first) while extras may still be adopted and the
    node is not too wide, else only those whose first block the request holds."""
    if may_adopt and len(node.children) <= max_branch:
        return sorted(node.children.values(), key=lambda c: c.subtree, reverse=True)
    return list(children_in(node, req))
