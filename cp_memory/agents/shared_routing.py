"""The CoA router's state in a shared store (``AgentRouter(state_store="redis://...")``): N router processes
(or N routers of one process) over the same workers behave as one router.

What is shared, per router name and pool (keys in :class:`~cp_memory.state.keys.StateKeys`, by tenant):

* the **pool** record: per worker, the tokens written into its cache so far (*intake*, the clock of the
  home rule and of ``placement="cache"``), a reset *epoch* (a cache flushed by :meth:`AgentRouter.reset`
  is nobody's home, in every router), and each router instance's requests in flight (*load*: one slice per
  instance, stamped with the wall clock, ignored once older than ``load_lease_s`` so a router that died
  with requests in flight stops counting);
* one **home** record per document (its home key): its last :data:`HOME_CHAINS` placements, the latest
  (its home) first: the worker, that worker's intake then, the reset epoch, and digests of the segment's
  first :data:`CHAIN_DIGESTS` block keys (so another router can tell how much of a new segment each of
  those workers holds).

A route reads both (two round trips), decides under the router's lock with the shared intake, load and home,
*claims* the home by compare-and-set (a router that lost the race for a new segment's home adopts the
winner's worker, so a segment never gets two homes) and adds its intake to the pool by compare-and-set
(a conflict reads again and re-applies the increment: concurrent routers never lose one; past
:data:`WRITE_ATTEMPTS` it stays local). A release writes the instance's load slice.

The router's own per-worker cache models (:class:`~cp_memory.core.index.ContextIndex`) stay in its process:
a segment another router placed is found through its home record, not through the models. When the store
cannot answer (down, stalled past ``timeout_s``, out of memory), routing uses the router's local state (its
models, homes LRU and counters, kept current in every route), with one warning per outage
(:class:`~cp_memory.state.health.StoreHealth`), and returns to the store's values once it answers; what a
router learned during the outage is not merged back. Routing never fails because of the store.
"""

from __future__ import annotations

import hashlib
import json
import logging
import time
import uuid
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from cp_memory.state.client import StateClient
from cp_memory.state.health import StoreHealth
from cp_memory.state.keys import StateKeys
from cp_memory.state.ops import AsyncStateStore, Op, open_async_state_store
from cp_memory.state.store import (
    STATE_RETRY_S,
    STATE_TIMEOUT_S,
    StateStore,
    Versioned,
    open_state_store,
)

__all__ = [
    "CHAIN_DIGESTS",
    "HOME_CHAINS",
    "ROUTER_LOAD_LEASE_S",
    "ROUTER_STATE_TTL_S",
    "WRITE_ATTEMPTS",
    "Pool",
    "RouterState",
    "RouterStateConfig",
    "Placed",
    "SharedHome",
    "SharedView",
    "decode_home",
    "decode_pool",
    "encode_home",
    "encode_pool",
    "key_digest",
]

logger = logging.getLogger(__name__)

#: a shared home or pool record unused this long expires (refreshed on every read); the local homes are
#: bounded by count (``max_homes``), the store's by this TTL and the store's own memory policy
ROUTER_STATE_TTL_S = 7 * 86_400
#: a router instance's load slice counts this long after its last route or release (seconds)
ROUTER_LOAD_LEASE_S = 600.0
#: block keys of a segment whose digests a home record keeps
CHAIN_DIGESTS = 64
#: placements of one document a home record keeps (its segments that start with it, the latest first)
HOME_CHAINS = 8
#: compare-and-set attempts of one update before it stays in this router's local state
WRITE_ATTEMPTS = 5

_VERSION = 1
_MAX_BYTES = 1 << 20


@dataclass(frozen=True)
class RouterStateConfig:
    """Where a router's state lives: ``url`` (``redis://...``; ``memory://``: this router only, through the seam)
    and its namespace: ``tenant`` (the application) and ``name`` (routers of one name over the same worker
    names share one state)."""

    url: str = field(repr=False)  # may hold a password
    name: str = "default"
    tenant: str = "default"
    ttl_s: int = ROUTER_STATE_TTL_S
    timeout_s: float = STATE_TIMEOUT_S
    retry_s: float = STATE_RETRY_S
    load_lease_s: float = ROUTER_LOAD_LEASE_S

    def __post_init__(self) -> None:
        if not isinstance(self.url, str) or not self.url.startswith(("redis://", "rediss://", "unix://", "memory://")):
            raise ValueError("state_store must be a redis://, rediss://, unix:// or memory:// URL")
        if not isinstance(self.name, str) or not self.name.strip():
            raise ValueError(f"the router's state name must be a non-empty str, got {self.name!r}")
        if isinstance(self.ttl_s, bool) or not isinstance(self.ttl_s, int) or self.ttl_s < 1:
            raise ValueError(f"ttl_s must be a positive int, got {self.ttl_s!r}")
        for what in ("timeout_s", "load_lease_s"):
            value = getattr(self, what)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
                raise ValueError(f"{what} must be a positive number, got {value!r}")
        if isinstance(self.retry_s, bool) or not isinstance(self.retry_s, (int, float)) or self.retry_s < 0:
            raise ValueError(f"retry_s must be a non-negative number, got {self.retry_s!r}")


