"""The gateway's content rules: the paper's context reuse on the traffic itself (docs/gateway.md, "Content
rules").

In a request's new part (after everything prefix replay kept and the client's cache marks protect), context
blocks are found by unambiguous rules (:mod:`.finders`: shell run outputs, XML documents, numbered passages, JSON search
results, markdown sections, long tool results), multi-block contexts are aligned with the session's context
index (:mod:`.align`), blocks the model already sees earlier in the history become location annotations and
long re-read texts become pointers to their unchanged content-defined chunks plus the new part
(:mod:`.dedup`, :mod:`.chunks`). State is per (tenant, session) (:mod:`.records`); each step can be switched
off per tenant and per request (:mod:`.switches`). :func:`.stage.run_content` is the stage; the gateway's
flow calls it between prefix replay and the provider rules, and falls back to replay + rules on any failure.
"""

from __future__ import annotations

from .finders import BlockRule, FoundBlock, FoundContext, find_context
from .records import ContentState, PendingContent, Where
from .stage import ContentResult, new_part_start, run_content
from .switches import CONTENT_HEADER, DEFAULT_STEPS, ContentStep, effective_steps

__all__ = [
    "CONTENT_HEADER",
    "DEFAULT_STEPS",
    "BlockRule",
    "ContentResult",
    "ContentState",
    "ContentStep",
    "FoundBlock",
    "FoundContext",
    "PendingContent",
    "Where",
    "effective_steps",
    "find_context",
    "new_part_start",
    "run_content",
]
