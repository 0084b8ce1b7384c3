"""Engine admin endpoints (cache flush, slots, tokenize, metrics) as I/O-free flows.

Each flow is a generator that yields the :class:`~cp_memory.engine.transport.Request` it needs
next and receives its :class:`~cp_memory.engine.transport.Reply`; its return value is the answer.
``EngineClient`` and ``AsyncEngineClient`` drive the same flows, one with blocking I/O, the other
with ``await``: the decisions (which endpoint, what a 404 or a 405 means) are written once, here.
"""

from __future__ import annotations

import logging
from collections.abc import Generator
from typing import Any

from .sse import as_int, error_detail
from .transport import Reply, Request

logger = logging.getLogger(__name__)

__all__ = ["flush_cache", "metrics", "slot_ids", "slots", "tokenize"]


def flush_cache() -> Generator[Request, Reply, bool]:
    """Drop the engine's prefix cache; ``True`` only when the engine confirms a full flush.

    SGLang: ``POST /flush_cache`` (``GET`` on older releases, tried on 405; refused while requests
    run → ``False``). vLLM: ``POST /reset_prefix_cache`` (served with ``VLLM_SERVER_DEV_MODE=1``, as
    :class:`~cp_memory.engine.vllm.VLLMServer` starts it). llama.cpp has no global flush: every slot is erased
    (``POST /slots/{id}?action=erase``, needs ``--slot-save-path``), but the host prompt cache
    (``--cache-ram``) cannot be cleared over HTTP, so the answer is ``False``.
    """
    reply = yield Request("POST", "/flush_cache")
    if reply.status == 405:
        reply = yield Request("GET", "/flush_cache")
    if reply.status == 200:
        return True
    if reply.status != 404:
        logger.warning("flush_cache refused: HTTP %d: %s", reply.status, error_detail(reply.text))
        return False
    ids = yield from slot_ids()
    if ids is None:  # not llama.cpp: vLLM's endpoint (served with VLLM_SERVER_DEV_MODE=1)
        reset = yield Request("POST", "/reset_prefix_cache")
        return reset.status == 200
    erased = bool(ids)
    for slot_id in ids:
        erase = yield Request("POST", f"/slots/{slot_id}", params={"action": "erase"})
        erased = erased and erase.status == 200
    _log_llamacpp_flush(erased)
    return False


def slots() -> Generator[Request, Reply, list[dict[str, Any]] | None]:
    """llama.cpp's ``GET /slots`` (one object per slot), ``None`` where unsupported."""
    reply = yield Request("GET", "/slots")
    data = reply.json() if reply.status == 200 else None
    if not isinstance(data, list):
        return None
    return [s for s in data if isinstance(s, dict)]


def slot_ids() -> Generator[Request, Reply, list[int] | None]:
    """The ids of llama.cpp's slots, ``None`` where unsupported."""
    found = yield from slots()
    if found is None:
        return None
    ids = [as_int(s.get("id")) for s in found]
    return [i for i in ids if i is not None]


def tokenize(text: str) -> Generator[Request, Reply, list[int] | None]:
    """Token ids of ``text`` via ``POST /tokenize`` (llama.cpp's ``content`` body; vLLM's ``prompt``
    body, tried when the first is refused as invalid), ``None`` where unsupported."""
    reply = yield Request("POST", "/tokenize", json={"content": text, "add_special": False})
    if reply.status in (400, 422):
        reply = yield Request("POST", "/tokenize", json={"prompt": text, "add_special_tokens": False})
    if reply.status != 200:
        return None
    data = reply.json()
    tokens = data.get("tokens") if isinstance(data, dict) else None
    if not isinstance(tokens, list):
        return None
    out: list[int] = []
    for tok in tokens:
        # with_pieces=true returns objects; plain ids otherwise
        tid = as_int(tok.get("id")) if isinstance(tok, dict) else as_int(tok)
        if tid is None:
            return None
        out.append(tid)
    return out


def metrics() -> Generator[Request, Reply, str | None]:
    """The Prometheus text of ``GET /metrics`` (llama.cpp with ``--metrics``, SGLang with
    ``--enable-metrics``, vLLM), ``None`` where it is off or unsupported."""
    reply = yield Request("GET", "/metrics")
    return reply.text if reply.status == 200 else None


def _log_llamacpp_flush(erased_all: bool) -> None:
    if erased_all:
        logger.warning(
            "llama.cpp: erased every slot's KV cache, but the host prompt cache (--cache-ram) "
            "cannot be cleared over HTTP; restart the server for a guaranteed cold cache"
        )
    else:
        logger.warning(
            "llama.cpp: slot erase unavailable (start llama-server with --slot-save-path) and "
            "there is no global flush endpoint; restart the server for a cold cache"
        )
