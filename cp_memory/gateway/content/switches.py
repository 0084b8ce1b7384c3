"""The content stage's switches: which steps run for a request, from the tenant's settings and one header.

Steps (:class:`ContentStep`): ``find`` (context blocks found in the request's new part; every other step
needs it), ``align`` (multi-block contexts put in the order the session's context index already holds),
``dedup`` (a block the history already shows becomes a location annotation; without it no pointer of any
kind is written), ``chunks`` (a long block that mostly repeats one the history shows becomes pointers to the
unchanged chunks plus the new part) and
``order-note`` (an order annotation after an aligned context; off by default: issue 32 has not shown that it
helps). Defaults: :data:`DEFAULT_STEPS` (``GatewayConfig.content_steps`` reads it), per tenant
``GatewayConfig.content_tenants`` (tenant id as ``/cp/savings`` reports it -> steps).

The ``X-CP-Content`` request header narrows them for one request: ``off`` (nothing), ``on`` (the tenant's
steps), ``no-find``, ``no-align``, ``no-dedup``, ``no-chunks`` (comma-separated; each removes one step), and
``order-note`` (asks for the order annotation). A request can only remove steps, or ask for the annotation
(text the client itself wants the model to see). An unknown word turns the stage off for that request
(the conservative reading) and says so in the log.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from enum import Enum

__all__ = ["CONTENT_HEADER", "DEFAULT_STEPS", "ContentStep", "effective_steps", "parse_header"]

logger = logging.getLogger(__name__)

#: the request header that narrows the steps for one request
CONTENT_HEADER = "x-cp-content"


class ContentStep(str, Enum):
    """One step of the content stage (module doc)."""

    FIND = "find"
    ALIGN = "align"
    DEDUP = "dedup"
    CHUNKS = "chunks"
    ORDER_NOTE = "order-note"


#: the steps a tenant gets unless the gateway's settings say otherwise (the one source of this default)
DEFAULT_STEPS: frozenset[ContentStep] = frozenset(
    {ContentStep.FIND, ContentStep.ALIGN, ContentStep.DEDUP, ContentStep.CHUNKS}
)
_REMOVABLE = {f"no-{s.value}": s for s in ContentStep if s is not ContentStep.ORDER_NOTE}


def parse_header(value: str | None) -> tuple[frozenset[ContentStep], frozenset[ContentStep]] | None:
    """``(removed, added)`` steps of an ``X-CP-Content`` value; ``None`` for ``off`` or an unknown word.

    >>> parse_header("no-dedup, no-align")[0] == {ContentStep.DEDUP, ContentStep.ALIGN}
    True
    >>> parse_header("off") is None
    True
    """
    if value is None or not value.strip():
        return frozenset(), frozenset()
    removed: set[ContentStep] = set()
    added: set[ContentStep] = set()
    for word in (w.strip().lower() for w in value.split(",")):
        if word in ("", "on"):
            continue
        if word == "off":
            return None
        if word in _REMOVABLE:
            removed.add(_REMOVABLE[word])
        elif word == ContentStep.ORDER_NOTE.value:
            added.add(ContentStep.ORDER_NOTE)
        else:
            logger.warning(
                "gateway content: unknown %s word %r; content rules off for this request", CONTENT_HEADER, word
            )
            return None
    return frozenset(removed), frozenset(added)


def effective_steps(tenant_steps: Iterable[ContentStep], headers: Mapping[str, str]) -> frozenset[ContentStep]:
    """The steps for one request: the tenant's, narrowed by the header (lower-case names); without
    ``find`` nothing runs, without ``dedup`` no chunk pointer either."""
    parsed = parse_header(headers.get(CONTENT_HEADER))
    if parsed is None:
        return frozenset()
    removed, added = parsed
    steps = (frozenset(tenant_steps) - removed) | added
    if ContentStep.DEDUP not in steps:  # chunk pointers are de-duplication too
        steps -= {ContentStep.CHUNKS}
    return steps if ContentStep.FIND in steps else frozenset()
