"""The prompt contract: what a search puts into a prompt, rendered once and read typed.

A search renders its context exactly once (:func:`rendered_context`) into a :class:`RenderedContext`: each
block's label and text as the prompt shows it (one line, control tokens inert: :mod:`cp_memory.core.render`
has the rules), the annotation lines after the blocks, and how many leading blocks the scope's index
already held (the aligned prefix an engine or provider may have cached). The mem0 wrapper answers with a
:class:`PromptContract` (that context, the dedup pointers, the scope, conversation and turn) attached to
its mem0-compatible ``response["context_pilot"]`` dict (a :class:`ContextPilotDict`). Everything downstream
(the integrations' chat layout, the providers' request builders, the gateway) reads the contract with
:func:`contract_of` / :func:`prompt_contract`; nothing cuts or re-parses rendered text. A response that
crossed a process boundary as plain JSON is rebuilt from the dict's fields (labels, shown texts, annotation
lines, prefix length; :meth:`PromptContract.from_dict`), never from its text.

The newest user message of the layout (:meth:`PromptContract.user_message`), with its pieces::

    Context:\\n[Doc 1] ...     piece 1: the head and the first block line
    \\n[Doc 2] ...             one piece per further block line
    \\n\\n<annotations>\\n\\nQuestion: <question>     the tail: annotation lines, then the question

The pieces' concatenation is :data:`USER_TEMPLATE` filled with the context and the question, byte for byte
(``Question: <question>`` alone without context). Labels are positional and the order is the scope's
aligned order, so the first ``shared`` block pieces of a question are the same bytes as the first pieces
of the earlier prompt it was aligned with: a provider that caches at block boundaries (Anthropic) reads
them back. A plain mem0 response (no ``context_pilot``) is rendered in its own order and never cut.
"""

from __future__ import annotations

import functools
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from .annotations import LabelStyle, block_label
from .blocks import ContextBlock
from .checks import int_in_range
from .special_tokens import DEFAULT_SPECIAL_TOKENS, SpecialTokens

__all__ = [
    "CONTEXT_HEAD",
    "NO_CONTEXT_HEAD",
    "PROMPT_TEMPLATE",
    "QUESTION_MARK",
    "USER_TEMPLATE",
    "ContextPilotDict",
    "PromptBlock",
    "PromptContract",
    "PromptPointer",
    "RenderedContext",
    "UserMessage",
    "contract_of",
    "one_line",
    "prompt_contract",
    "rendered_context",
]

logger = logging.getLogger(__name__)

#: every character str.splitlines() breaks a line on, with the spaces and tabs around a run of them
_LINE_BREAKS = re.compile(r"[ \t]*(?:[\n\r\v\f\x1c\x1d\x1e\x85\u2028\u2029][ \t]*)+")

#: Completion prompt. ``{context}`` is the rendered context's text, ``{query}`` the question.
PROMPT_TEMPLATE = "Context:\n{context}\n\nQuestion: {query}\nAnswer:"
#: Content of the newest user message (chat messages, the integrations' layout, the providers' requests).
USER_TEMPLATE = "Context:\n{context}\n\nQuestion: {query}"
#: the user message's parts around the context: ``"Context:\n"`` and ``"\n\nQuestion: "``
CONTEXT_HEAD, _, _QUESTION_TAIL = USER_TEMPLATE.partition("{context}")
QUESTION_MARK = _QUESTION_TAIL.partition("{query}")[0]
#: the user message without any context: ``"Question: <question>"``
NO_CONTEXT_HEAD = "Question: "


def one_line(text: str) -> str:
    """``text`` stripped, each run of line breaks (and the blanks around it) replaced by one space."""
    return _LINE_BREAKS.sub(" ", text.strip()).strip()


def _text(block: ContextBlock | str | Mapping[str, Any]) -> str:
    if isinstance(block, ContextBlock):
        return block.text
    if isinstance(block, str):
        return block
    if isinstance(block, Mapping):
        if "memory" in block:
            return str(block["memory"])
        if "text" in block:
            return str(block["text"])
    raise TypeError(
        f"cannot render a block of type {type(block).__name__}; pass ContextBlock, str or a mem0 result dict"
    )


