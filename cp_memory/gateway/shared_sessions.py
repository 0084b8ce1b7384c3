"""Gateway sessions in a shared state store (``state_store="redis://..."``): replicas behind any load balancer
replay the same prefix, place and de-duplicate the same memories, apply the same content rules and book into
the same savings.

Everything goes through the one shared-state client (:class:`~cp_memory.state.client.StateClient`, its I/O-free
ops and its store's health); keys (:class:`~cp_memory.state.keys.StateKeys`, namespace ``gateway``; tenant and
session are the gateway's keyed hashes, hashed again into the key):

* ``...:gw:<tenant>:s:<session>`` — the session's record (:mod:`cp_memory.gateway.session_record`): its sent
  log per protocol, its mem0 epoch and placement, its content rules' records. A versioned value: a request
  *loads* it once (one round trip; nothing is sent back when this process's copy is already the stored one) and
  once it went out *commits* its :class:`~.sessions.SessionChange` by compare-and-set from the token it loaded
  (one round trip); a concurrent request of the session that committed first means: read again, apply the
  change to what it wrote, write again (a bounded number of times; the log of the request that went out last
  wins, as in one process);
* ``...:gw:<tenant>:s:<session>:n`` and ``...:gw:<tenant>:t`` — the session's and the tenant's savings, as
  counters: a booking adds to both and marks the session used in ``...:gw:<tenant>:z`` (the tenant's sessions by
  last use, for ``/cp/savings``), one round trip, and concurrent bookings never lose one.

Every key's TTL is the session idle TTL (``session_ttl_s``), refreshed on each read and write. A call that fails
or passes ``state_timeout_s`` falls back to this process's copy (the session as this replica last saw it, its own
savings) with one warning per outage; a record that is not its key's own, or malformed, is not used (the
session starts again from the client's bytes).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..providers.account import SavingsAccount
from ..providers.usage import CacheUsage
from ..state.client import StateClient
from ..state.health import StoreHealth
from ..state.keys import StateKeys
from ..state.ops import Op
from ..state.store import open_state_store
from ..state.versioned import Versioned
from .config import GatewayConfig
from .content.records import ContentState
from .session_record import SessionRecord, decode_session, encode_session
from .sessions import SessionChange, SessionMemories, SessionState, SessionStore, TenantState

__all__ = ["SharedSessionStore"]

logger = logging.getLogger(__name__)

#: compare-and-set attempts of one commit before this replica keeps the change to itself
_TRIES = 4

_INTS = (
    "calls",
    "input_tokens",
    "cache_read_tokens",
    "cache_write_tokens",
    "uncached_tokens",
    "output_tokens",
)
_ATTRIBUTION = ("cached_by_gateway_tokens", "cached_by_client_tokens", "replayed_segments", "rewritten_segments")
_FLOATS = ("cost", "without_cache")


def _deltas(usage: CacheUsage, gateway: int, replayed: int, rewritten: int) -> list[tuple[str, int | float]]:
    """One booking as counter increments (the account's own rules price it: one source for the cost)."""
    account = SavingsAccount()
    account.add(usage)
    s = account.summary()
    ints = [getattr(s, name) for name in _INTS]
    ints += [gateway, max(0, usage.cache_read_tokens - gateway), replayed, rewritten]
    pairs: list[tuple[str, int | float]] = [(n, int(v)) for n, v in zip(_INTS + _ATTRIBUTION, ints)]
    return pairs + [(name, float(getattr(s, name))) for name in _FLOATS]


def _report(counts: dict[str, float]) -> dict[str, object]:
    """The same report as :meth:`~.sessions._Ledger.report`, from the counters."""
    out: dict[str, object] = {name: int(counts.get(name, 0)) for name in _INTS}
    cost, without = float(counts.get("cost", 0.0)), float(counts.get("without_cache", 0.0))
    out.update(cost=cost, without_cache=without, saved_share=(without - cost) / without if without else 0.0)
    out.update({name: int(counts.get(name, 0)) for name in _ATTRIBUTION})
    return out


@dataclass
class _StoredTenant(TenantState):
    counts: dict[str, float] = field(default_factory=dict)

    def report(self) -> dict[str, object]:
        return _report(self.counts)


@dataclass
class _StoredSession(SessionState):
    counts: dict[str, float] = field(default_factory=dict)

    def report(self) -> dict[str, object]:
        return _report(self.counts)


def _adopt(state: SessionState, record: SessionRecord | None) -> None:
    """``state`` becomes the record (None: a session with nothing recorded); its savings stay this process's."""
    memories = SessionMemories()
    if record is not None and record.epoch:
        memories.set_epoch(record.epoch)
    if record is not None and record.cached:
        memories.set_cached()
    state.logs = dict(record.logs) if record is not None else {}
    state.content = record.content if record is not None else ContentState()
    state.memories = memories


class SharedSessionStore(SessionStore):
    """Sessions and savings in a shared state store; this process's LRU copy is the fallback (module doc)."""

    remote = True

    def __init__(self, config: GatewayConfig, *, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(config.max_sessions, config.session_ttl_s, config.max_tenants, clock=clock)
        assert config.state_store is not None
        url = config.state_store.get_secret_value()
        health = StoreHealth(
            url.split("@")[-1],
            retry_s=config.state_retry_s,
            fallback="gateway sessions use this replica's own copy",
            back="shared gateway sessions",
        )
        store = open_state_store(url, timeout_s=config.state_timeout_s)
        ttl_s = max(1, math.ceil(config.session_ttl_s))
        self.client = StateClient(store, keys=StateKeys("gateway"), ttl_s=ttl_s, health=health)
        self.keys = self.client.keys
        self.max_record_bytes = config.max_body_bytes * 4

    # ------------------------------------------------------------------ the session's record
    def load(self, tenant: str, session: str) -> SessionState:
        state = self.session(tenant, session)
        with state.sync:
            self.client.run(self._load(state))
        return state

    def commit(self, state: SessionState, change: SessionChange) -> None:
        with state.sync:
            self.client.run(self._commit(state, change))

    def _key(self, state: SessionState) -> str:
        return self.keys.gateway_session(state.tenant, state.session)

    def _record(self, key: str, got: Versioned) -> SessionRecord | None:
        """The record a read gave (None: absent, or unusable: logged once per key)."""
        if got.absent or got.data is None:
            return None
        try:
            return decode_session(got.data, self.keys.owner(key), max_bytes=self.max_record_bytes)
        except ValueError as exc:
            self.client.bad_value(key, exc, "the session starts again from the client's bytes")
            return None

    def _load(self, state: SessionState) -> Op[None]:
        key = self._key(state)
        got = yield from self.client.read(key, have=state.synced or "")
        if got is None or (state.synced is not None and got.token == state.synced):
            return  # the store cannot say (this copy serves), or this copy is the stored record
        _adopt(state, self._record(key, got))
        state.synced = got.token

    def _encode(self, key: str, state: SessionState, change: SessionChange) -> bytes:
        record = SessionRecord(dict(state.logs), state.memories.epoch(), state.memories.cached(), state.content)
        return encode_session(record, self.keys.owner(key), max_bytes=self.max_record_bytes, keep=change.api)

    def _commit(self, state: SessionState, change: SessionChange) -> Op[None]:
        """``change`` on this copy, then on the record: from the loaded token first, from a fresh read on a
        conflict (module doc)."""
        key, base = self._key(state), state.synced
        state.apply(change)
        state.synced = None  # until a write says what the record is
        if base is not None:
            written = yield from self.client.write(key, self._encode(key, state, change), expected=base)
            if written is None:
                return  # the store cannot answer: this copy keeps the change
            if written:
                state.synced = written
                return
        yield from self._merge(key, state, change)  # unknown, or a concurrent request of the session wrote first

    def _merge(self, key: str, state: SessionState, change: SessionChange) -> Op[None]:
        for _ in range(_TRIES):
            got = yield from self.client.read(key)
            if got is None:
                return
            scratch = SessionState(tenant=state.tenant, session=state.session)
            _adopt(scratch, self._record(key, got))
            scratch.apply(change)
            written = yield from self.client.write(key, self._encode(key, scratch, change), expected=got.token)
            if written is None:
                return
            if written:
                state.logs, state.content, state.memories = scratch.logs, scratch.content, scratch.memories
                state.synced = written
                return
        logger.warning("gateway: a session's record kept changing under %d commits; this replica keeps it", _TRIES)

    # ------------------------------------------------------------------ savings
    def book(self, session: SessionState, usage: CacheUsage, gateway: int, replayed: int, rewritten: int) -> None:
        """This process's ledgers (the fallback), then the shared counters of both, in one round trip."""
        super().book(session, usage, gateway, replayed, rewritten)
        tenant, name = session.tenant, session.session
        keys = [self.keys.gateway_session_savings(tenant, name), self.keys.gateway_tenant(tenant)]
        deltas = _deltas(usage, gateway, replayed, rewritten)
        self.client.run(self.client.count(keys, deltas, recent=self.keys.gateway_sessions(tenant), member=name))

    def peek_tenant(self, tenant: str) -> TenantState | None:
        got = self.client.run(self.client.read_counts([self.keys.gateway_tenant(tenant)]))
        if got is None:
            return super().peek_tenant(tenant)
        return _StoredTenant(tenant=tenant, counts=got[0]) if got[0] else None

    def sessions_of(self, tenant: str, limit: int) -> list[SessionState]:
        names = self.client.run(self.client.read_recent(self.keys.gateway_sessions(tenant), limit))
        if names is None:
            return super().sessions_of(tenant, limit)
        rows = self.client.run(self.client.read_counts([self.keys.gateway_session_savings(tenant, n) for n in names]))
        if rows is None:
            return super().sessions_of(tenant, limit)
        return [_StoredSession(tenant=tenant, session=n, counts=r) for n, r in zip(names, rows) if r]

    def close(self) -> None:
        self.client.close()
