"""What ContextPilot did to one search: typed records behind ``response["context_pilot"]``.

The response of a wrapped ``search`` is mem0's own (``{"results": [...]}``) plus one entry,
``"context_pilot"``, which is :meth:`ContextPilotInfo.to_dict` — plain JSON types, so it logs, serialises
and crosses process boundaries like the rest of mem0's response. That dict also carries the search's typed
prompt contract (:meth:`ContextPilotInfo.contract`, a :class:`~cp_memory.core.prompt.PromptContract`), which
is what the library itself reads (:func:`cp_memory.core.prompt.contract_of`).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from ..core.prompt import PromptBlock, PromptContract, PromptPointer, RenderedContext

__all__ = ["ContextPilotInfo", "RenderedBlock", "SearchResults", "SentMemory"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class RenderedBlock(_Frozen):
    """One memory as the prompt shows it."""

    label: str = Field(description='"[Doc 3]": its position among the rendered blocks')
    id: str = Field(description="mem0 memory id")
    text: str = Field(description="the memory's text (the prompt shows it as `shown`)")
    extra: bool = Field(False, description="superset/swap brought it in: not retrieved for this query")
    shown: str | None = Field(
        None,
        description="the text as the prompt shows it, when that differs from text (line breaks folded to "
        "spaces, control tokens made inert; see cp_memory.render); None: text itself",
    )

    @classmethod
    def of(cls, block: PromptBlock, *, id: str, text: str, extra: bool = False) -> RenderedBlock:
        """The record of a rendered block line (``shown`` set only where the prompt shows other text)."""
        return cls(label=block.label, id=id, text=text, extra=extra, shown=None if block.text == text else block.text)


class SentMemory(_Frozen):
    """A retrieved memory left out of this prompt because an earlier turn sent it (or a same-text copy)."""

    id: str = Field(description="the memory left out")
    turn: int = Field(description="turn of the conversation that sent the earlier copy")
    position: int = Field(description="its 1-based position in that turn's blocks")
    label: str = Field(description="the label it had there")
    annotation: str = Field(description="the location annotation put into the prompt instead")
    rank: int = Field(description="its 0-based rank in mem0's results for this query")
    text: str = Field(
        "", description="its text: the [Doc i] line it points to shows the same text (integrations check it)"
    )


class ContextPilotInfo(_Frozen):
    """What ContextPilot did to one search (``response["context_pilot"] == info.to_dict()``)."""

    scope: str | None = Field(description='index scope, e.g. "user_id=alice&agent_id=bot1"')
    conversation_id: str | None = Field(description="dedup conversation (None: no dedup for this search)")
    turn: int | None = Field(description="1-based turn in that conversation (planned until committed)")
    turn_id: str | None = Field(None, description="handle for commit()/rollback() (None: nothing to commit)")
    committed: bool = Field(False, description="the turn is registered as sent")
    original_ids: tuple[str, ...] = Field(description="mem0's ranking of the memories considered (window)")
    order: tuple[str, ...] = Field(description="memory ids in prompt order (kept retrieved + extra)")
    prefix_len: int = Field(0, description="leading rendered blocks already in the scope's index")
    extra: tuple[str, ...] = Field((), description="ids shown that this query did not retrieve (same scope)")
    dropped: tuple[str, ...] = Field((), description="retrieved ids swap alignment left out for extras")
    request_id: str | None = Field(None, description="index request id (None when nothing was inserted)")
    sent: tuple[SentMemory, ...] = Field((), description="memories replaced by location annotations")
    passed: tuple[str, ...] = Field(
        (),
        description="already sent in this conversation and ranked below top_k: neither shown nor pointed to "
        "(the over-fetch passed them to reach top_k fresh memories; they are in the history)",
    )
    order_annotation: str = Field(
        "",
        description='mem0\'s top annotate_top by label, then "the rest"; "" when off, fewer than two retrieved '
        "blocks are shown, or the prompt already starts with them in mem0's order",
    )
    blocks: tuple[RenderedBlock, ...] = Field((), description="the rendered block section")
    context: str = Field("", description="cp_memory.render.render_context(): blocks, then annotations")
    annotations: tuple[str, ...] = Field(
        (), description="the annotation lines after the blocks, as rendered (location annotations, then order)"
    )
    fetched: int = Field(0, description="results mem0 returned (top_k plus over-fetch for dedup)")
    fallback: bool = Field(False, description="alignment/dedup failed: mem0's order is returned")
    error: str | None = Field(None, description="the failure, when fallback")

    @property
    def location_annotations(self) -> tuple[str, ...]:
        return tuple(s.annotation for s in self.sent)

    def contract(self) -> PromptContract:
        """The typed prompt contract of this search (what the integrations, providers and gateway read),
        assembled from these fields: nothing is rendered or parsed again."""
        context = RenderedContext(
            text=self.context,
            blocks=tuple(PromptBlock(b.label, b.text if b.shown is None else b.shown) for b in self.blocks),
            annotations=self.annotations,
            shared=self.prefix_len,
        )
        return PromptContract(
            context=context,
            pointers=tuple(PromptPointer(s.turn, s.label, s.text, s.position) for s in self.sent),
            scope=self.scope,
            conversation_id=self.conversation_id,
            turn=self.turn,
            turn_id=self.turn_id,
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict (lists, str, int, bool, None), with two conveniences:
        ``location_annotations`` and ``labels`` (memory id -> label)."""
        out = self.model_dump(mode="json")
        out["location_annotations"] = list(self.location_annotations)
        out["labels"] = {b.id: b.label for b in self.blocks}
        return out


class SearchResults(list):  # type: ignore[type-arg]
    """A list of result dicts that also carries ``context_pilot`` (for hosted responses that are lists)."""

    context_pilot: dict[str, Any]

    def __init__(self, items: list[Any], context_pilot: dict[str, Any]) -> None:
        super().__init__(items)
        self.context_pilot = context_pilot