def _check_policy(special_tokens: Any) -> SpecialTokens:
    if not isinstance(special_tokens, SpecialTokens):
        raise TypeError(f"special_tokens must be a SpecialTokens, got {type(special_tokens).__name__}")
    return special_tokens


def _join(section: str, annotations: Sequence[str]) -> str:
    """Blocks, then a blank line, then the annotation lines (no blank line without blocks)."""
    if not annotations:
        return section
    tail = "\n".join(annotations)
    return f"{section}\n\n{tail}" if section else tail


@dataclass(frozen=True)
class PromptBlock:
    """One block line of a prompt: its positional label and its text as shown (one line, control tokens
    inert)."""

    label: str
    text: str

    @property
    def line(self) -> str:
        return f"{self.label} {self.text}"


@dataclass(frozen=True)
class RenderedContext:
    """A prompt's context, rendered once: ``text`` (the bytes), its ``blocks`` in prompt order, the
    ``annotations`` lines after them, and ``shared``: the leading blocks the scope's index already held (the
    aligned prefix)."""

    text: str
    blocks: tuple[PromptBlock, ...] = ()
    annotations: tuple[str, ...] = ()
    shared: int = 0

    def __post_init__(self) -> None:
        shared = self.shared
        int_in_range(shared, "shared", 0, len(self.blocks))

    @property
    def section(self) -> str:
        """The block section: one line per block, no trailing newline."""
        return "\n".join(b.line for b in self.blocks)

    @functools.cached_property
    def exact(self) -> bool:
        """Whether ``text`` is exactly the block lines, a blank line and the annotation lines: always for a
        context rendered here; a context rebuilt from a foreign dict that does not say how it was rendered
        may not be (then it is sent as one piece, never cut)."""
        return bool(self.blocks) and self.text == _join(self.section, self.annotations)


def rendered_context(
    blocks: Sequence[ContextBlock | str | Mapping[str, Any]],
    *,
    order_annotation: str | None = None,
    location_annotations: Sequence[str] = (),
    special_tokens: SpecialTokens = DEFAULT_SPECIAL_TOKENS,
    labels: LabelStyle = "doc",
    shared: int = 0,
) -> RenderedContext:
    """Render a context once: one ``[Doc i] text`` line per block (``labels="number"``: ``i text``;
    ``"bullet"``: ``- text``) in the given (aligned) order, then a blank line, the location annotations and
    the order annotation, one line each; annotations never precede a block. Line breaks inside a text become
    spaces and control-token texts are made inert (``special_tokens``), so N blocks give exactly N lines.
    ``shared``: leading blocks the index already held."""
    if isinstance(location_annotations, str):
        location_annotations = (location_annotations,)
    policy = _check_policy(special_tokens)
    if isinstance(blocks, (str, bytes)):
        raise TypeError("blocks must be a sequence of blocks, not a single string")
    block_label(1, labels)  # checks the style
    shown = tuple(
        PromptBlock(block_label(i, labels), policy.neutralise(one_line(_text(b))))
        for i, b in enumerate(blocks, start=1)
    )
    notes = [policy.neutralise(one_line(a)) for a in location_annotations if a and a.strip()]
    if order_annotation and order_annotation.strip():
        notes.append(policy.neutralise(one_line(order_annotation)))
    section = "\n".join(b.line for b in shown)
    return RenderedContext(_join(section, notes), shown, tuple(notes), shared)


@dataclass(frozen=True)
class PromptPointer:
    """A memory a dedup turn left out because an earlier prompt shows it: the ``turn`` and ``label`` of the
    line that shows it (``turn`` = this search's own turn for a same-text copy among its own blocks), the
    memory's ``text`` and the line's 1-based ``position`` among that turn's blocks (what the pointer names in
    the ``"bullet"`` style, whose labels are all ``-``; None: a record that did not say)."""

    turn: int
    label: str
    text: str
    position: int | None = None


