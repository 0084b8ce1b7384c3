"""Gateway sessions in Redis (``state_store="redis://..."``): replicas behind any load balancer replay the same
prefix and book into the same savings.

Keys (:class:`~cp_memory.state.keys.StateKeys` with the namespace ``gateway``; tenant and session are the
gateway's keyed hashes, hashed again into the key):

* ``...:gw:<tenant>:s:<session>`` — a hash: ``log:<api>`` the session's :class:`~.replay.SentLog` per protocol
  (JSON with its owner tag), ``mem:epoch`` and ``mem:cached`` its mem0 stage's dedup epoch and placement
  (:class:`~.sessions.SessionMemories`), ``id`` the session, and the session's savings counters;
* ``...:gw:<tenant>:t`` — a hash: the tenant's savings counters;
* ``...:gw:<tenant>:z`` — a sorted set: the tenant's sessions by last use (``/cp/savings`` lists them).

Every key's TTL is the session idle TTL (``session_ttl_s``), refreshed on each read and write. Each update is
one Lua script (atomic): a log is set (last writer wins, as in one process: the log of the request that went
out last), counters are incremented (``HINCRBY`` / ``HINCRBYFLOAT``: concurrent bookings never lose one; a
request's session and tenant in one script).

Failure behaviour: a call that fails or passes ``state_timeout_s`` falls back to this process's state — the
session's logs as this replica last saw them, its own savings — with one warning per outage
(:class:`~cp_memory.state.health.StoreHealth`); a log under a key that is not its own, or malformed, is not
used (no replay: the client's bytes go out). What stays in this process either way: the content rules' records
(:class:`~.content.records.ContentState`), and the LRU/idle-TTL copy used as the fallback.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Iterator, MutableMapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from ..extras import requires
from ..providers.account import SavingsAccount
from ..providers.usage import CacheUsage
from ..state.errors import StoreUnavailable
from ..state.health import StoreHealth
from ..state.keys import StateKeys
from ..state.redis_store import redis_client
from .config import GatewayConfig
from .protocols import Api
from .replay import SentLog
from .sessions import SessionMemories, SessionState, SessionStore, TenantState

with requires("redis", "cp_memory.gateway.shared_sessions"):
    import redis

__all__ = ["RedisSessionStore"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

_HASH = """
local kind = redis.call('TYPE', KEYS[1]).ok
if kind ~= 'hash' and kind ~= 'none' then redis.call('DEL', KEYS[1]) end
"""

_GET_LOG = """
if redis.call('TYPE', KEYS[1]).ok ~= 'hash' then return {} end
redis.call('PEXPIRE', KEYS[1], ARGV[1])
return {redis.call('HGET', KEYS[1], ARGV[2])}
"""

_USED = """
local z = redis.call('TYPE', KEYS[2]).ok
if z ~= 'zset' and z ~= 'none' then redis.call('DEL', KEYS[2]) end
redis.call('HSET', KEYS[1], 'id', ARGV[3])
redis.call('ZADD', KEYS[2], ARGV[2], ARGV[3])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', tonumber(ARGV[2]) - tonumber(ARGV[1]) / 1000)
redis.call('PEXPIRE', KEYS[2], ARGV[1])
"""

# KEYS[1] session hash, KEYS[2] the tenant's sessions; ARGV: ttl ms, now, session id, field, data
_SET_LOG = (
    _HASH
    + """
redis.call('HSET', KEYS[1], ARGV[4], ARGV[5])
redis.call('PEXPIRE', KEYS[1], ARGV[1])
"""
    + _USED
    + "return 1"
)

# KEYS[1] the session's hash, KEYS[2] the tenant's sessions, KEYS[3] the tenant's hash; ARGV: ttl ms, now, session
# id, then name/delta pairs (both ledgers get the same increments)
_BOOK = (
    _HASH
    + """
local t = redis.call('TYPE', KEYS[3]).ok
if t ~= 'hash' and t ~= 'none' then redis.call('DEL', KEYS[3]) end
for k = 1, 3, 2 do
  for i = 4, #ARGV, 2 do
    if string.sub(ARGV[i], 1, 2) == 'f:' then redis.call('HINCRBYFLOAT', KEYS[k], ARGV[i], ARGV[i + 1])
    else redis.call('HINCRBY', KEYS[k], ARGV[i], ARGV[i + 1]) end
  end
  redis.call('PEXPIRE', KEYS[k], ARGV[1])
end
"""
    + _USED
    + """
