"""Anthropic Messages requests from cp_memory's layout, with ``cache_control`` breakpoints where the cached
prefix ends.

:func:`anthropic_request` builds ``system``/``tools``/``messages`` for ``client.messages.create(**req.kwargs())``
from a ``ContextPilotMemory.search`` response and places at most 4 breakpoints *in total* (the caller's own
marks on system, tools or history are counted and kept, never removed):

* ``stable`` — the last block of tools + system: shared by every request of the application;
* ``turn`` — the moving one: the end of the new user message in a conversation whose messages stay in the
  history as sent (the ``"append"`` layout), so the next turn reads everything; in a one-shot question the
  end of the memory lines (the question itself is never shared);
* ``history`` — the end of the history, when the ``turn`` breakpoint cannot see the previous request's end
  within Anthropic's 20-block lookback (a long tool-using turn, a new message cut into many blocks) or when
  the new message will not stay in the history (the ``"late"`` layout);
* ``aligned`` — one-shot questions: the end of the aligned memory prefix this question shares with an
  earlier prompt of the scope (the prompt contract's shared prefix, ``context_pilot["prefix_len"]``), so
  that prefix is read and re-written where the next aligned question will look for it;
* ``anchor`` — one-shot questions, with breakpoints to spare: every 20 memory lines above the aligned prefix.
  A later question aligned with this one reads an entry only where some request wrote one, and only within
  20 blocks before one of its own breakpoints; anchors 20 lines apart make that reach contiguous. They add no
  write cost (a write is billed once, from the read point to the last breakpoint).

The memory lines of a one-shot question are sent as one text block each: the pieces of the search's prompt
contract (:class:`~cp_memory.core.prompt.UserMessage`, rendered once by the search; their concatenation is
the layout's text byte for byte), so that their boundaries are block boundaries Anthropic can cache at.

A breakpoint whose prefix does not reach the model's minimum cacheable length is not placed (it would cache
nothing, silently). Tokens are counted by :func:`~cp_memory.providers.tokens.default_counting`; an unknown
model gets the largest documented minimum and a warning. Prefix order is the API's: tools, system, messages.
"""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, get_args

from ..core.checks import non_negative_int, one_of, positive_int
from ..core.prompt import PromptContract, UserMessage, prompt_contract
from .marks import find_marks
from .rules import ANTHROPIC_LOOKBACK_BLOCKS, ANTHROPIC_MAX_BREAKPOINTS, ANTHROPIC_TTLS, anthropic_min_tokens
from .tokens import Counting, default_counting

__all__ = ["AnthropicRequest", "Breakpoint", "anthropic_request", "block_texts", "count_breakpoints"]

logger = logging.getLogger(__name__)

Where = Literal["stable", "turn", "history", "aligned", "anchor", "caller"]
Layout = Literal["append", "late", "oneshot"]


@dataclass(frozen=True)
class Breakpoint:
    """A ``cache_control`` mark: which block (index over tools, system, messages' blocks), why, the tokens of
    the prefix it closes and its TTL."""

    where: Where
    block: int
    prefix_tokens: int
    ttl: str


@dataclass(frozen=True)
class AnthropicRequest:
    """What to send: :meth:`kwargs` for ``client.messages.create``; ``breakpoints`` all marks in the request
    (the caller's included, ``where="caller"``); ``min_tokens`` the minimum applied."""

    system: list[dict[str, Any]]
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]]
    breakpoints: tuple[Breakpoint, ...]
    min_tokens: int
    skipped: tuple[str, ...] = field(default=())  # breakpoints left out: "turn: below minimum", ...

    def kwargs(self) -> dict[str, Any]:
        out: dict[str, Any] = {"messages": self.messages}
        if self.system:
            out["system"] = self.system
        if self.tools:
            out["tools"] = self.tools
        return out


def _block_text(block: Any) -> str:
    """The text a content block (or tool definition) contributes, for counting tokens."""
    if isinstance(block, str):
        return block
    if not isinstance(block, Mapping):
        return ""
    kind = block.get("type")
    if kind == "text" or (kind is None and isinstance(block.get("text"), str)):
        return str(block.get("text") or "")
    if kind == "tool_result":
        content = block.get("content")
        if isinstance(content, str):
            return content
        if isinstance(content, list):
            return "".join(_block_text(c) for c in content)
        return ""
    if kind in ("image", "document") or kind is None and "source" in block:
        return ""  # unknown token count: counted as 0, the conservative side
    body = {k: v for k, v in block.items() if k != "cache_control"}
    try:
        return json.dumps(body, sort_keys=True, ensure_ascii=False)
    except (TypeError, ValueError, RecursionError):  # int and str keys together (unsortable), odd values
        try:
            return json.dumps(body, ensure_ascii=False, default=str)
        except (TypeError, ValueError, RecursionError):
            return ""  # not serialisable at all: counted as 0, the conservative side