@dataclass(frozen=True)
class UserMessage:
    """The newest user message of the layout, rendered into ``pieces`` whose concatenation is ``text``:
    ``pieces[:docs]`` hold one block line each (the first with the ``Context:`` head), the last piece is the
    tail (annotations and question); ``docs == 0``: one piece, not cut. The first ``shared`` block pieces are
    the aligned prefix the scope's index already held."""

    question: str
    pieces: tuple[str, ...]
    docs: int
    shared: int
    context: RenderedContext

    @property
    def text(self) -> str:
        return "".join(self.pieces)

    @property
    def blocks(self) -> tuple[PromptBlock, ...]:
        return self.context.blocks

    @property
    def annotations(self) -> tuple[str, ...]:
        return self.context.annotations

    @property
    def section(self) -> str:
        return self.context.section


@dataclass(frozen=True)
class PromptContract:
    """What one search put into the prompt, typed: the rendered ``context``, the dedup ``pointers``, the
    full ``scope`` (its string), the dedup ``conversation_id`` and ``turn`` (None: no dedup), the commit
    handle ``turn_id``. ``searched``: False for a plain mem0 response rendered in its own order (its block
    lines are never cut into pieces)."""

    context: RenderedContext
    pointers: tuple[PromptPointer, ...] = ()
    scope: str | None = None
    conversation_id: str | None = None
    turn: int | None = None
    turn_id: str | None = None
    searched: bool = True

    @property
    def cut(self) -> bool:
        """Whether the user message is cut at block lines: a search's context whose text is its blocks."""
        return self.searched and self.context.exact

    @property
    def shows_memories(self) -> bool:
        """Whether the prompt carries anything of the search: a block or a pointer."""
        return bool(self.context.blocks) or bool(self.pointers)

    def user_message(self, question: str) -> UserMessage:
        """The newest user message for ``question``: ``Context:`` + the context + the question
        (:data:`USER_TEMPLATE`), just ``Question: ...`` without context; in pieces (:class:`UserMessage`)."""
        if not isinstance(question, str):
            raise TypeError(f"query must be str, got {type(question).__name__}")
        ctx = self.context
        if not ctx.text:
            return UserMessage(question, (NO_CONTEXT_HEAD + question,), 0, 0, ctx)
        tail = QUESTION_MARK + question
        if not self.cut:
            return UserMessage(question, (CONTEXT_HEAD + ctx.text + tail,), 0, 0, ctx)
        lines = [b.line for b in ctx.blocks]
        notes = "\n\n" + "\n".join(ctx.annotations) if ctx.annotations else ""
        pieces = (CONTEXT_HEAD + lines[0], *("\n" + line for line in lines[1:]), notes + tail)
        return UserMessage(question, pieces, len(lines), ctx.shared, ctx)

    def question_in(self, text: str) -> str | None:
        """The question of ``text`` when ``text`` is :meth:`user_message` of it (the bytes before the
        question are this context's), else None."""
        head = CONTEXT_HEAD + self.context.text + QUESTION_MARK if self.context.text else NO_CONTEXT_HEAD
        return text[len(head) :] if isinstance(text, str) and text.startswith(head) else None

    @classmethod
    def from_dict(cls, info: Mapping[str, Any]) -> PromptContract:
        """The contract of a ``context_pilot`` dict that lost its typed record (it crossed a process as JSON),
        from its fields, never from its text. Lenient: a field of the wrong type counts as missing; a block
        without ``shown`` is shown as the default policy renders its ``text``; without ``annotations`` they
        are the sent records' then the order annotation. A context those fields do not make up exactly is
        kept as its bytes, uncut."""
        blocks = tuple(_block_of(b) for b in _seq(info.get("blocks")))
        if any(b is None for b in blocks):
            blocks = ()
        shown = tuple(b for b in blocks if b is not None)
        annotations = info.get("annotations")
        if not (isinstance(annotations, list | tuple) and all(isinstance(a, str) for a in annotations)):
            annotations = _default_annotations(info)
        text = info.get("context")
        raw = info.get("prefix_len")
        shared = raw if isinstance(raw, int) and not isinstance(raw, bool) and 0 <= raw <= len(shown) else 0
        context = RenderedContext(text if isinstance(text, str) else "", shown, tuple(annotations), shared)
        turn = info.get("turn")
        return cls(
            context=context,
            pointers=tuple(_pointer_of(s) for s in _seq(info.get("sent"))),
            scope=_str_or_none(info.get("scope")),
            conversation_id=_str_or_none(info.get("conversation_id")),
            turn=turn if isinstance(turn, int) and not isinstance(turn, bool) else None,
            turn_id=_str_or_none(info.get("turn_id")),
        )


