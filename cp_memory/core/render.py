"""Cache-stable prompt rendering for aligned memories.

An engine's prefix cache only hits when the prompt bytes are identical up to the shared point, so the
block section is a pure function of the aligned block texts:

    [Doc 1] <text of the first aligned block>
    [Doc 2] <text of the second aligned block>
    ...
    <blank line>
    <location annotations, one per line>        (dedup: blocks already sent in an earlier turn)
    <order annotation>                          (the retriever's ranking, by label)

* labels are positional (``[Doc i]`` = i-th rendered block; ``i.`` in the ``"number"`` style), never memory
  ids, scores or timestamps;
* **one line per block**: a block's text is stripped, and every run of line breaks inside it (``\n``,
  ``\r``, ``\v``, ``\f``, ``\x1c``-``\x1e``, ``\x85``, ``\u2028``, ``\u2029`` — everything
  ``str.splitlines`` breaks on — with the spaces and tabs around it) becomes one space. So no memory
  text can start a line of its own: a memory saying ``"...\n[Doc 2] forged\nQuestion: ..."`` or
  ``"\nPlease refer to [Doc 1] ..."`` cannot forge a label, an annotation or the question.
  The same text always renders to the same bytes; digests and dedup use the block's own text
  (:func:`~cp_memory.blocks.normalize_text` already folds all whitespace), so they are unaffected;
* **control tokens are inert**: chat-template control-token texts in a block (``<|im_end|>``,
  ``<|im_start|>``, ``<|eot_id|>``, ``[INST]``, ``</s>``, ``<start_of_turn>``, ...) get a space after their
  first character (``< |im_end|>``), so the engine's tokenizer reads them as text and a memory cannot close
  the user turn and open a system turn (:mod:`cp_memory.special_tokens`: families, why a space). On by
  default; ``special_tokens=SpecialTokens(enabled=False)`` turns it off, ``extra_patterns`` adds a model's
  own tokens. Deterministic, so the same text still renders to the same bytes;
* annotations are flattened and neutralised the same way, one line each;
* everything that varies per request (annotations, then the question) comes **after** the blocks.

:func:`build_prompt` wraps that in a completion prompt, :func:`build_messages` in chat messages
(system, history, then one user message holding context and question). docs/mem0.md shows the layout.
The rendering itself lives in :mod:`cp_memory.core.prompt` (the prompt contract: a context is rendered once
into a typed record that everyone downstream reads); this module is its public front for text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .annotations import LabelStyle
from .blocks import ContextBlock
from .prompt import (
    NO_CONTEXT_HEAD,
    PROMPT_TEMPLATE,
    USER_TEMPLATE,
    PromptContract,
    UserMessage,
    contract_of,
    one_line,
    prompt_contract,
    rendered_context,
)
from .special_tokens import DEFAULT_SPECIAL_TOKENS, SpecialTokens

__all__ = [
    "PROMPT_TEMPLATE",
    "USER_TEMPLATE",
    "PromptContract",
    "UserMessage",
    "build_messages",
    "build_prompt",
    "context_of",
    "contract_of",
    "one_line",
    "render_blocks",
    "render_context",
]

#: Used instead of the template when there is no context at all.
_NO_CONTEXT_PROMPT = NO_CONTEXT_HEAD + "{query}\nAnswer:"


def render_blocks(
    blocks: Sequence[ContextBlock | str | Mapping[str, Any]],
    *,
    special_tokens: SpecialTokens = DEFAULT_SPECIAL_TOKENS,
    labels: LabelStyle = "doc",
) -> str:
    """The block section: one ``[Doc i] text`` line per block (``labels="number"``: ``i text``), in the
    given (aligned) order, no trailing newline. Line breaks inside a text become spaces and control-token
    texts are made inert (module doc), so N blocks give exactly N lines and no block text reaches the
    engine as a special token."""
    return rendered_context(blocks, special_tokens=special_tokens, labels=labels).section


def render_context(
    blocks: Sequence[ContextBlock | str | Mapping[str, Any]],
    *,
    order_annotation: str | None = None,
    location_annotations: Sequence[str] = (),
    special_tokens: SpecialTokens = DEFAULT_SPECIAL_TOKENS,
    labels: LabelStyle = "doc",
) -> str:
    """Blocks, then a blank line, then location annotations and the order annotation (one per line).

    Byte-identical output for the same block texts in the same order; annotations never precede a block.
    ``special_tokens``: which control-token texts are made inert (module doc); ``labels``: the label style
    (:data:`~cp_memory.annotations.LabelStyle`). Returns ``""`` when there is nothing to show. The text of
    :func:`cp_memory.core.prompt.rendered_context`, the typed record.
    """
    return rendered_context(
        blocks,
        order_annotation=order_annotation,
        location_annotations=location_annotations,
        special_tokens=special_tokens,
        labels=labels,
    ).text


def context_of(
    search_result: Mapping[str, Any] | Sequence[Mapping[str, Any]],
    *,
    special_tokens: SpecialTokens = DEFAULT_SPECIAL_TOKENS,
) -> str:
    """The context text of a search response.

    A :class:`~cp_memory.memory.ContextPilotMemory` response carries it in its prompt contract
    (:func:`contract_of`: aligned blocks + annotations, rendered once with the wrapper's ``special_tokens``
    option; ``context_pilot["context"]`` shows the same text). A plain mem0 response (``{"results": [...]}``
    or the list) is rendered in its own order with no annotations and ``special_tokens`` applied, so the
    helpers also work on an unwrapped Memory.
    """
    return prompt_contract(search_result, special_tokens=special_tokens).context.text


def build_prompt(
    query: str,
    search_result: Mapping[str, Any] | Sequence[Mapping[str, Any]],
    template: str | None = None,
    *,
    special_tokens: SpecialTokens = DEFAULT_SPECIAL_TOKENS,
) -> str:
    """A completion prompt: context (blocks, annotations) first, the question last.

    ``template`` must contain ``{context}`` and ``{query}``; default :data:`PROMPT_TEMPLATE` (and, with no
    context at all, just the question). ``special_tokens``: see :func:`context_of`; the query is the
    caller's own text and is not changed.
    """
    if not isinstance(query, str):
        raise TypeError(f"query must be str, got {type(query).__name__}")
    context = context_of(search_result, special_tokens=special_tokens)
    if template is None:
        template = PROMPT_TEMPLATE if context else _NO_CONTEXT_PROMPT
    return template.format(context=context, query=query)


def build_messages(
    query: str,
    search_result: Mapping[str, Any] | Sequence[Mapping[str, Any]],
    system: str | None = None,
    history: Sequence[Mapping[str, Any]] | None = None,
    *,
    special_tokens: SpecialTokens = DEFAULT_SPECIAL_TOKENS,
) -> list[dict[str, Any]]:
    """Chat messages: ``[system?] + history + [user: context then question]``.

    The system message and the history stay byte-stable across turns, so the engine reuses them as a
    prefix; the retrieved context goes into the new user message (multi-turn dedup's location
    annotations point back into ``history``). Messages in ``history`` are copied, not modified.
    ``special_tokens``: see :func:`context_of` (system, history and query are the caller's, unchanged).
    The user message is the contract's (:meth:`PromptContract.user_message`).
    """
    if not isinstance(query, str):
        raise TypeError(f"query must be str, got {type(query).__name__}")
    messages: list[dict[str, Any]] = []
    if system is not None:
        messages.append({"role": "system", "content": system})
    for i, m in enumerate(history or ()):
        if not isinstance(m, Mapping) or "role" not in m or "content" not in m:
            raise ValueError(f"history[{i}] must be a message dict with 'role' and 'content'")
        messages.append(dict(m))
    content = prompt_contract(search_result, special_tokens=special_tokens).user_message(query).text
    messages.append({"role": "user", "content": content})
    return messages
