"""Brute-force oracles shared by the index property tests (what the exact search must match)."""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence

from cp_memory.core.index import ContextIndex


def live_orders(index: ContextIndex) -> list[tuple[Hashable, ...]]:
    """The aligned order of every live request of ``index``."""
    return [index.order_of(r) for r in index.request_ids()]  # type: ignore[misc]


def best_reusable_prefix(orders: Iterable[Sequence[Hashable]], blocks: Iterable[Hashable]) -> int:
    """Longest prefix of any live order made only of ``blocks``: what no alignment may beat."""
    wanted = set(blocks)
    best = 0
    for order in orders:
        n = 0
        while n < len(order) and order[n] in wanted:
            n += 1
        best = max(best, n)
    return best
