"""mem0's response shape: reading its result list, answering in it with ``context_pilot`` added (a plain
dict for users that carries the typed prompt contract the library reads), and the fallback response (mem0's
own order, plainly rendered) that a failed search returns."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from ..core.prompt import ContextPilotDict, rendered_context
from .calls import SearchCall
from .config import ContextPilotConfig
from .types import ContextPilotInfo, RenderedBlock, SearchResults

__all__ = ["fallback_response", "respond", "results_of"]

logger = logging.getLogger(__name__)


def results_of(response: Any) -> list[Any] | None:
    """mem0's result list from either response shape (``{"results": [...]}`` or a bare list)."""
    if isinstance(response, Mapping):
        results = response.get("results")
        return results if isinstance(results, list) else None
    return response if isinstance(response, list) else None


def respond(response: Any, results: list[Any], info: ContextPilotInfo) -> Any:
    """mem0's response shape with ``results`` replaced and ``context_pilot`` added: ``info.to_dict()``
    carrying ``info.contract()`` (:class:`~cp_memory.core.prompt.ContextPilotDict`)."""
    carried = ContextPilotDict(info.to_dict(), info.contract())
    if isinstance(response, Mapping):
        out = dict(response)
        out["results"] = results
        out["context_pilot"] = carried
        return out
    return SearchResults(results, carried)


def fallback_response(
    config: ContextPilotConfig, call: SearchCall, conversation: str | None, response: Any, exc: BaseException | None
) -> Any:
    """mem0's own order, plainly rendered (no annotation), ``top_k`` honoured. Never raises."""
    try:
        raw = results_of(response)
        if raw is None:
            return response
        results = [r for r in raw if isinstance(r, Mapping)][: call.top_k or len(raw)]
        texts = [str(r.get("memory") or "") for r in results]
        ids = [str(r.get("id")) for r in results]
        context = rendered_context(texts, special_tokens=config.special_tokens, labels=config.labels)
        info = ContextPilotInfo(
            scope=str(call.scope) if call.scope is not None else None,
            conversation_id=conversation,
            turn=None,
            original_ids=tuple(ids),
            order=tuple(ids),
            blocks=tuple(RenderedBlock.of(b, id=d, text=t) for b, d, t in zip(context.blocks, ids, texts)),
            context=context.text,
            fetched=len(raw),
            fallback=True,
            error=None if exc is None else f"{type(exc).__name__}: {exc}"[:500],
        )
        return respond(response, [dict(r, rank=i) for i, r in enumerate(results)], info)
    except Exception:
        logger.exception("rendering mem0's results for the fallback failed too; returning them untouched")
        return response
