"""ContextIndex: the per-user (or per-engine) context index of the paper (§4), online and offline.

    index = ContextIndex()                      # cold start
    p = index.insert(["m3", "m1", "m7"])        # align one request against everything indexed so far
    p.order, p.prefix_len, p.search_path        # what to render, how much is reusable, where it sits
    index.evict(p.request_id)                   # the engine dropped this request's KV cache

The index mirrors what the engine's prefix cache holds for the block sections of prompts. Each live
request is a leaf (request id <-> engine request id). ``capacity_tokens`` makes the index model the
engine's cache size: it keeps a token count over the trie and evicts least recently used leaves — as
SGLang's RadixCache does — so it never aligns a request to a prefix the engine has already dropped
(:mod:`cp_memory.core.live_trie`). Alignment itself is :mod:`cp_memory.core.alignment` (exact) and
:mod:`cp_memory.core.superset` (superset and swap); snapshots are :mod:`cp_memory.core.index_snapshot`.
"""

from __future__ import annotations

import itertools
import logging
import math
import threading
import uuid
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from .alignment import DEFAULT_TAIL_ORDER, TAIL_ORDERS, Alignment, TailOrder, align_request
from .alignment_mode import AlignmentMode
from .blocks import check_block_ids
from .checks import non_negative_int, one_of, positive_int
from .clustering import DEFAULT_LINKAGE, LINKAGES, Linkage, cluster_orders
from .distance import DEFAULT_ALPHA
from .index_snapshot import MAX_SNAPSHOT_BYTES, OPTION_NAMES, dump, load, restore_options
from .live_trie import LiveTrie
from .scheduling import schedule as schedule_paths
from .tree import Node, path_of, prefix_of

__all__ = ["BatchPlan", "ContextIndex", "Placement"]

logger = logging.getLogger(__name__)

Ids = tuple[Hashable, ...]


@dataclass(frozen=True)
class Placement:
    """Where one request was placed.

    ``order`` is the aligned block order to render: ``set(order) == (set(blocks) - set(dropped)) |
    set(extra)``. ``extra`` are cached blocks the request did not retrieve, adopted with a longer cached
    prefix: superset alignment *adds* them (``dropped`` is empty, the prompt grows); swap alignment
    *replaces* as many of the request's lowest-ranked, unprotected blocks, listed in ``dropped`` (rank
    order), so ``len(order)`` equals the number of distinct blocks. ``prefix_len`` leading blocks of
    ``order`` were already indexed (reusable cache). ``duplicates`` are ids repeated inside the request
    (the first occurrence is kept).
    """

    order: Ids
    search_path: tuple[int, ...]
    prefix_len: int
    request_id: Hashable
    extra: Ids = ()
    duplicates: Ids = ()
    dropped: Ids = ()


@dataclass(frozen=True)
class BatchPlan:
    """Offline build result (Algorithm 4 + 5): per input context its order, search path and request id,
    and ``schedule``, the execution order as indices into the input."""

    orders: tuple[Ids, ...]
    search_paths: tuple[tuple[int, ...], ...]
    request_ids: tuple[Hashable, ...]
    schedule: tuple[int, ...]
    duplicates: tuple[Ids, ...] = ()


def _dedup_ids(blocks: list[Hashable]) -> tuple[list[Hashable], Ids]:
    seen: set[Hashable] = set()
    keep, dups = [], []
    for b in blocks:
        if b in seen:
            dups.append(b)
        else:
            seen.add(b)
            keep.append(b)
    return keep, tuple(dups)


