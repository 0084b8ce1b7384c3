"""Per-session and per-tenant state, bounded: LRU maps (:class:`~cp_memory.core.lru.LRUMap`) and an idle TTL.

A :class:`SessionState` holds what the gateway sent last for the session (one :class:`SentLog` per protocol,
for prefix replay), its mem0 stage's epoch and placement (:class:`SessionMemories`) and its savings; a
:class:`TenantState` the tenant's savings. Keys are (tenant, session) hashes (:mod:`cp_memory.gateway.tenancy`):
nothing is shared across tenants. A session idle for longer than the TTL is forgotten on its next lookup; the
least recently used ones fall out when the map is full.

Where they live is a seam (:func:`cp_memory.gateway.flow.open_session_store`): this process
(:class:`SessionStore`, the default) or a state store shared by gateway replicas (``state_store=`` in
:class:`~cp_memory.gateway.config.GatewayConfig`:
:class:`~cp_memory.gateway.shared_sessions.SharedSessionStore`). Either way a request loads its session once
(:meth:`SessionStore.load`), and once it went out commits one :class:`SessionChange` (:meth:`SessionStore.commit`)
and books its usage (:meth:`SessionStore.book`); the shared store reads and writes the session's one record.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, MutableMapping
from dataclasses import dataclass, field

from ..core.lru import LRUMap
from ..providers.account import Savings, SavingsAccount
from ..providers.usage import CacheUsage
from .content.records import ContentState, PendingContent
from .protocols import Api
from .replay import SentLog

__all__ = ["Attribution", "SessionChange", "SessionMemories", "SessionState", "SessionStore", "TenantState"]


@dataclass
class Attribution:
    """Cached tokens split by who earned them: ``gateway`` (beyond what passthrough would have kept cached:
    replayed re-renderings, the gateway's own breakpoints) and ``client`` (the rest)."""

    gateway_tokens: int = 0
    client_tokens: int = 0
    replayed_segments: int = 0
    rewritten_segments: int = 0

    def add(self, gateway: int, client: int, replayed: int, rewritten: int) -> None:
        self.gateway_tokens += gateway
        self.client_tokens += client
        self.replayed_segments += replayed
        self.rewritten_segments += rewritten


@dataclass
class _Ledger:
    """Savings and attribution of one tenant or session, behind one lock."""

    account: SavingsAccount = field(default_factory=SavingsAccount)
    attribution: Attribution = field(default_factory=Attribution)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, usage: CacheUsage, gateway: int, replayed: int, rewritten: int) -> None:
        self.account.add(usage)
        with self.lock:
            self.attribution.add(gateway, max(0, usage.cache_read_tokens - gateway), replayed, rewritten)

    def report(self) -> dict[str, object]:
        s: Savings = self.account.summary()
        with self.lock:
            a = Attribution(**{k: getattr(self.attribution, k) for k in Attribution.__dataclass_fields__})
        return {
            "calls": s.calls,
            "input_tokens": s.input_tokens,
            "cache_read_tokens": s.cache_read_tokens,
            "cache_write_tokens": s.cache_write_tokens,
            "uncached_tokens": s.uncached_tokens,
            "output_tokens": s.output_tokens,
            "cost": s.cost,
            "without_cache": s.without_cache,
            "saved_share": s.saved_share,
            "cached_by_gateway_tokens": a.gateway_tokens,
            "cached_by_client_tokens": a.client_tokens,
            "replayed_segments": a.replayed_segments,
            "rewritten_segments": a.rewritten_segments,
        }


class SessionMemories:
    """The session's side of the mem0 stage (:mod:`cp_memory.gateway.memories`): its dedup *epoch* (a new one
    when the client's history stops extending what was sent) and whether it switched to the ``cached``
    placement for good. This process's copy; :class:`~.shared_sessions.SharedSessionStore` keeps them in the
    session's record, so every replica numbers the epochs and places the memories alike."""

    def __init__(self) -> None:
        self._epoch = ""
        self._cached = False

    def epoch(self) -> str:
        """The current epoch ("" before the first)."""
        return self._epoch

    def set_epoch(self, epoch: str) -> None:
        self._epoch = epoch

    def new_epoch(self) -> str:
        """Start an epoch that no earlier one of this session can share (a random token, not a count: a count
        would start again at 1 after the session expired and name an old epoch's dedup record)."""
        epoch = uuid.uuid4().hex[:16]
        self.set_epoch(epoch)
        return epoch

    def cached(self) -> bool:
        return self._cached

    def set_cached(self) -> None:
        self._cached = True