def _seq(value: Any) -> Sequence[Any]:
    return value if isinstance(value, list | tuple) else ()


def _str_or_none(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _block_of(block: Any) -> PromptBlock | None:
    if not isinstance(block, Mapping) or not isinstance(block.get("label"), str):
        return None
    shown = block.get("shown")
    if isinstance(shown, str):
        return PromptBlock(block["label"], shown)
    text = block.get("text")
    if not isinstance(text, str):
        return None
    return PromptBlock(block["label"], DEFAULT_SPECIAL_TOKENS.neutralise(one_line(text)))


def _default_annotations(info: Mapping[str, Any]) -> list[str]:
    notes = [s.get("annotation") for s in _seq(info.get("sent")) if isinstance(s, Mapping)]
    order = info.get("order_annotation")
    lines = list(dict.fromkeys(a for a in notes if isinstance(a, str) and a.strip()))
    if isinstance(order, str) and order.strip():
        lines.append(order)
    return [DEFAULT_SPECIAL_TOKENS.neutralise(one_line(a)) for a in lines]


def _pointer_of(sent: Any) -> PromptPointer:
    """A pointer record; a malformed one becomes a pointer that resolves nowhere (turn 0)."""
    if isinstance(sent, Mapping):
        turn, label, text = sent.get("turn"), sent.get("label"), sent.get("text")
        if isinstance(turn, int) and not isinstance(turn, bool) and isinstance(label, str) and isinstance(text, str):
            at = sent.get("position")
            position = at if isinstance(at, int) and not isinstance(at, bool) and at >= 1 else None
            return PromptPointer(turn, label, text, position)
    return PromptPointer(0, "", "")


class ContextPilotDict(dict[str, Any]):
    """``response["context_pilot"]``: mem0-compatible plain JSON for users (it logs, serialises and compares
    as the dict it is) that also carries the search's typed :class:`PromptContract` (``.contract``), which is
    what the library reads. Copies (``copy``, ``deepcopy``, pickle) keep it; ``dict(...)`` or JSON drop it, and
    :func:`contract_of` then rebuilds it from the fields."""

    contract: PromptContract

    def __init__(self, data: Mapping[str, Any], contract: PromptContract) -> None:
        super().__init__(data)
        if not isinstance(contract, PromptContract):
            raise TypeError(f"contract must be a PromptContract, got {type(contract).__name__}")
        self.contract = contract


def contract_of(response: Any) -> PromptContract | None:
    """The prompt contract of a cp_memory search response (``response["context_pilot"]``, or the attribute
    of a list-shaped response): its typed record, rebuilt from the dict only when it crossed a process
    (:meth:`PromptContract.from_dict`). None for anything else (a plain mem0 response)."""
    info = response.get("context_pilot") if isinstance(response, Mapping) else getattr(response, "context_pilot", None)
    if isinstance(info, ContextPilotDict):
        return info.contract
    if isinstance(info, Mapping):
        return PromptContract.from_dict(info)
    return None


def prompt_contract(
    response: Mapping[str, Any] | Sequence[Mapping[str, Any]],
    *,
    special_tokens: SpecialTokens = DEFAULT_SPECIAL_TOKENS,
) -> PromptContract:
    """:func:`contract_of` a search response; a plain mem0 response (``{"results": [...]}`` or the list)
    is rendered in its own order, no annotations, ``special_tokens`` applied (``searched=False``)."""
    found = contract_of(response)
    if found is not None:
        return found
    results = response.get("results", []) if isinstance(response, Mapping) else response
    if isinstance(results, (str, bytes)) or not isinstance(results, Sequence):
        raise TypeError(f"search_result must be a mem0 search response, got {type(response).__name__}")
    return PromptContract(rendered_context(list(results), special_tokens=special_tokens), searched=False)