class ContextIndex:
    """Context index tree with online insert, offline build, eviction sync and a cache-size model.

    Args:
        alpha: Eq. 1 positional weight, used by the batch build's clustering (default 0.001).
        mode: the :class:`~cp_memory.core.alignment_mode.AlignmentMode` (default exact). Or, in the flat form
            (not together with ``mode``):
        extra_budget: superset alignment, as a fraction of the request size (0 = off). A request may adopt
            a cached prefix holding up to ``int(extra_budget * len(blocks))`` blocks it did not retrieve,
            *added* to its own (the prompt grows).
        swap_budget: swap alignment, length-neutral (0 = off): a request may adopt up to
            ``B = int(swap_budget * len(blocks))`` cached blocks it did not retrieve, each *replacing* one
            of its own lowest-ranked blocks that is not on the adopted prefix. Exclusive with
            ``extra_budget`` (``ValueError`` when both are on); see :mod:`cp_memory.core.superset`.
        protect: swap alignment never drops a block ranked in the top ``protect`` fraction of the request
            (``ceil(protect * len(blocks))`` blocks; input order is the retrieval rank; default
            :data:`~cp_memory.core.alignment_mode.DEFAULT_PROTECT`).
        capacity_tokens: engine cache size to model (None = unbounded). Block sizes come from
            ``token_lens`` given to :meth:`insert`, else ``token_len(block_id)``, else 1 per block.
        token_len: callable block id -> token count.
        tail_order: ``"frequency"`` (default) or ``"retrieval"``; see :mod:`cp_memory.core.alignment`.
        linkage: scipy linkage method for :meth:`build`, one of :data:`~cp_memory.core.clustering.LINKAGES`.

    Superset and swap apply to :meth:`insert` and :meth:`match`; the offline :meth:`build` only reorders.
    Thread-safe: one lock per index.
    """

    def __init__(
        self,
        *,
        alpha: float = DEFAULT_ALPHA,
        mode: AlignmentMode | None = None,
        extra_budget: float | None = None,
        swap_budget: float | None = None,
        protect: float | None = None,
        capacity_tokens: int | None = None,
        token_len: Callable[[Hashable], int] | None = None,
        tail_order: TailOrder = DEFAULT_TAIL_ORDER,
        linkage: Linkage = DEFAULT_LINKAGE,
    ) -> None:
        if not _number(alpha) or alpha < 0:
            raise ValueError(f"alpha must be a non-negative number, got {alpha!r}")
        self.mode = AlignmentMode.resolve(mode, extra_budget, swap_budget, protect)
        if capacity_tokens is not None:
            positive_int(capacity_tokens, "capacity_tokens")
        if token_len is not None and not callable(token_len):
            raise TypeError("token_len must be callable (block id -> token count)")
        one_of(tail_order, "tail_order", TAIL_ORDERS)
        one_of(linkage, "linkage", LINKAGES)
        self.alpha = float(alpha)
        self.capacity_tokens = capacity_tokens
        self.token_len = token_len
        self.tail_order: TailOrder = tail_order
        self.linkage: Linkage = linkage
        self._lock = threading.RLock()
        self._live = LiveTrie(capacity_tokens)
        self._subscribers: tuple[Callable[[Hashable], None], ...] = ()

    # ------------------------------------------------------------------ introspection
    @property
    def extra_budget(self) -> float:
        """The superset budget of :attr:`mode` (0.0 unless superset)."""
        return self.mode.extra_budget

    @property
    def swap_budget(self) -> float:
        """The swap budget of :attr:`mode` (0.0 unless swap)."""
        return self.mode.swap_budget

    @property
    def protect(self) -> float:
        """The protected top fraction of :attr:`mode` (swap only; the default otherwise)."""
        return self.mode.protect

    def __len__(self) -> int:
        return len(self._live.requests)

    def __contains__(self, request_id: Hashable) -> bool:
        return request_id in self._live.requests

    @property
    def cached_tokens(self) -> int:
        """Tokens the modelled cache holds (block sections only), counted once per trie node."""
        return self._live.tokens

    @property
    def node_count(self) -> int:
        return self._live.nodes

    @property
    def evicted_by_capacity(self) -> int:
        """Leaves evicted by the capacity model so far."""
        return self._live.evicted_by_capacity

    def request_ids(self) -> list[Hashable]:
        """Live request ids, least recently used (earliest inserted) first; kept across snapshots."""
        with self._lock:
            return list(self._live.requests)

    def order_of(self, request_id: Hashable) -> Ids | None:
        """The aligned order of a live request, or None."""
        with self._lock:
            node = self._live.requests.get(request_id)
            return None if node is None else prefix_of(node)

    def frequency(self, block_id: Hashable) -> int:
        """How many live requests contain ``block_id``."""
        return self._live.freq.get(block_id, 0)

    # ------------------------------------------------------------------ online mode
    def insert(
        self,
        blocks: Sequence[Hashable],
        request_id: Hashable | None = None,
        *,
        token_lens: Sequence[int] | None = None,
        pin: bool = False,
    ) -> Placement:
        """Align one request against the live index, insert it as a leaf and return its placement; ``pin``:
        pinned as it goes in (:meth:`pin`), for a request whose engine call is about to start."""
        ids = check_block_ids(blocks)
        lens: list[int] | None = None
        if token_lens is not None:
            lens = list(token_lens)
            if len(lens) != len(ids):
                raise ValueError(f"token_lens has {len(lens)} entries for {len(ids)} blocks")
            for i, t in enumerate(lens):
                non_negative_int(t, f"token_lens[{i}]")
        ids_kept, dups = _dedup_ids(ids)
        with self._changing():
            rid = self._check_request_id(request_id)
            if not ids_kept:
                return Placement((), (), 0, rid, (), dups)
            a = self._align(ids_kept)
            toks = None
            if self.capacity_tokens is not None:
                given: dict[Hashable, int] = {}
                for b, t in zip(ids, lens or ()):
                    given.setdefault(b, t)  # a repeated id keeps its first length
                toks = [self._block_tokens(b, given) for b in a.order]
            node = self._live.attach(a.order, toks, rid)
            if pin:
                self._live.pin(rid)
            return Placement(a.order, path_of(node), a.prefix_len, rid, a.extra, dups, a.dropped)

    def match(self, blocks: Sequence[Hashable]) -> Placement:
        """Dry run of :meth:`insert`: the placement ``blocks`` would get now, changing nothing (no leaf,
        no LRU refresh). ``request_id`` is None; ``search_path`` leads to the node holding the end of the
        matched prefix."""
        ids_kept, dups = _dedup_ids(check_block_ids(blocks))
        with self._lock:
            if not ids_kept:
                return Placement((), (), 0, None, (), dups)
            a = self._align(ids_kept)
            return Placement(a.order, path_of(a.match.end), a.prefix_len, None, a.extra, dups, a.dropped)

    def _align(self, ids_kept: list[Hashable]) -> Alignment:
        return align_request(
            self._live.root,
            ids_kept,
            self._live.freq,
            tail_order=self.tail_order,
            mode=self.mode,
        )

    def _block_tokens(self, block: Hashable, given: Mapping[Hashable, int]) -> int:
        if block in given:
            return given[block]
        if self.token_len is not None:
            return non_negative_int(self.token_len(block), f"token_len({block!r})")
        return 1

    def _check_request_id(self, request_id: Hashable | None) -> Hashable:
        if request_id is None:
            return uuid.uuid4().hex
        try:
            hash(request_id)
        except TypeError as exc:
            raise TypeError(f"request_id must be hashable, got {type(request_id).__name__}") from exc
        if request_id in self._live.requests:
            raise ValueError(f"request_id {request_id!r} is already live in this index")
        return request_id

    # ------------------------------------------------------------------ eviction sync
    def evict(self, request_id: Hashable) -> bool:
        """The engine evicted ``request_id``: remove its leaf and prune empty ancestors. Unknown id -> False."""
        if not _hashable(request_id):
            return False
        with self._changing():
            return self._live.evict(request_id)

    def clear(self) -> None:
        """Forget everything (the engine flushed its cache); subscribers hear of every live request."""
        with self._changing():
            old = self._live
            self._live = LiveTrie(self.capacity_tokens)
            self._live.capacity_paused = old.capacity_paused
            self._live.gone = [*old.gone, *old.requests]

    def trim(self, max_requests: int) -> list[Hashable]:
        """Evict the earliest inserted live requests until at most ``max_requests`` are left (the owner's bound
        on live requests, e.g. the mem0 wrapper's ``max_requests_per_scope``); returns them, oldest first."""
        non_negative_int(max_requests, "max_requests")
        with self._changing():
            over = len(self._live.requests) - max_requests
            oldest = list(itertools.islice(self._live.requests, over)) if over > 0 else []
            for rid in oldest:
                self._live.evict(rid)
        return oldest

    def pin(self, request_id: Hashable) -> bool:
        """Pin live request ``request_id`` while its engine call is in flight (SGLang's ``inc_lock_ref``): the
        capacity model never evicts its leaf or the path to it until :meth:`unpin`; it evicts other leaves, or
        stays over capacity while only pinned ones are left. Pins count (each :meth:`pin` needs its
        :meth:`unpin`). The engine's own evictions (:meth:`evict`), :meth:`trim` and :meth:`clear` still remove
        a pinned request, and its pins with it. False when the request is not live."""
        if not _hashable(request_id):
            return False
        with self._lock:
            return self._live.pin(request_id)

    def unpin(self, request_id: Hashable) -> bool:
        """Release one pin of :meth:`pin` (SGLang's ``dec_lock_ref``); with none left the request is evictable
        again, from the next change on (unpinning evicts nothing itself, so a caller that unpins before its
        next request sees the index as if it had never pinned). False when the request held no pin."""
        if not _hashable(request_id):
            return False
        with self._lock:
            return self._live.unpin(request_id)

    @property
    def pinned(self) -> int:
        """Live requests holding a pin."""
        return len(self._live.pins)

    def subscribe(self, on_evict: Callable[[Hashable], None]) -> Callable[[], None]:
        """Call ``on_evict(request_id)`` for every request that leaves this index from now on, whatever the
        cause: the capacity model, the engine's events (:meth:`evict`), :meth:`trim`, :meth:`clear`. Called in
        order, after the index's lock is released (a subscriber may call back into the index or wait on a
        thread that does); one that raises is logged, never the caller's error. Returns the unsubscribe call."""
        if not callable(on_evict):
            raise TypeError(f"on_evict must be callable (request id -> None), got {type(on_evict).__name__}")
        with self._lock:
            self._subscribers = (*self._subscribers, on_evict)

        def unsubscribe() -> None:
            with self._lock:
                self._subscribers = tuple(s for s in self._subscribers if s is not on_evict)

        return unsubscribe

    @contextmanager
    def _changing(self) -> Iterator[None]:
        """The index's lock, for a change that may evict; the requests it evicted go to the subscribers after
        the lock is released."""
        with self._lock:
            try:
                yield
            finally:
                gone, self._live.gone = self._live.gone, []
                subscribers = self._subscribers
        for rid in gone if subscribers else ():
            for on_evict in subscribers:
                try:
                    on_evict(rid)
                except Exception:
                    logger.exception("a subscriber of this index's evictions failed on request %r", rid)

    def use_capacity_model(self, on: bool) -> None:
        """``False``: the engine reports its own evictions (a KV-event feed calling :meth:`evict`,
        :class:`~cp_memory.engine.kv_sync.KVCacheSync`), so the ``capacity_tokens`` model stops evicting;
        it still counts tokens and keeps the LRU order. ``True`` (the initial state): it evicts again, at
        once down to capacity — the fallback when the feed is lost. No-op without ``capacity_tokens``."""
        with self._changing():
            self._live.capacity_paused = not on
            if on and self._live.capacity_tokens is not None:
                self._live.enforce_capacity(None)

    # ------------------------------------------------------------------ offline mode
    def build(
        self,
        contexts: Sequence[Sequence[Hashable]],
        request_ids: Sequence[Hashable] | None = None,
        *,
        token_lens: Sequence[Sequence[int]] | None = None,
    ) -> BatchPlan:
        """Offline mode: cluster a batch (Algorithm 4), insert the aligned contexts, schedule them
        (Algorithm 5). Later :meth:`insert` calls continue from the built tree."""
        if contexts is None or isinstance(contexts, (str, bytes)) or not isinstance(contexts, Sequence):
            raise TypeError(f"contexts must be a list of block-id lists, got {type(contexts).__name__}")
        lists = [check_block_ids(c, f"contexts[{i}]") for i, c in enumerate(contexts)]
        rid_list = list(request_ids) if request_ids is not None else None
        if rid_list is not None:
            if len(rid_list) != len(lists):
                raise ValueError(f"got {len(rid_list)} request_ids for {len(lists)} contexts")
            if len(set(rid_list)) != len(rid_list):
                raise ValueError("request_ids must be distinct")
        if token_lens is not None and len(token_lens) != len(lists):
            raise ValueError(f"got {len(token_lens)} token_lens lists for {len(lists)} contexts")
        deduped = [_dedup_ids(c) for c in lists]
        orders = cluster_orders(
            [k for k, _ in deduped], alpha=self.alpha, method=self.linkage, tail_order=self.tail_order
        )
        with self._changing():
            rids = []
            nodes: list[Node | None] = []
            for i, order in enumerate(orders):
                rid = self._check_request_id(rid_list[i] if rid_list is not None else None)
                rids.append(rid)
                if not order:
                    nodes.append(None)
                    continue
                toks = None
                if self.capacity_tokens is not None:
                    given = dict(zip(lists[i], token_lens[i])) if token_lens is not None else {}
                    toks = [self._block_tokens(b, given) for b in order]
                nodes.append(self._live.attach(order, toks, rid))
            paths = tuple(path_of(n) if n is not None and n.alive else () for n in nodes)
        return BatchPlan(tuple(orders), paths, tuple(rids), tuple(schedule_paths(paths)), tuple(d for _, d in deduped))

    # ------------------------------------------------------------------ persistence
    def options(self) -> dict[str, Any]:
        """The configuration a snapshot stores (everything but ``token_len``)."""
        return {
            "alpha": self.alpha,
            **self.mode.options(),
            "capacity_tokens": self.capacity_tokens,
            "tail_order": self.tail_order,
            "linkage": self.linkage,
        }

    def snapshot(self) -> bytes:
        """Serialise the index (tree, live requests in LRU order, access clock, options) to compact bytes
        (zlib'd JSON, format in :mod:`cp_memory.core.index_snapshot`).

        Block and request ids must be str, int, finite float, bool, bytes or tuples of those.
        """
        with self._lock:
            live = self._live
            return dump(self.options(), live.tick, live.root, live.requests.items())

    @classmethod
    def restore(
        cls, data: bytes, *, max_bytes: int = MAX_SNAPSHOT_BYTES, max_requests: int | None = None, **overrides: Any
    ) -> ContextIndex:
        """Rebuild an index from :meth:`snapshot` bytes.

        ``overrides`` (any of ``alpha``, ``mode``, ``capacity_tokens``, ``tail_order``, ``linkage``,
        ``token_len``, and the flat ``extra_budget``, ``swap_budget``, ``protect``) win over the stored
        configuration: a caller restores with its own settings. The alignment mode is one value, never
        merged with the stored one: ``mode=`` replaces it, and so do any of the flat three (those not given
        take their defaults, not the stored values), so ``restore(data, extra_budget=0.0)`` is exact
        alignment whatever the snapshot used. A smaller ``capacity_tokens`` than the snapshot holds evicts
        least recently used leaves at once. Live requests keep their least-recently-used order
        (:meth:`request_ids`). ``max_bytes`` bounds the decompressed snapshot (and so the memory a restore
        may take; see :mod:`cp_memory.core.index_snapshot`). ``max_requests``: keep only that many most
        recently used requests, dropping the others (and the nodes only they used) in one pass.

        Raises ``ValueError`` — and only ``ValueError`` — for malformed data (truncated, garbage, over
        ``max_bytes``, not a JSON object, wrong field types, unknown version, inconsistent tree). Bad
        overrides raise as the constructor does (``TypeError`` for an unknown name).
        """
        known = (*OPTION_NAMES, "mode", "token_len")
        unknown = sorted(set(overrides) - set(known))
        if unknown:
            raise TypeError(f"restore() got unknown option(s) {unknown}; known: {known}")
        cls(**overrides)  # a bad override is the caller's error, reported as such
        snap = load(data, max_bytes=max_bytes, max_requests=max_requests)
        options = restore_options(snap.options, overrides)
        try:
            index = cls(**options)
        except (TypeError, ValueError) as exc:
            raise ValueError(f"corrupt ContextIndex snapshot: stored options: {exc}") from None
        try:
            with index._lock:
                sized = None if index.token_len is None else (lambda b: index._block_tokens(b, {}))
                index._live.adopt(snap.root, snap.requests, snap.tick, sized)
                index._live.gone.clear()  # fitted to capacity before anyone could subscribe
        except (TypeError, ValueError) as exc:  # token_len rejected a stored block, ...
            raise ValueError(f"corrupt ContextIndex snapshot: {exc}") from exc
        return index


def _number(x: object) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _hashable(value: object) -> bool:
    """Whether ``value`` can be a request id (an unhashable one is no live request's: the lookups answer False)."""
    try:
        hash(value)
    except TypeError:
        return False
    return True
