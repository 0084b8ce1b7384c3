"""The store decides: which candidate memories does the caller's filter set admit *now*?

Superset/swap extras come from cached prefixes of the same scope; each was returned by mem0 for these
very filters once, but its payload may have changed since (tagged ``archived``, re-categorised, expired)
with its text unchanged. mem0's public API cannot ask "which of these ids match these filters": memory ids
are Qdrant point ids, not payload fields, so no filter names them, and ``get_all`` cannot be restricted to
ids (it would read the whole scope). For mem0's Qdrant store — plain, serialised or partitioned
(:mod:`cp_memory.embedded.local_qdrant`) — :func:`store_admission` therefore asks Qdrant itself, **once per search**:
one scroll over exactly the candidate ids, with mem0's own translation of the caller's filters
(``Qdrant._create_filter``, the one ``get_all`` uses; ``search`` applies the same translation after merging
top-level ``AND`` conditions, which can only drop conditions) ANDed to a ``HasIdCondition``. The answer holds
the admitted ids with their current payloads, so no per-extra ``get`` is needed.

Any other vector store, or the hosted platform, cannot be asked: the checker is None and the pipeline then
only admits extras of scopes made of entity ids alone (:meth:`.pipeline.SearchPipeline.reads_extras`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Any

from ..core.scope import ENTITY_KEYS

__all__ = ["Admitted", "admitted_payloads", "direct_filters", "store_admission"]

logger = logging.getLogger(__name__)

#: memory id -> its current payload, for the candidates the store admits; None: this store cannot decide
Admitted = dict[str, dict[str, Any]]
Checker = Callable[[Sequence[str], Mapping[str, Any]], Admitted | None]
AsyncChecker = Callable[[Sequence[str], Mapping[str, Any]], Awaitable[Admitted | None]]


def direct_filters(filters: Mapping[str, Any]) -> dict[str, Any]:
    """The caller's filters with mem0's normalisation of top-level entity ids (``str()``, trimmed)."""
    out = dict(filters)
    for key in ENTITY_KEYS:
        if out.get(key) is not None:
            out[key] = str(out[key]).strip()
    return out


def _respelled(filters: Any) -> bool:
    """Whether ``filters`` spells a logical key mem0's way (``$or``/``$not``/``$and``): mem0's search then
    overwrites conditions with others, so the filters as written no longer bound what it admits."""
    if isinstance(filters, Mapping):
        return any(str(k).startswith("$") or _respelled(v) for k, v in filters.items())
    if isinstance(filters, list):
        return any(_respelled(v) for v in filters)
    return False


def _qdrant_class() -> Any:
    """mem0's Qdrant store class (None without mem0's Qdrant extra)."""
    try:
        from mem0.vector_stores.qdrant import Qdrant
    except ImportError:  # pragma: no cover - mem0 is a dependency of this package
        return None
    return Qdrant


@contextlib.contextmanager
def _unlocked(store: Any) -> Iterator[Any]:
    yield store


def _collections(vector_store: Any, filters: Mapping[str, Any]) -> list[contextlib.AbstractContextManager[Any]]:
    """Context managers yielding the stores a search with ``filters`` reads (holding their lock where the
    collection is shared with other threads)."""
    from ..embedded.local_qdrant import SerialisedStore, UserPartitionedQdrant

    parts = vector_store.partitions_for(filters) if isinstance(vector_store, UserPartitionedQdrant) else [vector_store]
    return [part.held() if isinstance(part, SerialisedStore) else _unlocked(part) for part in parts]


def admitted_payloads(memory: Any, memory_ids: Sequence[str], filters: Mapping[str, Any]) -> Admitted | None:
    """The candidates among ``memory_ids`` that ``memory``'s Qdrant store matches for ``filters``, with their
    payloads; None when ``memory`` has no mem0 Qdrant store to ask. Raises what Qdrant raises."""
    qdrant = _qdrant_class()
    vector_store = getattr(memory, "vector_store", None)
    if qdrant is None or vector_store is None:
        return None
    from qdrant_client import models

    direct = direct_filters(filters)
    ids = list(dict.fromkeys(str(i) for i in memory_ids))
    out: Admitted = {}
    if _respelled(direct):
        return out  # nothing can be proven
    for part in _collections(vector_store, direct):
        with part as held:
            store: Any = held
            if not isinstance(store, qdrant) or not callable(getattr(store, "_create_filter", None)):
                return None
            if not ids:
                continue
            try:
                built = store._create_filter(direct)
            except (ValueError, TypeError):  # pydantic's ValidationError is a ValueError
                # mem0's search merged top-level AND conditions into something it accepts; as written, the
                # filters are refused: nothing is proven, nothing is admitted
                logger.debug("mem0's Qdrant store refuses the filters as written: %r", direct, exc_info=True)
                return {}
            must: list[Any] = [models.HasIdCondition(has_id=ids)]
            if built is not None:
                must.append(built)
            points, _ = store.client.scroll(
                collection_name=store.collection_name,
                scroll_filter=models.Filter(must=must),
                limit=len(ids),
                with_payload=True,
                with_vectors=False,
            )
        for point in points:
            out[str(point.id)] = dict(point.payload or {})
    return out


def store_admission(memory: Any, *, asynchronous: bool = False) -> Checker | AsyncChecker:
    """The store check for a wrapped mem0 ``Memory`` (``asynchronous``: for ``AsyncMemory``, run in a thread
    like mem0's own vector-store calls). It returns None when the store cannot decide."""

    def check(memory_ids: Sequence[str], filters: Mapping[str, Any]) -> Admitted | None:
        return admitted_payloads(memory, memory_ids, filters)

    if not asynchronous:
        return check

    async def acheck(memory_ids: Sequence[str], filters: Mapping[str, Any]) -> Admitted | None:
        return await asyncio.to_thread(check, memory_ids, filters)

    return acheck