def _as_blocks(content: Any) -> list[Any]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    if isinstance(content, list):
        return content
    raise TypeError(f"message content must be a str or a list of content blocks, got {type(content).__name__}")


def block_texts(
    tools: Sequence[Mapping[str, Any]], system: Sequence[Any], messages: Sequence[Mapping[str, Any]]
) -> list[tuple[str, str | None]]:
    """Every block of a request in the API's prefix order (tools, system, messages' content blocks) as
    ``(text, breakpoint TTL or None)``."""
    out: list[tuple[str, str | None]] = []

    def mark(block: Any) -> str | None:
        cc = block.get("cache_control") if isinstance(block, Mapping) else None
        if isinstance(cc, Mapping):
            ttl = cc.get("ttl", "5m")
            return ttl if ttl in ANTHROPIC_TTLS else "5m"
        return None

    for t in tools:
        out.append((_block_text(t), mark(t)))
    for b in system:
        out.append((_block_text(b), mark(b)))
    for m in messages:
        for b in _as_blocks(m.get("content", "")):
            out.append((_block_text(b), mark(b)))
    return out


def count_breakpoints(
    tools: Sequence[Mapping[str, Any]], system: Sequence[Any], messages: Sequence[Mapping[str, Any]]
) -> int:
    """Every mark the API counts, nested ones included (:func:`cp_memory.providers.marks.find_marks`)."""
    return len(find_marks(list(tools), list(system), list(messages)))


def _system_blocks(system: str | Sequence[Mapping[str, Any]] | None) -> list[dict[str, Any]]:
    if system is None:
        return []
    if isinstance(system, str):
        return [{"type": "text", "text": system}] if system else []
    out = []
    for i, b in enumerate(system):
        if not isinstance(b, Mapping) or b.get("type") != "text":
            raise ValueError(f"system[{i}] must be a text block {{'type': 'text', 'text': ...}}")
        out.append(copy.deepcopy(dict(b)))
    return out


