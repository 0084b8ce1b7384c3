"""Worker segments for Chain-of-Agents: pack context blocks under a token budget, cache-stably.

Chain-of-Agents (Zhang et al. 2024) gives each worker agent a *segment* of the source text. A worker's
prompt starts with its segment, so a segment is the reusable prefix of that prompt: when two questions
produce a byte-identical segment (or one that starts with the same blocks), the worker that saw it first
can serve it from its engine's prefix cache.

:class:`Segmenter` packs one question's blocks into segments of at most ``budget_tokens`` tokens:

* a block is never split and never dropped (a block larger than the budget becomes a segment alone);
  a block repeated verbatim in the request (same id and text) is processed once;
* segments are aligned with a :class:`~cp_memory.core.index.ContextIndex` over the segments built so far:
  each new segment starts with the longest already-built segment prefix made only of the question's
  remaining blocks, then is filled (first fit) with the remaining blocks in the index's tail order
  (blocks more live segments contain first). Recurring document sets therefore yield byte-identical
  segments, in the same order, whatever order the retriever returned them in;
* rendering is a pure function of the blocks: ``[Doc <id>] <text>`` lines. Labels use the block id, not
  the position, so a segment reads the same in every question that produces it. Chat-template control
  tokens in a document (``<|im_end|>``, ``[INST]``, ``</s>``, ...) are made inert
  (:mod:`cp_memory.special_tokens`; the segmenter's ``special_tokens`` option), so a document cannot end
  the worker's turn and open a system turn.
"""

from __future__ import annotations

import collections
import logging
import threading
import uuid
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

from cp_memory.core.blocks import ContextBlock, estimate_tokens
from cp_memory.core.checks import non_negative_int, positive_int
from cp_memory.core.index import ContextIndex
from cp_memory.core.lru import LRUMap
from cp_memory.core.special_tokens import DEFAULT_SPECIAL_TOKENS, SpecialTokens

__all__ = ["LABEL_TEMPLATE", "Segment", "Segmenter", "id_label", "estimate_tokens", "render_segment"]

logger = logging.getLogger(__name__)

#: a block's identity in segments and the alignment index: ``(id, text digest)``
BlockKey = tuple[Hashable, str]

#: label shown before a block's text in a segment; ``{id}`` is the block id
LABEL_TEMPLATE = "[Doc {id}]"


def id_label(block_id: Hashable, template: str = LABEL_TEMPLATE) -> str:
    """The label a segment shows for ``block_id`` (stable: derived from the id, never the position)."""
    return template.format(id=block_id)


def render_segment(
    blocks: Sequence[ContextBlock],
    template: str = LABEL_TEMPLATE,
    *,
    special_tokens: SpecialTokens = DEFAULT_SPECIAL_TOKENS,
) -> str:
    """``[Doc <id>] <text>`` lines in the given order; text stripped and its control-token texts made
    inert (``special_tokens``), nothing else changed."""
    return "\n".join(f"{id_label(b.id, template)} {special_tokens.neutralise(b.text.strip())}" for b in blocks)


@dataclass(frozen=True, kw_only=True)
class Segment:
    """One worker's share of the source text.

    ``position`` is the 0-based place in the chain; ``token_lens`` parallels ``blocks`` (the block's
    ``tokens`` when set, else the segmenter's ``token_len`` of its text); ``aligned_blocks`` leading blocks
    repeat the start of a segment built earlier (the segmenter's view, before routing).
    """

    position: int
    blocks: tuple[ContextBlock, ...]
    token_lens: tuple[int, ...]
    aligned_blocks: int = 0
    label_template: str = LABEL_TEMPLATE
    special_tokens: SpecialTokens = DEFAULT_SPECIAL_TOKENS

    @property
    def ids(self) -> tuple[Hashable, ...]:
        return tuple(b.id for b in self.blocks)

    @property
    def keys(self) -> tuple[tuple[Hashable, str], ...]:
        """``(id, digest)`` per block: an edited block never matches its old cached text."""
        return tuple(b.key for b in self.blocks)

    @property
    def tokens(self) -> int:
        return sum(self.token_lens)

    @property
    def text(self) -> str:
        return render_segment(self.blocks, self.label_template, special_tokens=self.special_tokens)


