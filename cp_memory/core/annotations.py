"""Context annotations (paper §5.3 and §6).

* The **order annotation** tells the model the retriever's ranking after alignment moved blocks around:
  ``Please read the context in the following priority order: [Doc 2] > [Doc 1] > [Doc 4] and answer the
  question.`` It goes after the blocks and before the question.
* A **location annotation** replaces a block that was already sent earlier in the same conversation:
  ``Please refer to [Doc 1] in the previous conversation (turn 1).`` The paper's wording has no turn; we add
  it because labels are per turn ("[Doc 1]" of turn 1 is not "[Doc 1]" of turn 2).

One wording each, as module constants; every function takes a ``template`` to override it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Mapping, Sequence

__all__ = [
    "DOC_LABEL_TEMPLATE",
    "LOCATION_TEMPLATE",
    "ORDER_TEMPLATE",
    "SAME_TURN_TEMPLATE",
    "doc_label",
    "location_annotation",
    "order_annotation",
]

ORDER_TEMPLATE = "Please read the context in the following priority order: {ranking} and answer the question."
LOCATION_TEMPLATE = "Please refer to {label} in the previous conversation (turn {turn})."
LOCATION_TEMPLATE_NO_TURN = "Please refer to {label} in the previous conversation."
SAME_TURN_TEMPLATE = "{label} above has the same content."
#: The label of a block in a prompt: "[Doc 3]". Positional in rendered prompts ({n} = 1-based position);
#: the default labeller of order_annotation/location_annotation fills it with a block id, as the paper does.
#: (Not the agents' segment-label template, which has its own name in cp_memory.agents.segment.)
DOC_LABEL_TEMPLATE = "[Doc {n}]"

Label = Callable[[Hashable], str] | Mapping[Hashable, str] | None


def doc_label(position: int) -> str:
    """The label a prompt shows for the block at 1-based ``position``: ``[Doc 3]``."""
    return DOC_LABEL_TEMPLATE.format(n=position)


def _labeller(label: Label) -> Callable[[Hashable], str]:
    if label is None:
        return lambda b: DOC_LABEL_TEMPLATE.format(n=b)
    if isinstance(label, Mapping):

        def from_map(b: Hashable) -> str:
            try:
                return label[b]
            except KeyError:
                raise ValueError(f"no label for block {b!r}") from None

        return from_map
    if callable(label):
        return label
    raise TypeError(f"label must be a callable or a mapping, got {type(label).__name__}")


def order_annotation(
    original: Sequence[Hashable],
    aligned: Sequence[Hashable],
    label: Label = None,
    template: str = ORDER_TEMPLATE,
    *,
    dropped: Collection[Hashable] = (),
) -> str:
    """Annotation restoring the retrieval ranking ``original`` after alignment to ``aligned``.

    ``label`` maps a block id to the label the prompt shows (callable or mapping); the default is
    ``[Doc {id}]`` as in the paper's example. Blocks in ``aligned`` but not in ``original`` (superset or
    swap alignment's extra blocks) are not ranked: the model is told only what was actually retrieved.
    ``dropped`` (swap alignment's :attr:`~cp_memory.index.Placement.dropped`) are retrieved blocks left
    out on purpose: they are not ranked either. Raises ``ValueError`` when ``original`` has any other
    block that ``aligned`` lacks (a block was lost).
    """
    aligned_set = set(aligned)
    left_out = set(dropped)
    missing = [b for b in original if b not in aligned_set and b not in left_out]
    if missing:
        raise ValueError(f"aligned order lost block(s) {missing!r} of the original ranking")
    name = _labeller(label)
    ranking = " > ".join(name(b) for b in original if b in aligned_set)
    return template.format(ranking=ranking)


def location_annotation(
    block_id: Hashable, *, label: str | None = None, turn: int | None = None, template: str | None = None
) -> str:
    """Annotation pointing to where ``block_id`` was sent earlier in this conversation.

    ``label`` is the label the block had when it was sent (default ``[Doc {block_id}]``); ``turn`` the
    1-based turn it was sent in. Without a turn the paper's own wording is used.
    """
    text = label if label is not None else DOC_LABEL_TEMPLATE.format(n=block_id)
    if template is None:
        template = LOCATION_TEMPLATE if turn is not None else LOCATION_TEMPLATE_NO_TURN
    return template.format(label=text, turn=turn, id=block_id)