def key_digest(key: Hashable) -> str:
    """A process-independent digest of a block or home key (its ``repr``: str, int, bytes and tuples of them
    are stable across processes; an object whose repr names its address is not)."""
    return hashlib.sha256(repr(key).encode("utf-8", "backslashreplace")).hexdigest()[:16]


@dataclass(frozen=True)
class Placed:
    """One segment of a document placed on a worker: that worker's intake and reset epoch then, and the
    digests of the segment's first block keys."""

    worker: int
    at: int
    epoch: int
    chain: tuple[str, ...]

    def matched_blocks(self, chain: Sequence[str]) -> int:
        """Blocks of the longest common prefix of ``chain`` (the new segment's digests) with this one."""
        n = 0
        for mine, theirs in zip(self.chain, chain):
            if mine != theirs:
                break
            n += 1
        return n


@dataclass(frozen=True)
class SharedHome:
    """A document's placements as the store holds them, the latest first (at most :data:`HOME_CHAINS`): the
    first is its *home*; the others are its other segments' (another set of documents after it) workers."""

    placed: tuple[Placed, ...]

    @property
    def worker(self) -> int | None:
        """The home (None: its last worker failed it)."""
        return self.placed[0].worker if self.placed else None

    def with_placed(self, new: Placed) -> SharedHome:
        """``new`` first (the new home); the same segment on the same worker, and the oldest, dropped."""
        rest = [p for p in self.placed if not (p.worker == new.worker and p.chain == new.chain)]
        return SharedHome((new, *rest[: HOME_CHAINS - 1]))

    def without(self, worker: int) -> SharedHome:
        return SharedHome(tuple(p for p in self.placed if p.worker != worker))


@dataclass(frozen=True)
class Pool:
    """The pool record: per-worker intake and reset epochs, and each router instance's load slice."""

    intake: tuple[int, ...]
    epochs: tuple[int, ...]
    load: dict[str, tuple[float, tuple[int, ...]]]

    @classmethod
    def empty(cls, n: int) -> Pool:
        return cls((0,) * n, (0,) * n, {})

    def others(self, me: str, now: float, lease_s: float) -> list[int]:
        """Requests in flight per worker on the other live router instances."""
        out = [0] * len(self.intake)
        for instance, (stamp, loads) in self.load.items():
            if instance != me and now - stamp < lease_s:
                out = [a + b for a, b in zip(out, loads)]
        return out

    def updated(
        self,
        me: str,
        now: float,
        lease_s: float,
        *,
        worker: int | None,
        written: int,
        load: Sequence[int],
        resets: Sequence[int],
    ) -> Pool:
        """A copy with ``written`` tokens added to ``worker``'s intake, ``resets`` flushed, this instance's load
        slice set to ``load`` and stale slices dropped."""
        intake = list(self.intake)
        epochs = list(self.epochs)
        if worker is not None:
            intake[worker] += written
        for w in resets:
            epochs[w] += 1
        slices = {i: s for i, s in self.load.items() if i != me and now - s[0] < lease_s}
        if any(load):
            slices[me] = (now, tuple(load))
        return Pool(tuple(intake), tuple(epochs), slices)


@dataclass(frozen=True)
class SharedView:
    """What a route read: the pool (and its token) and the segment's home (and its token; None: none)."""

    pool: Pool
    pool_token: str
    home: SharedHome | None
    home_token: str


