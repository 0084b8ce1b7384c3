"""Agent-aware routing: send a worker segment to the engine that already holds its KV cache.

A pool of workers, each bound to one engine endpoint — a llama-server instance, an SGLang replica, or one
slot of a server (an :class:`~cp_memory.engine.EngineClient` with ``extra_body={"id_slot": i}``). Each
worker has its own :class:`~cp_memory.core.index.ContextIndex` modelling what its engine's prefix cache holds:
routed segments are inserted under the engine request id, least recently used ones are dropped once
``capacity_tokens`` is exceeded (never one in flight: pinned from route to release), and
:meth:`AgentRouter.evict` syncs an eviction the engine reported.

Policy ``"affinity"`` (ContextPilot's agent-aware routing), per segment:

1. **affinity**: the worker whose cache model holds the longest prefix of the segment (in tokens, at
   least ``min_match_tokens``; ties: the less loaded) — a recurring document returns to its worker;
2. **load safeguard** (SGLang router's rule): if the candidate's load ``hi`` (requests in flight) and the
   pool's minimum ``lo`` satisfy ``hi - lo > balance_abs_threshold`` *and* ``hi > balance_rel_threshold *
   lo``, the least-loaded worker instead (``balance_scope="global"``: SGLang's test of the pool's max load);
3. **home**: a segment no model holds any more goes back to the worker that held it last, while fewer than
   ``capacity_tokens`` tokens were written into that cache since (its engine may still hold it);
4. **new content** (``placement="cache"``): among the workers the safeguard allows, one whose model still
   has room for it, else the one whose cache has taken in the fewest tokens (it turns over slowest); ties:
   the emptier model, the less loaded. ``placement="load"``: the least-loaded worker.

Why each rule, and what SGLang's router does instead: docs/coa.md ("Routing").

With ``tail_tokens`` the model also holds what follows the segment in each prompt (an engine caches whole
prompts), so a worker's modelled occupancy follows its engine's.

With ``feeds`` (one :class:`~cp_memory.core.engine_cache.EngineCache` or None per worker) a worker's cache
model follows its engine's KV-cache events instead of the capacity guess (:mod:`.worker_feeds`).

Policy ``"round_robin"`` is the cache-blind baseline. Segments are matched by *exact ordered* prefix:
the worker indexes store position-tagged block keys ``(i, key)`` with retrieval tail order, so a cached
``[a, b]`` matches a segment ``[a, b, c]`` but not ``[b, a]`` — as the engine's token-level cache does.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import threading
import time
import uuid
from collections.abc import Callable, Hashable, Iterator, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

from cp_memory.core.checks import member, non_negative_int, positive_int
from cp_memory.core.engine_cache import EngineCache
from cp_memory.core.index import ContextIndex
from cp_memory.core.lru import LRUMap
from cp_memory.state.ops import Op, arun, run

from .routes import (
    BalanceScope,
    PlacementPolicy,
    Route,
    RouteReason,
    RouterStats,
    RoutingPolicy,
    WorkerCounters,
    worker_names,
)
from .shared_routing import Placed, RouterState, RouterStateConfig, SharedView
from .worker_feeds import WorkerFeeds

__all__ = ["AgentRouter"]

logger = logging.getLogger(__name__)

ClientT = TypeVar("ClientT")
T = TypeVar("T")

_UNBOUNDED = 2**62


class AgentRouter(Generic[ClientT]):
    """A pool of workers with per-worker cache models; picks a worker per segment (see module doc).

    Thread-safe, and safe to use from asyncio code (routing never blocks on I/O).

    Args:
        clients: one engine client per worker (anything the caller can send prompts to; the router
            never calls it).
        names: worker names for results and logs (default ``worker-0`` ...).
        policy: :class:`RoutingPolicy` (or its string): ``"affinity"`` or ``"round_robin"``.
        capacity_tokens: per-worker prefix-cache size to model, in tokens (None = unbounded).
        balance_abs_threshold, balance_rel_threshold: the load safeguard (see module doc).
        balance_scope: :class:`BalanceScope` (or its string): ``"target"`` (default) applies the
            safeguard to the worker affinity picked (its load against the least-loaded worker);
            ``"global"`` checks the pool's max and min load before anything else, exactly as SGLang's
            router does.
        min_match_tokens: shortest cached prefix worth following.
        placement: where new content goes (:class:`PlacementPolicy` or its string): ``"cache"`` (room in the
            cache model, else the cache that took in the fewest tokens) or ``"load"`` (least loaded).
        max_homes: segments whose last worker is remembered (least recently used forgotten).
        feeds: per worker, its engine's KV-cache feed or None (see module doc): that worker's cache model
            follows the engine's evictions while the feed is healthy.
        state_store: None (the default: this router's state lives in its process), a URL
            (``"redis://host:6379/0"``, the ``redis`` extra) or a :class:`RouterStateConfig` (URL, router
            name, tenant, TTL, timeouts): routers of one name over the same worker names share their homes,
            intake, load and resets there and route as one (:mod:`.shared_routing`; docs/scale.md).
    """

    def __init__(
        self,
        clients: Sequence[ClientT],
        *,
        names: Sequence[str] | None = None,
        policy: RoutingPolicy | str = RoutingPolicy.AFFINITY,
        capacity_tokens: int | None = None,
        balance_abs_threshold: int = 8,
        balance_rel_threshold: float = 1.5,
        balance_scope: BalanceScope | str = BalanceScope.TARGET,
        min_match_tokens: int = 1,
        placement: PlacementPolicy | str = PlacementPolicy.CACHE,
        max_homes: int = 100_000,
        feeds: Sequence[EngineCache | None] | None = None,
        state_store: str | RouterStateConfig | None = None,
    ) -> None:
        clients = list(clients)
        names = worker_names(clients, names)
        self._feeds = WorkerFeeds(feeds, names)
        self.feeds = self._feeds.feeds
        self.policy = member(RoutingPolicy, policy, "policy")
        self.balance_scope = member(BalanceScope, balance_scope, "balance_scope")
        self.placement = member(PlacementPolicy, placement, "placement")
        non_negative_int(balance_abs_threshold, "balance_abs_threshold")
        if not isinstance(balance_rel_threshold, (int, float)) or balance_rel_threshold < 1:
            raise ValueError(f"balance_rel_threshold must be >= 1, got {balance_rel_threshold!r}")
        positive_int(min_match_tokens, "min_match_tokens")
        self._clients = tuple(clients)
        self.names = tuple(names)
        self.capacity_tokens = capacity_tokens
        self.balance_abs_threshold = balance_abs_threshold
        self.balance_rel_threshold = float(balance_rel_threshold)
        self.min_match_tokens = min_match_tokens
        # first block of a segment -> (the worker that cached it last, that worker's intake then), kept
        # after the model evicts it
        self._homes: LRUMap[Hashable, tuple[int, int]] = LRUMap(max_homes)
        self._heads: dict[str, Hashable] = {}  # request id -> first block, while in flight
        # an unbounded model still counts tokens (placement compares them): a capacity nothing reaches
        model_capacity = capacity_tokens if capacity_tokens is not None else _UNBOUNDED
        self._indexes = tuple(ContextIndex(capacity_tokens=model_capacity, tail_order="retrieval") for _ in clients)
        self._load = [0] * len(clients)
        self._view = self._load  # the load routing sees: this router's, plus other routers' with a store
        # tokens written into each worker's cache so far (prefilled misses, prompt tails, generations)
        self._intake = [0] * len(clients)
        self._counters = [WorkerCounters() for _ in clients]
        self._rr = itertools.count()
        self._spread = itertools.count()
        self._lock = threading.Lock()
        self._shared = _shared_state(state_store, self.names)
        self._epochs = [0] * len(clients)  # the reset epochs of the store's pool this router followed last

    # ------------------------------------------------------------------ introspection
    def __len__(self) -> int:
        return len(self._clients)

    def client(self, worker: int) -> ClientT:
        return self._clients[worker]

    @property
    def clients(self) -> tuple[ClientT, ...]:
        return self._clients

    def loads(self) -> tuple[int, ...]:
        """Requests in flight per worker."""
        with self._lock:
            return tuple(self._load)

    def index(self, worker: int) -> ContextIndex:
        """The cache model of ``worker`` (ids are ``(position, block key)``)."""
        return self._indexes[worker]

    def stats(self) -> RouterStats:
        with self._lock:
            workers = tuple(
                c.snapshot(
                    name=self.names[i],
                    in_flight=self._load[i],
                    live_requests=len(self._indexes[i]),
                    modelled_cache_tokens=self._indexes[i].cached_tokens,
                )
                for i, c in enumerate(self._counters)
            )
            return RouterStats(policy=self.policy, workers=workers)

    # ------------------------------------------------------------------ routing
    def route(
        self,
        keys: Sequence[Hashable],
        token_lens: Sequence[int] | None = None,
        *,
        request_id: str | None = None,
        tail_tokens: int = 0,
        tail_key: Hashable | None = None,
        home_key: Hashable | None = None,
        text: str | None = None,
        preamble: str | None = None,
    ) -> Route:
        """Pick a worker for a request whose reusable prefix is the blocks ``keys`` (in prompt order).

        Counts the request as in flight on that worker until :meth:`release`, and records the blocks in
        the worker's cache model under ``request_id`` (generated when not given). ``keys`` may be empty
        (a request with nothing reusable): it goes to the least-loaded worker.

        ``tail_tokens``: the rest of the prompt after ``keys`` plus the tokens to generate, which the engine
        caches too: they take room in the model after ``keys``, under ``tail_key`` (None: unique to this
        request), and never count as a matched prefix. Requests sharing ``keys`` and ``tail_key`` share one
        tail: for an engine that keeps one copy per prefix (llama.cpp's prompt cache).

        ``home_key`` names the segment for the *home* rule (default: its first key). Passing the first
        block's id, not its ``(id, digest)`` key, sends an edited or grown version of a document back to
        the worker that holds the old one, whose engine still reuses their common prefix.

        ``text``: the segment's text as the prompt shows it; on a worker with a feed it is tracked when
        the request is released ok (module doc); ``preamble``, the prompt's text before it, binds the request to
        exactly that prompt's cached chain (else: the chain a prompt holding ``text`` used last).
        """
        req = self._request(keys, token_lens, request_id, tail_tokens, tail_key, home_key, text, preamble)
        if self._shared is None:
            return self._route_local(req)
        return self._routed(req, *run(self._shared_route(req, self._shared), self._shared.store))

    async def aroute(
        self,
        keys: Sequence[Hashable],
        token_lens: Sequence[int] | None = None,
        *,
        request_id: str | None = None,
        tail_tokens: int = 0,
        tail_key: Hashable | None = None,
        home_key: Hashable | None = None,
        text: str | None = None,
        preamble: str | None = None,
    ) -> Route:
        """:meth:`route` for asyncio code: with a ``state_store`` the event loop keeps running while the store
        answers (redis.asyncio); without one it is :meth:`route` (no I/O)."""
        req = self._request(keys, token_lens, request_id, tail_tokens, tail_key, home_key, text, preamble)
        if self._shared is None:
            return self._route_local(req)
        return self._routed(req, *await arun(self._shared_route(req, self._shared), self._shared.astore))

    def _route_local(self, req: _Request) -> Route:
        """Route on this router's own state (no store): choose and record under the lock."""
        with self._lock:
            worker, reason = self._choose(req.tagged, req.lens, req.head, req.need)
            matched = self._commit(req, worker, reason)
        return self._routed(req, worker, reason, matched)

    def _request(
        self,
        keys: Sequence[Hashable],
        token_lens: Sequence[int] | None,
        request_id: str | None,
        tail_tokens: int,
        tail_key: Hashable | None,
        home_key: Hashable | None,
        text: str | None,
        preamble: str | None,
    ) -> _Request:
        tagged, lens = self._checked(keys, token_lens, tail_tokens)
        rid = request_id if request_id is not None else uuid.uuid4().hex
        head = (home_key if home_key is not None else tagged[0][1]) if tagged else None
        return _Request(tagged, lens, rid, tail_tokens, tail_key, head, text, preamble)

    def _commit(self, req: _Request, worker: int, reason: RouteReason, known: int = 0) -> int:
        """Under the lock: the request goes into ``worker``'s model, counters and home; the blocks it matched
        (in the model, or ``known`` blocks another router's record says the worker holds)."""
        matched = self._record(worker, req.tagged, req.lens, req.rid, req.tail_tokens, req.tail_key)
        matched = max(matched, min(known, len(req.tagged)))
        self._account(worker, reason, req.rid, req.head, sum(req.lens[matched:]) + req.tail_tokens)
        self._feeds.routed(worker, self._indexes[worker], req.rid, req.text, req.preamble)
        return matched

    def _routed(self, req: _Request, worker: int, reason: RouteReason, matched: int) -> Route:
        seg_tokens = sum(req.lens)
        route = Route(
            worker=worker,
            worker_name=self.names[worker],
            reason=reason,
            request_id=req.rid,
            matched_blocks=matched,
            matched_tokens=sum(req.lens[:matched]),
            segment_tokens=seg_tokens,
        )
        logger.debug(
            "route %s -> %s (%s, %d/%d tokens cached in model)",
            req.rid,
            route.worker_name,
            reason,
            route.matched_tokens,
            seg_tokens,
        )
        return route

    # ------------------------------------------------------------------ routing with a shared store
    def _shared_route(self, req: _Request, shared: RouterState) -> Op[tuple[int, RouteReason, int]]:
        """Read the pool and the segment's home, choose with them, claim the home, record, add the intake."""
        view = yield from shared.read_view(req.head)
        chain = shared.chain(req.tagged)
        with self._lock:
            if view is None:  # the store cannot say: this router's own state
                worker, reason = self._choose(req.tagged, req.lens, req.head, req.need)
            else:
                worker, reason = self._choose_shared(req, view, chain, shared)
        if view is not None and req.head is not None and reason is not RouteReason.BALANCE:
            mine = Placed(worker, view.pool.intake[worker], view.pool.epochs[worker], chain)
            new = reason in (RouteReason.LEAST_LOADED, RouteReason.HOME)
            adopt = (lambda p: self._placed_usable(p, view)) if new else None
            adopted = yield from shared.claim(req.head, mine, view.home, view.home_token, adopt=adopt)
            if adopted is not None and adopted != worker:
                worker, reason = adopted, RouteReason.HOME
        # what the shared record says the worker holds (another router routed it there) counts as cached
        known = max((p.matched_blocks(chain) for p in self._usable(view) if p.worker == worker), default=0)
        with self._lock:
            before = self._intake[worker]
            matched = self._commit(req, worker, reason, known)
            written, load = self._intake[worker] - before, list(self._load)
        if view is not None:
            yield from shared.push(worker=worker, written=written, load=load)
        return worker, reason, matched

    def _choose_shared(
        self, req: _Request, view: SharedView, chain: tuple[str, ...], shared: RouterState
    ) -> tuple[int, RouteReason]:
        """:meth:`_choose` with the store's intake, every router's load and the segment's shared home, which
        wins over this router's own models unless one of them holds a longer prefix of the segment."""
        self._intake = list(view.pool.intake)
        self._follow_resets(view.pool.epochs)
        others = view.pool.others(shared.instance, time.time(), shared.config.load_lease_s)
        self._view = [a + b for a, b in zip(self._load, others)]
        try:
            pick = self._shared_pick(view, chain)
            if pick is not None and self.policy is RoutingPolicy.AFFINITY and req.tagged:
                w, got = pick.worker, sum(req.lens[: pick.matched_blocks(chain)])
                global_ok = self.balance_scope is not BalanceScope.GLOBAL or not self._imbalanced(max(self._view))
                best_w, best = self._best_match(req.tagged, req.lens)
                if global_ok and not self._imbalanced(self._view[w]) and (best_w == w or got >= best):
                    return w, RouteReason.AFFINITY if max(got, best) >= self.min_match_tokens else RouteReason.HOME
            front = view.home.placed[0] if view.home is not None and view.home.placed else None
            home_w = front.worker if front is not None and self._placed_usable(front, view) else None
            local = view.home is None  # nothing in the store: this router's own home (if any)
            return self._choose(req.tagged, req.lens, req.head, req.need, home_of=None if local else (lambda: home_w))
        finally:
            self._view = self._load

    def _follow_resets(self, epochs: Sequence[int]) -> None:
        """Another router reset a worker (a newer epoch): forget that worker's model and homes here too."""
        seen, self._epochs = self._epochs, list(epochs)
        for w, (old, new) in enumerate(zip(seen, epochs)):
            if new > old:
                self._indexes[w].clear()
                for head, (hw, _) in self._homes.items():
                    if hw == w:
                        self._homes.pop(head)

    def _placed_usable(self, placed: Placed, view: SharedView) -> bool:
        """A shared placement still names a cache that may hold the segment: same reset epoch, and fewer than
        ``capacity_tokens`` tokens written into it since."""
        w = placed.worker
        if placed.epoch != view.pool.epochs[w]:
            return False
        return self.capacity_tokens is None or view.pool.intake[w] - placed.at < self.capacity_tokens

    def _usable(self, view: SharedView | None) -> list[Placed]:
        placed = view.home.placed if view is not None and view.home is not None else ()
        return [p for p in placed if view is not None and self._placed_usable(p, view)]

    def _shared_pick(self, view: SharedView, chain: tuple[str, ...]) -> Placed | None:
        """The usable placement that holds the longest prefix of the segment (ties: the latest); the home
        when none holds any of it; None when the home is not usable either."""
        best, best_n = None, 0
        home = view.home.placed[0] if view.home is not None and view.home.placed else None
        for p in self._usable(view):
            n = p.matched_blocks(chain)
            if n > best_n or (best is None and p is home):
                best, best_n = p, n
        return best

    @staticmethod
    def _checked(
        keys: Sequence[Hashable], token_lens: Sequence[int] | None, tail_tokens: int
    ) -> tuple[list[tuple[int, Hashable]], list[int]]:
        """The position-tagged keys ``(i, key)`` and their token lengths (1 each by default), checked."""
        keys = list(keys)
        lens = [1] * len(keys) if token_lens is None else list(token_lens)
        if len(lens) != len(keys):
            raise ValueError(f"got {len(lens)} token_lens for {len(keys)} keys")
        non_negative_int(tail_tokens, "tail_tokens")
        return [(i, k) for i, k in enumerate(keys)], lens

    def _record(
        self,
        worker: int,
        tagged: list[tuple[int, Hashable]],
        lens: list[int],
        rid: str,
        tail_tokens: int,
        tail_key: Hashable | None,
    ) -> int:
        """Insert the request (its tail after it) into ``worker``'s cache model, pinned while it is in flight
        (its engine holds it until it finishes); the blocks it matched."""
        if not (tagged or tail_tokens):
            return 0
        tail = ("tail", rid if tail_key is None else tail_key)
        stored = tagged + [(len(tagged), tail)] if tail_tokens else tagged
        lens = lens + [tail_tokens] if tail_tokens else lens
        placement = self._indexes[worker].insert(stored, rid, token_lens=lens, pin=True)  # unpinned at release
        return min(placement.prefix_len, len(tagged))

    def _account(self, worker: int, reason: RouteReason, rid: str, head: Hashable | None, written: int) -> None:
        """``written`` tokens go into ``worker``'s cache; the segment's home; the request is in flight."""
        self._intake[worker] += written
        if head is not None:
            self._heads[rid] = head
            if reason is not RouteReason.BALANCE:
                self._homes.set(head, (worker, self._intake[worker]))
        self._load[worker] += 1
        self._counters[worker].count(reason)

    def _choose(
        self,
        tagged: list[tuple[int, Hashable]],
        lens: list[int],
        head: Hashable | None,
        need: int,
        home_of: Callable[[], int | None] | None = None,
    ) -> tuple[int, RouteReason]:
        """The worker and the rule (module doc); ``home_of``: the home rule's worker (default: this router's)."""
        n = len(self._clients)
        load = self._view
        if self.policy is RoutingPolicy.ROUND_ROBIN:
            return next(self._rr) % n, RouteReason.ROUND_ROBIN
        if self.balance_scope is BalanceScope.GLOBAL and self._imbalanced(max(load)):
            return self._least_loaded(), RouteReason.BALANCE
        if tagged:
            best_w, best_tokens = self._best_match(tagged, lens)
            if best_w >= 0 and best_tokens >= self.min_match_tokens:
                if self._imbalanced(load[best_w]):
                    return self._least_loaded(), RouteReason.BALANCE
                return best_w, RouteReason.AFFINITY
            home = self._home(head) if home_of is None else home_of()
            if home is not None and not self._imbalanced(load[home]):
                return home, RouteReason.HOME
            if self.placement is PlacementPolicy.CACHE:
                return self._most_room(need), RouteReason.LEAST_LOADED
        return self._least_loaded(), RouteReason.LEAST_LOADED

    def _best_match(self, tagged: list[tuple[int, Hashable]], lens: list[int]) -> tuple[int, int]:
        """The worker whose model holds the longest prefix (ties: the less loaded) and its tokens; -1 if none."""
        load = self._view
        best_w, best_tokens = -1, 0
        for w in range(len(self._clients)):
            got = self._matched_tokens(w, tagged, lens)
            if got > best_tokens or (got == best_tokens and got > 0 and load[w] < load[best_w]):
                best_w, best_tokens = w, got
        return best_w, best_tokens

    def _home(self, head: Hashable | None) -> int | None:
        """The worker that held segment ``head`` last, while its engine may still hold it: fewer than
        ``capacity_tokens`` tokens written into that cache since (an LRU cache keeps at least that)."""
        got = self._homes.get(head) if head is not None else None
        if got is None:
            return None
        worker, intake = got
        if self.capacity_tokens is not None and self._intake[worker] - intake >= self.capacity_tokens:
            return None
        return worker

    def _most_room(self, need: int) -> int:
        """New content (``need`` tokens), among workers the load safeguard would not reject: a worker
        whose cache model still has room for it (nothing is evicted), else the worker whose cache has
        taken in the fewest tokens (it turns over slowest: its least recently used entries are the
        oldest, the cheapest to lose). Ties: the smaller intake, the emptier model, the less loaded,
        then rotation."""
        n = len(self._clients)
        cap = self.capacity_tokens
        ok = [w for w in range(n) if not self._imbalanced(self._view[w])]
        rank = {
            w: (
                cap is not None and self._indexes[w].cached_tokens + need > cap,
                self._intake[w],
                self._indexes[w].cached_tokens,
                self._view[w],
            )
            for w in ok
        }
        best = min(rank.values())
        cands = [w for w in ok if rank[w] == best]
        return cands[next(self._spread) % len(cands)]

    def _imbalanced(self, hi: int) -> bool:
        lo = min(self._view)
        return hi - lo > self.balance_abs_threshold and hi > self.balance_rel_threshold * lo

    def _least_loaded(self) -> int:
        n = len(self._clients)
        lo = min(self._view)
        cands = [w for w in range(n) if self._view[w] == lo]
        if len(cands) > 1:
            smallest = min(self._indexes[w].cached_tokens for w in cands)
            cands = [w for w in cands if self._indexes[w].cached_tokens == smallest]
        return cands[next(self._spread) % len(cands)]

    def _matched_tokens(self, worker: int, tagged: list[tuple[int, Hashable]], lens: list[int]) -> int:
        """Tokens of the longest exact prefix of ``tagged`` that ``worker``'s cache model holds.

        A dry run (:meth:`ContextIndex.match`): nothing is inserted and no recency is refreshed on
        workers that are not chosen.
        """
        idx = self._indexes[worker]
        if len(idx) == 0:
            return 0
        placement = idx.match(tagged)
        return sum(lens[: placement.prefix_len])

    def release(self, route: Route, *, ok: bool = True) -> None:
        """The request finished (``ok``) or failed; on failure its blocks leave the worker's cache model."""
        head, load = self._release(route, ok)
        if self._shared is not None:
            run(self._shared_release(route.worker, ok, head, load, self._shared), self._shared.store)

    async def arelease(self, route: Route, *, ok: bool = True) -> None:
        """:meth:`release` for asyncio code (with a ``state_store``, the store is awaited)."""
        head, load = self._release(route, ok)
        if self._shared is not None:
            await arun(self._shared_release(route.worker, ok, head, load, self._shared), self._shared.astore)

    @staticmethod
    def _shared_release(worker: int, ok: bool, head: Hashable | None, load: list[int], shared: RouterState) -> Op[None]:
        if not ok and head is not None:
            yield from shared.clear(head, worker)
        yield from shared.push(load=load)

    def _release(self, route: Route, ok: bool) -> tuple[Hashable | None, list[int]]:
        with self._lock:
            if self._load[route.worker] <= 0:
                raise ValueError(f"route {route.request_id!r} released twice or never routed")
            self._load[route.worker] -= 1
            self._indexes[route.worker].unpin(route.request_id)
            head = self._heads.pop(route.request_id, None)
            if not ok:
                self._counters[route.worker].failed += 1
                self._indexes[route.worker].evict(route.request_id)
                home = self._homes.peek(head) if head is not None else None
                if home is not None and home[0] == route.worker:
                    self._homes.pop(head)
            self._feeds.released(route.worker, self._indexes[route.worker], route.request_id, ok)
            return head, list(self._load)

    @contextlib.contextmanager
    def dispatch(
        self, keys: Sequence[Hashable], token_lens: Sequence[int] | None = None, *, request_id: str | None = None
    ) -> Iterator[Route]:
        """``with router.dispatch(keys, lens) as route: ...`` — route, then release (failed on exception)."""
        route = self.route(keys, token_lens, request_id=request_id)
        try:
            yield route
        except BaseException:
            self.release(route, ok=False)
            raise
        self.release(route, ok=True)

    # ------------------------------------------------------------------ eviction sync
    def evict(self, worker: int, request_id: Hashable) -> bool:
        """The engine of ``worker`` evicted ``request_id``; False when the model did not hold it."""
        return self._indexes[worker].evict(request_id)

    def reset(self, worker: int | None = None) -> None:
        """The engine(s) flushed their cache: forget the cache model of ``worker`` (None = all)."""
        targets = set(range(len(self._clients)) if worker is None else (worker,))
        with self._lock:
            for w in targets:
                self._indexes[w].clear()
            for head, (w, _) in self._homes.items():  # an empty cache is nobody's home
                if w in targets:
                    self._homes.pop(head)
            load = list(self._load)
        if self._shared is not None:  # in every router: a new reset epoch for these workers
            run(self._shared.push(load=load, resets=sorted(targets)), self._shared.store)

    def close(self) -> None:
        """Close the connection to a ``state_store`` (nothing to do without one)."""
        if self._shared is not None:
            self._shared.close()

    async def aclose(self) -> None:
        """Close this event loop's async connection to a ``state_store`` (after :meth:`aroute`)."""
        if self._shared is not None:
            await self._shared.aclose()


@dataclass(frozen=True)
class _Request:
    """One request to route, checked: position-tagged keys, token lengths, id, tail, home key, text."""

    tagged: list[tuple[int, Hashable]]
    lens: list[int]
    rid: str
    tail_tokens: int
    tail_key: Hashable | None
    head: Hashable | None
    text: str | None
    preamble: str | None

    @property
    def need(self) -> int:
        return sum(self.lens) + self.tail_tokens


def _shared_state(state_store: str | RouterStateConfig | None, names: Sequence[str]) -> RouterState | None:
    if state_store is None:
        return None
    if isinstance(state_store, str):
        state_store = RouterStateConfig(state_store)
    if not isinstance(state_store, RouterStateConfig):
        raise TypeError(f"state_store must be a URL str or a RouterStateConfig, got {type(state_store).__name__}")
    return RouterState(state_store, names)
