"""Which LoCoMo conversations a run takes: ``--conversations all | 3 | 0,3,5 | 0-4 | conv-26``.

One parser for every benchmark that picks conversations (the LoCoMo and scale-out benchmarks), so the
spec reads the same in each and no benchmark imports another's command line.
"""

from __future__ import annotations

from collections.abc import Sequence

from .locomo import Conversation

__all__ = ["select_conversations"]


def select_conversations(spec: str, convs: Sequence[Conversation]) -> list[tuple[int, Conversation]]:
    """``all`` | ``3`` | ``0,3,5`` | ``0-4`` (indices into LoCoMo's list) | sample ids such as ``conv-26``;
    (index, conversation) pairs in the order asked, each once."""
    spec = spec.strip()
    if spec == "all":
        return list(enumerate(convs))
    by_id = {c.sample_id: i for i, c in enumerate(convs)}
    picked: list[int] = []
    for part in (p.strip() for p in spec.split(",")):
        if not part:
            continue
        if part in by_id:
            picked.append(by_id[part])
        elif "-" in part and all(x.strip().isdigit() for x in part.split("-", 1)):
            a, b = (int(x) for x in part.split("-", 1))
            picked += list(range(a, b + 1))
        elif part.isdigit():
            picked.append(int(part))
        else:
            raise ValueError(f"bad conversation {part!r}: use all, indices (0,3), ranges (0-4) or sample ids")
    bad = [i for i in picked if not 0 <= i < len(convs)]
    if bad:
        raise ValueError(f"conversation index {bad} out of range 0-{len(convs) - 1}")
    return [(i, convs[i]) for i in dict.fromkeys(picked)]