def _history(history: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for i, m in enumerate(history):
        if not isinstance(m, Mapping) or m.get("role") not in ("user", "assistant") or "content" not in m:
            raise ValueError(f"history[{i}] must be a message {{'role': 'user'|'assistant', 'content': ...}}")
        _as_blocks(m["content"])
        out.append(copy.deepcopy(dict(m)))
    return out


def anthropic_request(
    query: str,
    response: Mapping[str, Any] | Sequence[Mapping[str, Any]],
    *,
    model: str | None,
    system: str | Sequence[Mapping[str, Any]] | None = None,
    history: Sequence[Mapping[str, Any]] = (),
    tools: Sequence[Mapping[str, Any]] = (),
    layout: Literal["append", "late", "oneshot"] | None = None,
    ttl: str = "5m",
    stable_ttl: str | None = None,
    max_breakpoints: int = ANTHROPIC_MAX_BREAKPOINTS,
    min_tokens: int | None = None,
    counting: Counting | None = None,
) -> AnthropicRequest:
    """An Anthropic request for ``query`` with the memories of ``response`` late in the conversation.

    ``history``: earlier messages in Anthropic's format (copied, never changed); ``layout``: ``"append"``
    (the new message stays in the history as sent; default when the response belongs to a dedup
    conversation), ``"late"`` (it will be replaced by the plain question; default with a history and no
    conversation), ``"oneshot"`` (default without history). ``ttl``/``stable_ttl``: ``"5m"`` or ``"1h"`` for
    the moving and the stable breakpoints (a 1 h one must precede 5 min ones). ``min_tokens`` overrides the
    model's documented minimum.

    Raises ``ValueError`` for ``max_breakpoints`` above 4, a caller with more marks than that, a bad TTL.
    """
    stable_ttl, min_tokens = _checked_settings(model, ttl, stable_ttl, max_breakpoints, min_tokens)
    counting = counting or default_counting()
    tool_list = [copy.deepcopy(dict(t)) for t in tools]
    system_blocks = _system_blocks(system)
    past = _history(history)
    contract = prompt_contract(response)
    layout = _layout(layout, contract, past)
    cut = contract.user_message(query)
    messages = past + [{"role": "user", "content": _new_message(layout, cut)}]

    blocks = block_texts(tool_list, system_blocks, messages)
    marked = {i for i, (_, t) in enumerate(blocks) if t is not None}
    n_caller = len(find_marks(tool_list, system_blocks, messages))  # nested marks (tool results) count too
    if n_caller > max_breakpoints:
        raise ValueError(
            f"the request already carries {n_caller} cache_control breakpoints; at most {max_breakpoints} allowed"
        )
    cum = _prefix_tokens(blocks, counting)
    n_stable = len(tool_list) + len(system_blocks)
    wanted = _wanted(layout, cut, past, n_stable, len(blocks), ttl, stable_ttl)
    chosen, skipped = _choose(wanted, marked, cum, counting, min_tokens, max_breakpoints - n_caller)
    _apply(chosen, tool_list, system_blocks, past, messages)
    marks = _breakpoints(chosen, marked, blocks, cum)
    return AnthropicRequest(system_blocks, messages, tool_list, marks, min_tokens, tuple(skipped))


def _layout(layout: Layout | None, contract: PromptContract, past: list[dict[str, Any]]) -> Layout:
    """The layout asked for, or the default: ``"append"`` in a dedup conversation, ``"late"`` with a history,
    ``"oneshot"`` otherwise."""
    if layout is None:
        conversation = contract.conversation_id is not None
        return "append" if conversation else ("late" if past else "oneshot")
    return one_of(layout, "layout", get_args(Layout))


def _new_message(layout: Layout, cut: UserMessage) -> list[dict[str, Any]]:
    """The new user message's blocks: one per memory line (then the question) in a one-shot question with
    memories, so that line boundaries are block boundaries; else one text block."""
    if layout == "oneshot" and cut.docs:
        return [{"type": "text", "text": p} for p in cut.pieces]
    return [{"type": "text", "text": cut.text}]


def _prefix_tokens(blocks: list[tuple[str, str | None]], counting: Counting) -> list[int]:
    """Tokens of the prefix each block closes (a running total in prefix order)."""
    cum: list[int] = []
    total = 0
    for text, _ in blocks:
        total += counting.tokens(text)
        cum.append(total)
    return cum


def _breakpoints(
    chosen: list[tuple[Where, int, str]], marked: set[int], blocks: list[tuple[str, str | None]], cum: list[int]
) -> tuple[Breakpoint, ...]:
    """Every mark of the request in block order, the caller's included; refuses a 1 h mark after a 5 min one."""
    marks = sorted(
        [Breakpoint(w, at, cum[at], t) for w, at, t in chosen]
        + [Breakpoint("caller", i, cum[i], str(blocks[i][1])) for i in marked],
        key=lambda b: b.block,
    )
    for a, b in zip(marks, marks[1:]):
        if a.ttl == "5m" and b.ttl == "1h":
            raise ValueError(
                f"a 1h cache_control breakpoint (block {b.block}, {b.where}) after a 5m one (block {a.block}, "
                f"{a.where}): Anthropic needs longer TTLs first; use ttl='5m' or set the earlier mark to 1h"
            )
    return tuple(marks)


def _checked_settings(
    model: str | None, ttl: str, stable_ttl: str | None, max_breakpoints: int, min_tokens: int | None
) -> tuple[str, int]:
    """The stable breakpoints' TTL and the minimum cacheable prefix, after checking every setting."""
    non_negative_int(max_breakpoints, "max_breakpoints")
    if max_breakpoints > ANTHROPIC_MAX_BREAKPOINTS:
        raise ValueError(
            f"max_breakpoints={max_breakpoints}: Anthropic accepts at most {ANTHROPIC_MAX_BREAKPOINTS} "
            "cache_control breakpoints per request"
        )
    stable_ttl = ttl if stable_ttl is None else stable_ttl
    for name, value in (("ttl", ttl), ("stable_ttl", stable_ttl)):
        one_of(value, name, ANTHROPIC_TTLS)
    if stable_ttl == "5m" and ttl == "1h":
        raise ValueError("ttl='1h' after stable_ttl='5m': Anthropic needs longer TTLs before shorter ones")
    if min_tokens is None:
        min_tokens, known = anthropic_min_tokens(model)
        if not known:
            logger.warning(
                "unknown Anthropic model %r: assuming the largest documented minimum cacheable prefix (%d "
                "tokens); pass min_tokens= for the model's own",
                model,
                min_tokens,
            )
    else:
        positive_int(min_tokens, "min_tokens")
    return stable_ttl, min_tokens


def _wanted(
    layout: str, cut: UserMessage, past: list[dict[str, Any]], n_stable: int, n_blocks: int, ttl: str, stable_ttl: str
) -> list[tuple[Where, int, str]]:
    """Where breakpoints would go, most useful first: (kind, block index, TTL)."""
    n_past = sum(len(_as_blocks(m["content"])) for m in past)
    first_new = n_stable + n_past
    last_user = None  # last block of the last user message in the history: the previous request's end
    pos = n_stable
    for m in past:
        size = len(_as_blocks(m["content"]))
        if m["role"] == "user":
            last_user = pos + size - 1
        pos += size

    wanted: list[tuple[Where, int, str]] = []
    if layout == "append":
        wanted.append(("turn", n_blocks - 1, ttl))
    elif layout == "oneshot" and cut.docs:
        wanted.append(("turn", first_new + cut.docs - 1, ttl))
    if n_past:
        turn_at = wanted[0][1] if wanted else None
        far = last_user is not None and (turn_at is None or turn_at - last_user > ANTHROPIC_LOOKBACK_BLOCKS)
        if layout == "late" or far:
            end = first_new - 1
            if last_user is not None and end - last_user > ANTHROPIC_LOOKBACK_BLOCKS:
                end = last_user + ANTHROPIC_LOOKBACK_BLOCKS  # a long assistant turn: stay in reach
            wanted.append(("history", end, ttl))
    stable = ("stable", n_stable - 1, stable_ttl) if n_stable else None
    if stable is not None:
        wanted.insert(0 if layout == "oneshot" else len(wanted), stable)  # type: ignore[arg-type]
    if layout == "oneshot" and 0 < cut.shared < cut.docs:
        wanted.append(("aligned", first_new + cut.shared - 1, ttl))

    if layout == "oneshot" and cut.docs:  # lookback anchors: contiguous reach above the aligned prefix
        start = cut.shared if 0 < cut.shared < cut.docs else 0
        for at in range(start + ANTHROPIC_LOOKBACK_BLOCKS, cut.docs, ANTHROPIC_LOOKBACK_BLOCKS):
            wanted.append(("anchor", first_new + at - 1, ttl))
    return wanted


def _choose(
    wanted: list[tuple[Where, int, str]],
    marked: set[int],
    cum: list[int],
    counting: Counting,
    min_tokens: int,
    budget: int,
) -> tuple[list[tuple[Where, int, str]], list[str]]:
    """The breakpoints placed (in ``wanted`` order, within ``budget``, at or above the minimum) and why
    the others were not."""
    chosen: list[tuple[Where, int, str]] = []
    skipped: list[str] = []
    for where, at, t in wanted:
        if at in marked or any(at == c[1] for c in chosen):
            continue
        if not counting.reaches(cum[at], min_tokens):
            skipped.append(f"{where}: {cum[at]} tokens, below the minimum {min_tokens}")
            continue
        if budget <= 0:
            skipped.append(f"{where}: no breakpoint left (4 at most, the caller's counted)")
            continue
        chosen.append((where, at, t))
        budget -= 1
    return chosen, skipped


def _apply(
    chosen: list[tuple[Where, int, str]],
    tool_list: list[Any],
    system_blocks: list[Any],
    past: list[dict[str, Any]],
    messages: list[dict[str, Any]],
) -> None:
    """Put the marks onto the blocks (strings become a text block list on the marked message only)."""
    plain = [m["content"] if isinstance(m["content"], str) else None for m in past]  # str contents, to restore
    flat: list[tuple[list[Any], int]] = [(tool_list, i) for i in range(len(tool_list))]
    flat += [(system_blocks, i) for i in range(len(system_blocks))]
    for m in messages:
        if isinstance(m["content"], str):
            m["content"] = [{"type": "text", "text": m["content"]}]
        flat += [(m["content"], i) for i in range(len(m["content"]))]
    for _, at, t in chosen:
        holder, i = flat[at]
        holder[i] = dict(holder[i])
        holder[i]["cache_control"] = {"type": "ephemeral"} if t == "5m" else {"type": "ephemeral", "ttl": t}
    for m, original in zip(messages, plain):  # unmarked history messages keep their original shape
        if original is not None and not any("cache_control" in b for b in m["content"]):
            m["content"] = original