@dataclass(frozen=True)
class SessionChange:
    """What one request that went out changes in its session: its protocol's sent log, the content rules'
    registrations, the mem0 epoch it used (None: it made no memory query) and whether its memories' placement
    switched the session to ``cached`` for good. Applied to this process's copy and, with a shared store, to
    the session's record (:class:`~cp_memory.gateway.shared_sessions.SharedSessionStore`)."""

    api: Api
    log: SentLog
    content: PendingContent | None = None
    epoch: str | None = None
    cached: bool = False


@dataclass
class SessionState(_Ledger):
    tenant: str = ""
    session: str = ""
    logs: MutableMapping[Api, SentLog] = field(default_factory=dict)
    content: ContentState = field(default_factory=ContentState)
    memories: SessionMemories = field(default_factory=SessionMemories)
    last_used: float = 0.0
    #: with a shared store: the token of the session's record this copy holds (None: not known to be any)
    synced: str | None = None
    sync: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def apply(self, change: SessionChange) -> None:
        """``change`` on this copy: the log replaced (the request that went out last), the content registered,
        the epoch and the placement set."""
        self.logs[change.api] = change.log
        if change.content is not None:
            self.content.commit(change.api, change.content)
        if change.epoch:
            self.memories.set_epoch(change.epoch)
        if change.cached and not self.memories.cached():
            self.memories.set_cached()


@dataclass
class TenantState(_Ledger):
    tenant: str = ""


class SessionStore:
    """Sessions (LRU, idle TTL) and tenants (LRU), created on first use; this process only."""

    #: whether lookups wait on a remote store (the app then runs the flow off the event loop)
    remote = False

    def __init__(
        self, max_sessions: int, ttl_s: float, max_tenants: int, *, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._sessions: LRUMap[tuple[str, str], SessionState] = LRUMap(max_sessions)
        self._tenants: LRUMap[str, TenantState] = LRUMap(max_tenants)
        self._ttl = ttl_s
        self._clock = clock

    def session(self, tenant: str, session: str) -> SessionState:
        """The session's state (a fresh one when unknown or idle past the TTL); marks it used now."""
        now = self._clock()
        key = (tenant, session)
        found = self._sessions.get(key)
        if found is not None and now - found.last_used > self._ttl:
            self._sessions.pop(key)
            found = None
        state = found or self._sessions.get_or_create(key, lambda: self._new_session(tenant, session))
        state.last_used = now
        return state

    def load(self, tenant: str, session: str) -> SessionState:
        """The session as a request reads it, once (a shared store: its record, one round trip)."""
        return self.session(tenant, session)

    def commit(self, state: SessionState, change: SessionChange) -> None:
        """A request of the session went out: ``change`` applied (a shared store: to its record too)."""
        with state.sync:
            state.apply(change)

    def _new_session(self, tenant: str, session: str) -> SessionState:
        return SessionState(tenant=tenant, session=session)

    def _new_tenant(self, tenant: str) -> TenantState:
        return TenantState(tenant=tenant)

    def book(self, session: SessionState, usage: CacheUsage, gateway: int, replayed: int, rewritten: int) -> None:
        """Book one answered request into its session's and its tenant's ledgers (a shared store: in one
        round trip)."""
        session.record(usage, gateway, replayed, rewritten)
        self.tenant(session.tenant).record(usage, gateway, replayed, rewritten)

    def tenant(self, tenant: str) -> TenantState:
        return self._tenants.get_or_create(tenant, lambda: self._new_tenant(tenant))

    def peek_tenant(self, tenant: str) -> TenantState | None:
        return self._tenants.peek(tenant)

    def sessions_of(self, tenant: str, limit: int) -> list[SessionState]:
        """The tenant's live sessions, most recently used first (at most ``limit``)."""
        now = self._clock()
        mine = [s for (t, _), s in self._sessions.items() if t == tenant and now - s.last_used <= self._ttl]
        return list(reversed(mine))[:limit]

    def __len__(self) -> int:
        return len(self._sessions)
