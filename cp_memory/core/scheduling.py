"""Request scheduling (paper §5.2, Algorithm 5).

Requests whose contexts share a prefix should run back to back, before the engine evicts that prefix:

1. group requests by the first element of their search path (one group per root branch = cache region);
2. inside a group, longer search paths (longer shared prefixes) first; arrival order breaks ties;
3. larger groups first; concatenate.

Example (Fig. 6): arrival C6 [0,0,2], C3 [0,1], C7 [1], C8 [0,0,3] → C6, C8, C3, C7.
Requests with an empty search path (empty contexts) form their own group.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

__all__ = ["schedule"]


def _path(item: Any, i: int) -> tuple[int, ...]:
    path = getattr(item, "search_path", item)
    if path is None or isinstance(path, (str, bytes)) or not isinstance(path, Sequence):
        raise TypeError(
            f"placements[{i}] must be a Placement or a search path (sequence of ints), got {type(item).__name__}"
        )
    return tuple(path)


def schedule(placements: Sequence[Any]) -> list[int]:
    """Execution order for a batch, as indices into ``placements`` (Placements or search paths)."""
    if placements is None or not isinstance(placements, Sequence):
        raise TypeError(f"placements must be a list, got {type(placements).__name__}")
    groups: dict[Any, list[int]] = {}
    paths = [_path(p, i) for i, p in enumerate(placements)]
    for i, path in enumerate(paths):
        groups.setdefault(path[0] if path else None, []).append(i)
    ordered = []
    for members in groups.values():
        members.sort(key=lambda i: -len(paths[i]))  # stable: arrival order among equals
        ordered.append(members)
    ordered.sort(key=len, reverse=True)  # stable: first-seen group first among equals
    return [i for members in ordered for i in members]