return 1
"""
)

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


def _deltas(usage: CacheUsage, gateway: int, replayed: int, rewritten: int) -> list[Any]:
    """One booking as counter increments (the account's own rules price it: one source for the cost)."""
    account = SavingsAccount()
    account.add(usage)
    s = account.summary()
    ints = [getattr(s, name) for name in _INTS]
    ints += [gateway, max(0, usage.cache_read_tokens - gateway), replayed, rewritten]
    pairs: list[Any] = []
    for name, value in zip(_INTS + _ATTRIBUTION, ints):
        pairs += [name, int(value)]
    for name in _FLOATS:
        pairs += [f"f:{name}", repr(float(getattr(s, name)))]
    return pairs


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _report(stored: dict[Any, Any]) -> dict[str, object]:
    """The same report as :meth:`~.sessions._Ledger.report`, from a hash of counters."""
    get = {_text(k): _text(v) for k, v in stored.items()}
    out: dict[str, object] = {name: int(get.get(name, 0)) for name in _INTS}
    cost, without = float(get.get("f:cost", 0.0)), float(get.get("f:without_cache", 0.0))
    out.update(cost=cost, without_cache=without, saved_share=(without - cost) / without if without else 0.0)
    out.update({name: int(get.get(name, 0)) for name in _ATTRIBUTION})
    return out


@dataclass
class _StoredTenant(TenantState):
    stored: dict[Any, Any] = field(default_factory=dict)

    def report(self) -> dict[str, object]:
        return _report(self.stored)


@dataclass
class _StoredSession(SessionState):
    stored: dict[Any, Any] = field(default_factory=dict)

    def report(self) -> dict[str, object]:
        return _report(self.stored)


class _StoredLogs(MutableMapping[Api, SentLog]):
    """A session's sent logs: read from Redis on each lookup, written through on each assignment; this
    process's copy answers when Redis cannot."""

    def __init__(self, store: RedisSessionStore, tenant: str, session: str) -> None:
        self.store, self.tenant, self.session = store, tenant, session
        self.local: dict[Api, SentLog] = {}

    def __getitem__(self, api: Api) -> SentLog:
        found = self.store.get_log(self.tenant, self.session, api, self.local)
        if found is None:
            raise KeyError(api)
        return found

    def __setitem__(self, api: Api, log: SentLog) -> None:
        self.local[api] = log
        self.store.set_log(self.tenant, self.session, api, log)

    def __delitem__(self, api: Api) -> None:
        del self.local[api]

    def __iter__(self) -> Iterator[Api]:
        return iter(self.local)

    def __len__(self) -> int:
        return len(self.local)


class _StoredMemories(SessionMemories):
    """A session's mem0 epoch and placement in its Redis hash (``mem:epoch``, ``mem:cached``): read on each
    use, written through; this process's copy answers when Redis cannot."""

    def __init__(self, store: RedisSessionStore, tenant: str, session: str) -> None:
        super().__init__()
        self.store, self.tenant, self.session = store, tenant, session

    def epoch(self) -> str:
        got = self.store.get_field(self.tenant, self.session, "mem:epoch")
        return super().epoch() if got is None else got

    def set_epoch(self, epoch: str) -> None:
        super().set_epoch(epoch)
        self.store.set_field(self.tenant, self.session, "mem:epoch", epoch)

    def cached(self) -> bool:
        got = self.store.get_field(self.tenant, self.session, "mem:cached")
        return super().cached() if got is None else got == "1"

    def set_cached(self) -> None:
        super().set_cached()
        self.store.set_field(self.tenant, self.session, "mem:cached", "1")


class RedisSessionStore(SessionStore):
    """Sessions and savings in Redis; this process's LRU copy is the fallback (module doc)."""

    remote = True

    def __init__(self, config: GatewayConfig, *, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__(config.max_sessions, config.session_ttl_s, config.max_tenants, clock=clock)
        assert config.state_store is not None
        url = config.state_store.get_secret_value()
        self.client = redis_client(url, timeout_s=config.state_timeout_s)
        self.keys = StateKeys("gateway")
        self.ttl_ms = max(1, int(config.session_ttl_s * 1000))
        self.max_log_bytes = config.max_body_bytes * 2
        self.health = StoreHealth(url.split("@")[-1], retry_s=config.state_retry_s)
        self._get_log = self.client.register_script(_GET_LOG)
        self._set_log = self.client.register_script(_SET_LOG)
        self._book = self.client.register_script(_BOOK)

    def _call(self, fn: Callable[[], T]) -> T | None:
        """``fn()``; None when the store cannot answer (one warning per outage)."""
        if not self.health.usable():
            return None
        try:
            result = fn()
        except redis.RedisError as exc:
            self.health.failed(StoreUnavailable(f"{type(exc).__name__}: {exc}"))
            return None
        self.health.succeeded()
        return result

    # ------------------------------------------------------------------ the flow's side
    def _new_session(self, tenant: str, session: str) -> SessionState:
        return SessionState(
            tenant=tenant,
            session=session,
            logs=_StoredLogs(self, tenant, session),
            memories=_StoredMemories(self, tenant, session),
        )

    def book(self, session: SessionState, usage: CacheUsage, gateway: int, replayed: int, rewritten: int) -> None:
        """This process's ledgers (the fallback), then both of Redis's in one script."""
        super().book(session, usage, gateway, replayed, rewritten)
        tenant, name = session.tenant, session.session
        keys = [
            self.keys.gateway_session(tenant, name),
            self.keys.gateway_sessions(tenant),
            self.keys.gateway_tenant(tenant),
        ]
        args: list[Any] = [self.ttl_ms, time.time(), name, *_deltas(usage, gateway, replayed, rewritten)]
        self._call(lambda: self._book(keys=keys, args=args))

    def _get_raw(self, tenant: str, session: str, name: str) -> bytes | None:
        """A field of the session's hash (b"" when unset); None when the store cannot say."""
        key = self.keys.gateway_session(tenant, session)
        got = self._call(lambda: self._get_log(keys=[key], args=[self.ttl_ms, name]))
        if got is None:
            return None
        return bytes(got[0]) if got and got[0] else b""

    def get_log(self, tenant: str, session: str, api: Api, local: dict[Api, SentLog]) -> SentLog | None:
        got = self._get_raw(tenant, session, f"log:{api.value}")
        if got is None:  # the store cannot say: what this replica sent last
            return local.get(api)
        return self._decode(self.keys.gateway_session(tenant, session), got) if got else None

    def get_field(self, tenant: str, session: str, name: str) -> str | None:
        """A field of the session's hash as text ("" when unset); None when the store cannot say."""
        got = self._get_raw(tenant, session, name)
        return None if got is None else got.decode()

    def set_field(self, tenant: str, session: str, name: str, value: str) -> None:
        """Set a field of the session's hash (and mark the session used), one script."""
        key = self.keys.gateway_session(tenant, session)
        args: list[Any] = [self.ttl_ms, time.time(), session, name, value]
        self._call(lambda: self._set_log(keys=[key, self.keys.gateway_sessions(tenant)], args=args))

    def set_log(self, tenant: str, session: str, api: Api, log: SentLog) -> None:
        key = self.keys.gateway_session(tenant, session)
        data = json.dumps(
            {"owner": self.keys.owner(key), "segments": list(log.segments), "digests": list(log.digests)},
            ensure_ascii=False,
            separators=(",", ":"),
        )
        self.set_field(tenant, session, f"log:{api.value}", data)

    def _decode(self, key: str, data: bytes) -> SentLog | None:
        """The stored log, or None (logged) for one that is too large, malformed or another key's."""
        try:
            if len(data) > self.max_log_bytes:
                raise ValueError(f"{len(data)} bytes, over {self.max_log_bytes}")
            doc = json.loads(data)
            if not isinstance(doc, dict) or doc.get("owner") != self.keys.owner(key):
                raise ValueError("not a sent log of this key")
            segments, digests = doc.get("segments"), doc.get("digests")
            if not isinstance(segments, list) or not isinstance(digests, list) or len(segments) != len(digests):
                raise ValueError("segments and digests do not pair up")
            if not all(isinstance(d, str) for d in digests):
                raise ValueError("a digest is not a str")
        except ValueError as exc:
            logger.warning("gateway: unusable sent log under %s (%s): no replay for it", key, exc)
            return None
        return SentLog(tuple(segments), tuple(digests))

    # ------------------------------------------------------------------ /cp/savings
    def peek_tenant(self, tenant: str) -> TenantState | None:
        stored = self._call(lambda: self.client.hgetall(self.keys.gateway_tenant(tenant)))
        if stored is None:
            return super().peek_tenant(tenant)
        return _StoredTenant(tenant=tenant, stored=dict(stored)) if stored else None

    def sessions_of(self, tenant: str, limit: int) -> list[SessionState]:
        since = time.time() - self.ttl_ms / 1000
        zkey = self.keys.gateway_sessions(tenant)
        ids = self._call(lambda: self.client.zrevrangebyscore(zkey, "+inf", since, start=0, num=limit))
        if ids is None:
            return super().sessions_of(tenant, limit)
        pipe = self.client.pipeline(transaction=False)
        names = [_text(i) for i in ids]
        for name in names:
            pipe.hgetall(self.keys.gateway_session(tenant, name))
        rows = self._call(pipe.execute) if names else []
        if rows is None:
            return super().sessions_of(tenant, limit)
        return [_StoredSession(tenant=tenant, session=n, stored=dict(r)) for n, r in zip(names, rows) if r]

    def close(self) -> None:
        self.client.close()
