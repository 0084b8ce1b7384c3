"""Context annotations (paper §5.3 and §6).

* The **order annotation** tells the model the retriever's ranking after alignment moved blocks around:
  ``Please read the context in the following priority order: [Doc 2] > [Doc 1] > [Doc 4] and answer the
  question.`` It goes after the blocks and before the question, so it never breaks a cached prefix.
  With ``top=n`` it names only the ``n`` best-ranked blocks and says the others follow:
  ``... priority order: [Doc 7] > [Doc 2] > [Doc 13] > the rest and answer the question.`` The paper's
  blocks are ~1,000-token chunks, where a full ranking is negligible; mem0 memories are ~25 tokens, and a
  full ranking costs ~7 tokens per block (706 tokens at k=100 with SmolLM2's tokenizer, never cached), more
  than alignment saves. Named blocks always come in their true order and "the rest" are exactly the
  shown blocks ranked below them (or not retrieved at all: superset/swap extras).
* A **location annotation** replaces a block that was already sent earlier in the same conversation:
  ``Please refer to [Doc 1] in the previous conversation (turn 1).`` The paper's wording has no turn; we add
  it because labels are per turn ("[Doc 1]" of turn 1 is not "[Doc 1]" of turn 2).

One wording each, as module constants; every function takes a ``template`` to override it.

Three label styles (:data:`LabelStyle`, ``ContextPilotConfig.labels``):

* ``"doc"`` (default, the paper's): ``[Doc 3] text``, one location annotation per line, as above;
* ``"number"`` (the chat integrations'): ``3 text``, a numbered list without the period. Measured with the
  engine's tokenizer (SmolLM2 / the test model's, 10 LoCoMo-sized memories): 159 tokens as mem0's ``- text``
  lines, 160 as ``3 text`` (a one-digit number costs what mem0's ``-`` costs; ``10`` one more), 170 as
  ``3. text`` (the form before), 240 with ``[Doc i]`` labels. The pointers of one turn share one line,
  ``Also relevant, shown before: turn 1 items 3, 7; turn 2 item 1.`` (:func:`grouped_locations`: ~2
  tokens per further pointer instead of ~17 for the paper's sentence), and the order annotation names
  items by number: ``Read the items in this priority order: 2 > 1 > 3, then answer the question.``
* ``"bullet"`` (the chat integrations' default): ``- text``, mem0's own list form, so the block lines cost
  exactly what mem0's pattern costs at any ``top_k`` (``10 text`` costs one token more than ``- text``). A
  bullet has no number: the pointers and the order annotation name an item by its position in the list
  (``turn 1 items 3, 7`` = the third and seventh ``-`` line of turn 1's context), which the model reads by
  counting; the lines are the same, only the number is not written out.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Mapping, Sequence
from typing import Literal

from .checks import one_of, positive_int

__all__ = [
    "DOC_LABEL_TEMPLATE",
    "GROUPED_LOCATION_TEMPLATE",
    "LABEL_STYLES",
    "BULLET_LABEL",
    "NUMBER_LABEL_TEMPLATE",
    "NUMBER_ORDER_TEMPLATE",
    "LabelStyle",
    "LOCATION_TEMPLATE",
    "ORDER_TEMPLATE",
    "RANKING_REST",
    "SAME_TURN_TEMPLATE",
    "DEFAULT_ANNOTATE_TOP",
    "block_label",
    "doc_label",
    "grouped_locations",
    "location_annotation",
    "order_differs",
    "order_annotation",
    "owed_order_annotation",
]

#: How many of the best-ranked blocks the wrapper's order annotation names (``ContextPilotConfig.annotate_top``;
#: ``None`` there: all). On LoCoMo (conversations 0-2, 10 questions each) the evidence mem0 retrieved sat at
#: ranks 1-5 for 23 of 26 hits at k=20 and 23 of 36 at k=100 (ranks 6-10 added one), so the top five carry
#: most of what the ranking says, for ~50 tokens instead of ~7 per block.
DEFAULT_ANNOTATE_TOP = 5
#: What follows the named blocks when an order annotation names only the top few (``top=``).
RANKING_REST = "the rest"
ORDER_TEMPLATE = "Please read the context in the following priority order: {ranking} and answer the question."
LOCATION_TEMPLATE = "Please refer to {label} in the previous conversation (turn {turn})."
LOCATION_TEMPLATE_NO_TURN = "Please refer to {label} in the previous conversation."
SAME_TURN_TEMPLATE = "{label} above has the same content."
#: The label of a block in a prompt: "[Doc 3]". Positional in rendered prompts ({n} = 1-based position);
#: the default labeller of order_annotation/location_annotation fills it with a block id, as the paper does.
#: (Not the agents' segment-label template, which has its own name in cp_memory.agents.segment.)
DOC_LABEL_TEMPLATE = "[Doc {n}]"
#: The label of the block at position {n} in the ``"number"`` style: "3" (a numbered list, ``3 text``: no
#: period, which cost one token a line more than mem0's ``- text``; the pointers name items by this number).
NUMBER_LABEL_TEMPLATE = "{n}"
#: The label of every block in the ``"bullet"`` style: mem0's ``- text`` list (pointers name the position).
BULLET_LABEL = "-"
#: The order annotation of the ``"number"`` and ``"bullet"`` styles (``{ranking}``: "2 > 1 > 3").
NUMBER_ORDER_TEMPLATE = "Read the items in this priority order: {ranking}, then answer the question."
#: The one line holding every pointer of a turn in the ``"number"`` style (``{where}``: "turn 1 items 3, 7").
GROUPED_LOCATION_TEMPLATE = "Also relevant, shown before: {where}."

LabelStyle = Literal["doc", "number", "bullet"]
LABEL_STYLES: tuple[str, ...] = ("doc", "number", "bullet")

Label = Callable[[Hashable], str] | Mapping[Hashable, str] | None


def doc_label(position: int) -> str:
    """The label a prompt shows for the block at 1-based ``position``: ``[Doc 3]``."""
    return DOC_LABEL_TEMPLATE.format(n=position)


def block_label(position: int, style: LabelStyle = "doc") -> str:
    """The label of the block at 1-based ``position`` in ``style``: ``[Doc 3]``, ``3`` or ``-`` (a bullet:
    the same for every position, which the pointers name instead)."""
    if style == "bullet":
        return BULLET_LABEL
    if style == "number":
        return NUMBER_LABEL_TEMPLATE.format(n=position)
    if style == "doc":
        return DOC_LABEL_TEMPLATE.format(n=position)
    raise ValueError(f"label style must be one of {LABEL_STYLES}, got {style!r}")


def order_differs(ranking: Sequence[Hashable], shown: Sequence[Hashable], *, top: int | None = None) -> bool:
    """Whether an order annotation would tell the model anything, i.e. the prompt's own order does not say
    it already: the blocks ``shown`` (prompt order; unranked extras included) are not those of ``ranking``
    (the retriever's, restricted to what is shown) in that order.

    With ``top=n`` (an annotation naming the ``n`` best-ranked blocks only) only those ranks matter: it is
    owed unless the prompt starts with exactly these ``n`` blocks in rank order. When ``n`` covers the whole
    ranking it is the full annotation, owed whenever the order differs or an unranked block is shown.

    >>> order_differs(["a", "b", "c", "d"], ["a", "b", "d", "c"], top=2)
    False
    >>> order_differs(["a", "b", "c", "d"], ["a", "b", "d", "c"])
    True
    """
    where = set(shown)
    ranked = [b for b in ranking if b in where]
    if top is not None and top < len(ranked):
        return ranked[:top] != list(shown[:top])
    return ranked != list(shown)


def grouped_locations(pointers: Sequence[tuple[int, int]], *, turn: int) -> str:
    """One line for all pointers of a turn in the ``"number"`` and ``"bullet"`` styles: ``pointers`` are (earlier turn,
    position there); a position in ``turn`` itself (a same-text copy within this search) reads ``item 2 above``.

    >>> grouped_locations([(1, 3), (2, 1), (1, 7)], turn=3)
    'Also relevant, shown before: turn 1 items 3, 7; turn 2 item 1.'
    """
    by_turn: dict[int, list[int]] = {}
    for t, pos in pointers:
        by_turn.setdefault(t, []).append(pos)
    parts = []
    for t in sorted(by_turn):
        positions = sorted(set(by_turn[t]))
        items = ("items " if len(positions) > 1 else "item ") + ", ".join(str(p) for p in positions)
        parts.append(f"{items} above" if t == turn else f"turn {t} {items}")
    return GROUPED_LOCATION_TEMPLATE.format(where="; ".join(parts)) if parts else ""


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
    top: int | None = None,
    rest: str = RANKING_REST,
) -> str:
    """Annotation restoring the retrieval ranking ``original`` after alignment to ``aligned``.

    ``label`` maps a block id to the label the prompt shows (callable or mapping); the default is
    ``[Doc {id}]`` as in the paper's example. Blocks in ``aligned`` but not in ``original`` (superset or
    swap alignment's extra blocks) are not ranked: the model is told only what was actually retrieved.
    ``dropped`` (swap alignment's :attr:`~cp_memory.core.index.Placement.dropped`) are retrieved blocks left
    out on purpose: they are not ranked either. Raises ``ValueError`` when ``original`` has any other
    block that ``aligned`` lacks (a block was lost).

    ``top=n`` names only the ``n`` best-ranked blocks, then ``rest`` (``... > [Doc 9] > the rest``): still
    the true ranking, as the rest all rank below them; ``None`` (the default, the paper's form) names every
    block.

    >>> order_annotation([2, 1, 4, 3], [1, 2, 3, 4], top=2)
    'Please read the context in the following priority order: [Doc 2] > [Doc 1] > the rest and answer the question.'
    """
    if top is not None:
        positive_int(top, "top")
    aligned_set = set(aligned)
    left_out = set(dropped)
    missing = [b for b in original if b not in aligned_set and b not in left_out]
    if missing:
        raise ValueError(f"aligned order lost block(s) {missing!r} of the original ranking")
    name = _labeller(label)
    ranked = [name(b) for b in original if b in aligned_set]
    if top is not None and top < len(ranked):
        ranked = [*ranked[:top], rest]
    return template.format(ranking=" > ".join(ranked))


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


def owed_order_annotation(
    shown: Sequence[Hashable],
    ranking: Sequence[Hashable],
    labels: Mapping[Hashable, str],
    *,
    style: LabelStyle = "doc",
    top: int | None = None,
) -> str:
    """The order annotation a prompt owes, or ``""`` when the prompt's own order already says it.

    ``shown``: the blocks in prompt order (unranked extras included); ``ranking``: the retrieved blocks among
    them, best first; ``labels``: each shown block's label (``[Doc 3]``, or ``3`` in the ``"number"`` style,
    which names items by number; a trailing period is ignored; the ``"bullet"`` style names items by their
    position in ``shown``, as its pointers do). ``top``: name only that many best-ranked
    blocks (:func:`order_differs` decides with the same ``top``); fewer than two ranked blocks need no
    annotation.

    >>> owed_order_annotation(["a", "b", "c"], ["b", "a", "c"], {"a": "1.", "b": "2.", "c": "3."}, style="number")
    'Read the items in this priority order: 2 > 1 > 3, then answer the question.'
    """
    one_of(style, "label style", LABEL_STYLES)
    if len(ranking) < 2 or not order_differs(ranking, shown, top=top):
        return ""
    if style == "doc":
        return order_annotation(ranking, shown, label=labels, top=top)
    if style == "bullet":
        numbers = {b: str(i) for i, b in enumerate(shown, start=1)}
    else:
        numbers = {b: label.rstrip(".") for b, label in labels.items()}
    return order_annotation(ranking, shown, label=numbers, template=NUMBER_ORDER_TEMPLATE, top=top)