def _nat(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{what} {value!r:.20} is not a non-negative int")
    return value


def _doc(data: bytes, owner: str) -> dict[str, Any]:
    if len(data) > _MAX_BYTES:
        raise ValueError(f"{len(data)} bytes, over the bound of {_MAX_BYTES}")
    try:
        doc = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ValueError(f"not JSON: {exc}") from exc
    if not isinstance(doc, dict) or doc.get("v") != _VERSION:
        raise ValueError("not a router record of this store")
    if doc.get("owner") != owner:
        raise ValueError("the record under this key belongs to another router, pool or tenant")
    return doc


def _ints(value: Any, n: int, what: str) -> tuple[int, ...]:
    if not isinstance(value, list) or len(value) != n:
        raise ValueError(f"{what} is not a list of {n} ints")
    return tuple(_nat(v, what) for v in value)


def encode_pool(pool: Pool, owner: str) -> bytes:
    load = {i: [stamp, list(loads)] for i, (stamp, loads) in pool.load.items()}
    doc = {"v": _VERSION, "owner": owner, "intake": list(pool.intake), "epochs": list(pool.epochs), "load": load}
    return json.dumps(doc, separators=(",", ":")).encode("utf-8")


def decode_pool(data: bytes, owner: str, n: int) -> Pool:
    """The pool record in ``data``; ``ValueError`` for anything another writer could have planted."""
    doc = _doc(data, owner)
    load: dict[str, tuple[float, tuple[int, ...]]] = {}
    slices = doc.get("load")
    if not isinstance(slices, dict):
        raise ValueError("load is not an object")
    for instance, got in slices.items():
        if not (isinstance(got, list) and len(got) == 2 and isinstance(got[0], (int, float))):
            raise ValueError("a load slice is not [stamp, loads]")
        load[instance] = (float(got[0]), _ints(got[1], n, "a load slice"))
    return Pool(_ints(doc.get("intake"), n, "intake"), _ints(doc.get("epochs"), n, "epochs"), load)


def encode_home(home: SharedHome, owner: str) -> bytes:
    placed = [[p.worker, p.at, p.epoch, list(p.chain)] for p in home.placed]
    return json.dumps({"v": _VERSION, "owner": owner, "placed": placed}, separators=(",", ":")).encode("utf-8")


def _placed(row: Any, n: int) -> Placed:
    if not isinstance(row, list) or len(row) != 4:
        raise ValueError("a placement is not [worker, at, epoch, chain]")
    worker, at, epoch, chain = row
    if _nat(worker, "worker") >= n:
        raise ValueError(f"worker {worker} is not in a pool of {n}")
    if not isinstance(chain, list) or len(chain) > CHAIN_DIGESTS or not all(isinstance(c, str) for c in chain):
        raise ValueError(f"chain is not a list of at most {CHAIN_DIGESTS} str")
    return Placed(worker, _nat(at, "at"), _nat(epoch, "epoch"), tuple(chain))


def decode_home(data: bytes, owner: str, n: int) -> SharedHome:
    rows = _doc(data, owner).get("placed")
    if not isinstance(rows, list) or len(rows) > HOME_CHAINS:
        raise ValueError(f"placed is not a list of at most {HOME_CHAINS} placements")
    return SharedHome(tuple(_placed(r, n) for r in rows))


class RouterState:
    """One router's side of the store: its keys, health, instance id and the pool it read last. Every
    operation is a generator of store requests (:mod:`cp_memory.state.ops`), driven by the router with the
    sync store (:attr:`store`) or the async one (:attr:`astore`); it returns None when the store cannot say."""

    def __init__(self, config: RouterStateConfig, names: Sequence[str]) -> None:
        self.config = config
        self.names = tuple(names)
        self.keys = StateKeys(config.tenant)
        self.pool_key = self.keys.router_pool(config.name, self.names)
        self.instance = uuid.uuid4().hex
        store = open_state_store(config.url, timeout_s=config.timeout_s)
        health = StoreHealth(
            f"of router {config.name!r}",
            retry_s=config.retry_s,
            fallback="the router routes with its local cache models, homes and counters",
            back="shared homes and counters",
        )
        self.client = StateClient(
            store,
            keys=self.keys,
            ttl_s=config.ttl_s,
            health=health,
            astore=open_async_state_store(config.url, store, timeout_s=config.timeout_s),
            warn_keys=256,
        )
        self.store: StateStore = self.client.store
        self.astore: AsyncStateStore = self.client.astore
        self.health = health
        self._last: tuple[Pool, str] | None = None  # the pool record this router read or wrote last

    def home_key(self, head: Hashable) -> str:
        return self.keys.router_home(self.config.name, self.names, key_digest(head))

    @staticmethod
    def chain(tagged: Sequence[tuple[int, Hashable]]) -> tuple[str, ...]:
        return tuple(key_digest(k) for _, k in tagged[:CHAIN_DIGESTS])

    # ------------------------------------------------------------------ store calls
    def _read(self, key: str) -> Op[Versioned | None]:
        return self.client.read(key)

    def _write(self, key: str, data: bytes, expected: str) -> Op[str | None]:
        """The new token; "" on a conflict; None when the store cannot answer."""
        return self.client.write(key, data, expected=expected)

    def _bad(self, key: str, exc: Exception) -> None:
        self.client.bad_value(key, exc, "the router replaces it")

    def _pool(self, got: Versioned) -> Pool:
        if got.absent or got.data is None:
            return Pool.empty(len(self.names))
        try:
            return decode_pool(got.data, StateKeys.owner(self.pool_key), len(self.names))
        except ValueError as exc:
            self._bad(self.pool_key, exc)
            return Pool.empty(len(self.names))

    def _home(self, key: str, got: Versioned) -> SharedHome | None:
        if got.absent or got.data is None:
            return None
        try:
            return decode_home(got.data, StateKeys.owner(key), len(self.names))
        except ValueError as exc:
            self._bad(key, exc)
            return None

    # ------------------------------------------------------------------ operations
    def read_view(self, head: Hashable | None) -> Op[SharedView | None]:
        """The pool and ``head``'s home (two reads); None when the store cannot answer."""
        got = yield from self._read(self.pool_key)
        if got is None:
            return None
        pool = self._pool(got)
        self._last = (pool, got.token)
        if head is None:
            return SharedView(pool, got.token, None, "")
        key = self.home_key(head)
        found = yield from self._read(key)
        if found is None:
            return None
        return SharedView(pool, got.token, self._home(key, found), found.token)

    def claim(
        self,
        head: Hashable,
        new: Placed,
        home: SharedHome | None,
        token: str,
        *,
        adopt: Callable[[Placed], bool] | None = None,
    ) -> Op[int | None]:
        """Make ``new`` ``head``'s home (``home``: the record read, under ``token``) by compare-and-set. On a
        conflict: read the winner's record; when ``adopt`` (a predicate) accepts its home, return that worker
        (the route goes there: a document gets one home), else put ``new`` first in it. None: ``new`` is
        written, or the store cannot say."""
        key = self.home_key(head)
        owner = StateKeys.owner(key)
        for _ in range(WRITE_ATTEMPTS):
            record = (home or SharedHome(())).with_placed(new)
            written = yield from self._write(key, encode_home(record, owner), token)
            if written != "":
                return None
            got = yield from self._read(key)
            if got is None:
                return None
            home, token = self._home(key, got), got.token
            if adopt is not None and home is not None and home.worker is not None and adopt(home.placed[0]):
                return home.worker
        logger.debug("the home of %s stays local after %d conflicts", key, WRITE_ATTEMPTS)
        return None

    def clear(self, head: Hashable, worker: int) -> Op[None]:
        """``worker`` failed ``head``'s request: if the home is still ``worker``, the document forgets it."""
        key = self.home_key(head)
        got = yield from self._read(key)
        home = self._home(key, got) if got is not None else None
        if got is not None and home is not None and home.worker == worker:
            yield from self._write(key, encode_home(home.without(worker), StateKeys.owner(key)), got.token)

    def push(
        self, *, worker: int | None = None, written: int = 0, load: Sequence[int], resets: Sequence[int] = ()
    ) -> Op[None]:
        """Add ``written`` to ``worker``'s intake, bump the epochs of ``resets`` and set this instance's load
        slice, by compare-and-set from the pool read last (a conflict reads and re-applies, bounded)."""
        last = self._last
        pool, token = last if last is not None else (None, "")
        owner = StateKeys.owner(self.pool_key)
        lease = self.config.load_lease_s
        for _ in range(WRITE_ATTEMPTS):
            if pool is None:
                got = yield from self._read(self.pool_key)
                if got is None:
                    return None
                pool, token = self._pool(got), got.token
            new = pool.updated(
                self.instance, time.time(), lease, worker=worker, written=written, load=load, resets=resets
            )
            done = yield from self._write(self.pool_key, encode_pool(new, owner), token)
            if done is None:
                return None
            if done:
                self._last = (new, done)
                return None
            pool = None
        logger.debug("a pool update of router %r stays local after %d conflicts", self.config.name, WRITE_ATTEMPTS)
        return None

    def close(self) -> None:
        self.store.close()

    async def aclose(self) -> None:
        await self.astore.aclose()
