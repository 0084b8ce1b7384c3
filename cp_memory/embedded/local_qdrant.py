"""Local Qdrant for mem0, made safe and fast for many users: per-collection locks, one collection per user.

* :class:`CollectionLocks` / :class:`SerialisedStore` — qdrant-client's local mode is not thread-safe, so
  every call into a local collection holds that collection's lock;
* :class:`UserPartitionedQdrant` — a mem0 vector store with one collection per user (else agent, else run),
  because local mode filters payloads point by point in Python.

Used by :func:`cp_memory.embedded.default_memory`; nothing here is needed with a Qdrant server.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import threading
import warnings
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from ..core.scope import ENTITY_KEYS, entity_partition

__all__ = [
    "PARTITION_KEYS",
    "CollectionLocks",
    "SerialisedStore",
    "UserPartitionedQdrant",
    "partition_of",
    "serialise_local",
]

logger = logging.getLogger(__name__)

PARTITION_KEYS: tuple[str, ...] = ENTITY_KEYS

#: The partition a payload or filter belongs to: ``user_id``, else ``agent_id``, else ``run_id``.
partition_of = entity_partition


class CollectionLocks:
    """One re-entrant lock per Qdrant collection of one client, plus one for the client's collection list.

    qdrant-client's local mode is not thread-safe: a search that runs while another thread inserts into
    the same collection can index past the end of its payload arrays (``IndexError: index 75 is out of
    bounds for axis 0 with size 75``). Every call into a local collection therefore holds its lock.
    """

    def __init__(self) -> None:
        self.client = threading.RLock()
        self._locks: dict[str, threading.RLock] = {}

    def __call__(self, collection: str) -> threading.RLock:
        with self.client:
            lock = self._locks.get(collection)
            if lock is None:
                lock = self._locks[collection] = threading.RLock()
            return lock


class SerialisedStore:
    """A mem0 vector store (one collection) whose every method call holds that collection's lock."""

    def __init__(self, store: Any, lock: threading.RLock) -> None:
        object.__setattr__(self, "_store", store)
        object.__setattr__(self, "_lock", lock)

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if not callable(attr):
            return attr
        lock = self._lock

        def locked(*args: Any, **kwargs: Any) -> Any:
            with lock:
                return attr(*args, **kwargs)

        return locked

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._store, name, value)

    @contextlib.contextmanager
    def held(self) -> Iterator[Any]:
        """The wrapped store itself, while holding its collection's lock (for calls below mem0's interface)."""
        with self._lock:
            yield self._store


def serialise_local(memory: Any, locks: CollectionLocks | None = None) -> None:
    """Make a mem0 Memory on local Qdrant thread-safe: its vector store and entity store hold a lock per
    collection (a :class:`UserPartitionedQdrant` does that itself)."""
    locks = locks or CollectionLocks()
    vs = memory.vector_store
    if not isinstance(vs, (UserPartitionedQdrant, SerialisedStore)):
        memory.vector_store = SerialisedStore(vs, locks(vs.collection_name))
    entity = getattr(memory, "entity_store", None)  # mem0 >= 2.2 shares the Qdrant client with it
    if entity is not None and not isinstance(entity, SerialisedStore) and hasattr(memory, "_entity_store"):
        memory._entity_store = SerialisedStore(entity, locks(getattr(entity, "collection_name", "__entities")))