class Segmenter:
    """Packs blocks into worker segments of at most ``budget_tokens`` tokens (see module doc). Thread-safe.

    Args:
        budget_tokens: token budget of one worker's segment (the worker's context minus the prompt
            overhead: previous CU, question and instructions).
        token_len: callable text -> token count for blocks without ``tokens``; default
            :func:`cp_memory.core.blocks.estimate_tokens` (the project's one chars/4 rule).
        index: the alignment index over built segments (default: a fresh ``ContextIndex`` with
            frequency tail order). Its ids are block keys ``(id, digest)``.
        max_segments: how many built segments the index remembers (oldest forgotten first).
        label_template: see :data:`LABEL_TEMPLATE`.
        special_tokens: which control-token texts of documents are made inert in segments and in the
            summaries passed along the chain (:class:`~cp_memory.special_tokens.SpecialTokens`; default on,
            ``SpecialTokens(enabled=False)`` off).
    """

    def __init__(
        self,
        budget_tokens: int,
        *,
        token_len: Callable[[str], int] | None = None,
        index: ContextIndex | None = None,
        max_segments: int = 10_000,
        label_template: str = LABEL_TEMPLATE,
        special_tokens: SpecialTokens = DEFAULT_SPECIAL_TOKENS,
    ) -> None:
        positive_int(budget_tokens, "budget_tokens")
        positive_int(max_segments, "max_segments")
        if token_len is not None and not callable(token_len):
            raise TypeError("token_len must be callable (text -> token count)")
        if "{id}" not in label_template:
            raise ValueError("label_template must contain '{id}'")
        if not isinstance(special_tokens, SpecialTokens):
            raise TypeError(f"special_tokens must be a SpecialTokens, got {type(special_tokens).__name__}")
        self.budget_tokens = budget_tokens
        if index is not None and index.extra_budget > 0:
            raise ValueError(
                "the segment index must not use superset alignment (extra_budget=0): a "
                "segment holds only the question's own blocks"
            )
        self.token_len = token_len or estimate_tokens
        self.index = index if index is not None else ContextIndex(tail_order="frequency")
        self.max_segments = max_segments
        self.label_template = label_template
        self.special_tokens = special_tokens
        self._built: collections.deque[str] = collections.deque()
        self._oversized: LRUMap[Hashable, bool] = LRUMap(max_segments)  # blocks already warned about
        self._lock = threading.Lock()

    def block_tokens(self, block: ContextBlock) -> int:
        if block.tokens is not None:
            return block.tokens
        return non_negative_int(self.token_len(block.text), f"token_len of block {block.id!r}")

    def split(self, blocks: Sequence[ContextBlock]) -> tuple[Segment, ...]:
        """Pack ``blocks`` into segments; every distinct block lands in exactly one segment."""
        if blocks is None or isinstance(blocks, (str, bytes)) or not isinstance(blocks, Sequence):
            raise TypeError(f"blocks must be a list or tuple of ContextBlock, got {type(blocks).__name__}")
        by_key: dict[tuple[Hashable, str], ContextBlock] = {}
        for i, b in enumerate(blocks):
            if not isinstance(b, ContextBlock):
                raise TypeError(f"blocks[{i}] is a {type(b).__name__}, expected ContextBlock")
            if b.key in by_key:
                logger.debug("segmenter: block %r repeated verbatim in one request; processed once", b.id)
                continue
            by_key[b.key] = b
        lens = {k: self.block_tokens(b) for k, b in by_key.items()}
        remaining = list(by_key)
        segments: list[Segment] = []
        with self._lock:
            while remaining:
                order, aligned = self._align(remaining)
                take = self._pack(order, aligned, lens)
                n_aligned = 0
                while n_aligned < min(aligned, len(take)) and take[n_aligned] == order[n_aligned]:
                    n_aligned += 1
                taken = set(take)
                remaining = [k for k in remaining if k not in taken]
                take = self._remember(take, lens)
                if len(take) == 1 and lens[take[0]] > self.budget_tokens:
                    # once per block: a recurring document would otherwise repeat it on every question
                    first = take[0] not in self._oversized
                    self._oversized.set(take[0], True)
                    logger.log(
                        logging.WARNING if first else logging.DEBUG,
                        "block %r has %d tokens, over the segment budget of %d; it gets a "
                        "segment of its own (blocks are never split)",
                        take[0][0],
                        lens[take[0]],
                        self.budget_tokens,
                    )
                segments.append(
                    Segment(
                        position=len(segments),
                        blocks=tuple(by_key[k] for k in take),
                        token_lens=tuple(lens[k] for k in take),
                        aligned_blocks=n_aligned,
                        label_template=self.label_template,
                        special_tokens=self.special_tokens,
                    )
                )
        return tuple(segments)

    def _align(self, remaining: list[BlockKey]) -> tuple[list[BlockKey], int]:
        """Order ``remaining`` against the built segments: (aligned order, blocks in the matched prefix).

        A dry run (:meth:`ContextIndex.match`): the index is not changed.
        """
        placement = self.index.match(remaining)
        wanted = set(remaining)
        order = [k for k in placement.order if k in wanted]  # an index with superset alignment adds extras
        prefix = sum(1 for k in placement.order[: placement.prefix_len] if k in wanted)
        return order, prefix

    def _pack(self, order: list[BlockKey], aligned: int, lens: dict[BlockKey, int]) -> list[BlockKey]:
        budget = self.budget_tokens
        take: list[BlockKey] = []
        used = 0
        for i, k in enumerate(order):
            n = lens[k]
            if not take:
                take.append(k)
                used = n
                continue
            if used + n <= budget:
                take.append(k)
                used += n
            elif i < aligned:
                # keep the matched prefix contiguous: stop rather than skip inside it
                break
        return take

    def _remember(self, take: list[BlockKey], lens: dict[BlockKey, int]) -> list[BlockKey]:
        """Index the new segment; return its order as indexed (the order later questions reproduce)."""
        rid = f"seg-{uuid.uuid4().hex}"
        placement = self.index.insert(take, rid, token_lens=[lens[k] for k in take])
        self._built.append(rid)
        while len(self._built) > self.max_segments:
            self.index.evict(self._built.popleft())
        wanted = set(take)
        order = [k for k in placement.order if k in wanted]
        return order if len(order) == len(take) else take

    def clear(self) -> None:
        """Forget every built segment."""
        with self._lock:
            while self._built:
                self.index.evict(self._built.popleft())