class UserPartitionedQdrant:
    """A mem0 vector store over local Qdrant with **one collection per user** (else agent, else run).

    Qdrant's local mode evaluates payload filters in Python point by point and has no payload indexes,
    so a ``user_id``-filtered search costs O(all memories of all users): measured 8 ms with one user's
    300 memories vs 193 ms with 20 users' (docs/mem0.md). Partitioning makes it O(that user's memories).

    * ``insert`` puts each point into its payload's partition and records ``id -> partition`` in a small
      routing collection, so ``get``/``update``/``delete`` by id (mem0's API) find it again;
    * ``search``/``keyword_search``/``list`` with a ``user_id`` filter read that user's partition; a filter
      without ``user_id`` (e.g. ``agent_id`` only: such memories may sit in several users' partitions)
      fans out over all partitions and merges by score — same results as one collection, just slower;
    * partitions are found again after a restart (collection name prefix) on an on-disk store.

    Same method set as mem0's ``Qdrant`` store; each partition *is* a mem0 ``Qdrant`` sharing one client.
    Only meant for local mode: on a Qdrant server mem0's payload indexes make one collection fast.
    """

    def __init__(self, client: Any, collection_name: str, embedding_model_dims: int, on_disk: bool = False) -> None:
        from mem0.vector_stores.qdrant import Qdrant

        self._qdrant_cls = Qdrant
        self.client = client
        self.collection_name = collection_name
        self.embedding_model_dims = embedding_model_dims
        self.on_disk = on_disk
        self.is_local = True
        self._prefix = f"{collection_name}__p"
        self.locks = CollectionLocks()
        self._lock = self.locks.client
        self._parts: dict[str, Any] = {}
        self._routes = self._store(f"{collection_name}__routes", 1)

    def _store(self, name: str, dims: int) -> Any:
        with self.locks.client, warnings.catch_warnings():  # mem0 asks for payload indexes: no-op locally
            warnings.filterwarnings("ignore", message="Payload indexes have no effect", category=UserWarning)
            store = self._qdrant_cls(
                collection_name=name, embedding_model_dims=dims, client=self.client, on_disk=self.on_disk
            )
        store.is_local = True
        return SerialisedStore(store, self.locks(name))

    def _name(self, partition: str) -> str:
        return self._prefix + hashlib.sha1(partition.encode("utf-8")).hexdigest()[:20]

    def _part(self, name: str) -> Any:
        with self._lock:
            store = self._parts.get(name)
            if store is None:
                store = self._parts[name] = self._store(name, self.embedding_model_dims)
            return store

    def _existing(self) -> list[Any]:
        with self.locks.client:
            collections = self.client.get_collections().collections
        names = [c.name for c in collections if c.name.startswith(self._prefix)]
        return [self._part(n) for n in sorted(names)]

    def partitions_for(self, filters: Mapping[str, Any] | None) -> list[Any]:
        """The partitions (each a :class:`SerialisedStore` of a mem0 ``Qdrant``) a search with ``filters`` reads."""
        return self._targets(filters)

    def _targets(self, filters: Mapping[str, Any] | None) -> list[Any]:
        if isinstance(filters, Mapping) and partition_of({"user_id": filters.get("user_id")}) is not None:
            name = self._name(partition_of({"user_id": filters["user_id"]}))  # type: ignore[arg-type]
            return [self._part(name)] if self._has(name) else []
        return self._existing()

    def _has(self, name: str) -> bool:
        with self._lock:
            if name in self._parts:
                return True
            return bool(self.client.collection_exists(name))

    def _route(self, vector_id: Any) -> Any:
        hit = self._routes.get(vector_id)
        if hit is None or not hit.payload or "p" not in hit.payload:
            return None
        return self._part(hit.payload["p"])

    @staticmethod
    def _merge(lists: Sequence[Sequence[Any] | None], top_k: int) -> list[Any] | None:
        got = [hits for hits in lists if hits is not None]
        if not got:
            return None
        merged = [h for hits in got for h in hits]
        merged.sort(key=lambda h: -(getattr(h, "score", 0.0) or 0.0))
        return merged[:top_k]

    # --- mem0 VectorStoreBase interface ---------------------------------------------------------
    def insert(
        self, vectors: list[Any], payloads: list[dict[str, Any]] | None = None, ids: list[Any] | None = None
    ) -> None:
        groups: dict[str, tuple[list[Any], list[Any], list[Any]]] = {}
        for i, vector in enumerate(vectors):
            payload = payloads[i] if payloads else {}
            point_id = i if ids is None else ids[i]
            partition = partition_of(payload)
            if partition is None:
                raise ValueError("UserPartitionedQdrant: a memory needs user_id, agent_id or run_id")
            g = groups.setdefault(self._name(partition), ([], [], []))
            g[0].append(vector)
            g[1].append(payload)
            g[2].append(point_id)
        for name, (vecs, pays, pids) in groups.items():
            self._part(name).insert(vectors=vecs, payloads=pays, ids=pids)
            self._routes.insert(vectors=[[1.0]] * len(pids), payloads=[{"p": name}] * len(pids), ids=pids)

    def search(
        self, query: str, vectors: list[Any], top_k: int = 5, filters: dict[str, Any] | None = None
    ) -> list[Any]:
        return (
            self._merge([t.search(query, vectors, top_k=top_k, filters=filters) for t in self._targets(filters)], top_k)
            or []
        )

    def search_batch(
        self, queries: list[str], vectors_list: list[Any], top_k: int = 1, filters: dict[str, Any] | None = None
    ) -> list[Any]:
        return [self.search(q, v, top_k=top_k, filters=filters) for q, v in zip(queries, vectors_list)]

    def keyword_search(self, query: str, top_k: int = 5, filters: dict[str, Any] | None = None) -> list[Any] | None:
        return self._merge(
            [t.keyword_search(query, top_k=top_k, filters=filters) for t in self._targets(filters)], top_k
        )

    def get(self, vector_id: Any) -> Any:
        store = self._route(vector_id)
        return None if store is None else store.get(vector_id)

    def update(self, vector_id: Any, vector: list[float] | None = None, payload: dict[str, Any] | None = None) -> None:
        store = self._route(vector_id)
        if store is None:
            raise ValueError(f"memory {vector_id} not found")
        store.update(vector_id, vector=vector, payload=payload)

    def delete(self, vector_id: Any) -> None:
        store = self._route(vector_id)
        if store is not None:
            store.delete(vector_id)
        self._routes.delete(vector_id)

    def list(self, filters: dict[str, Any] | None = None, top_k: int = 100) -> tuple[list[Any], None]:
        out: list[Any] = []
        for target in self._targets(filters):
            points, _ = target.list(filters=filters, top_k=top_k - len(out))
            out.extend(points)
            if len(out) >= top_k:
                break
        return out[:top_k], None

    def list_cols(self) -> Any:
        with self.locks.client:
            return self.client.get_collections()

    def col_info(self) -> Any:
        with self.locks.client:
            return self.client.get_collection(collection_name=self._routes.collection_name)

    def delete_col(self) -> None:
        for store in self._existing():
            store.delete_col()
        self._routes.delete_col()
        with self._lock:
            self._parts.clear()

    def reset(self) -> None:
        logger.warning("Resetting all partitions of %s", self.collection_name)
        self.delete_col()
        self._routes = self._store(f"{self.collection_name}__routes", 1)
