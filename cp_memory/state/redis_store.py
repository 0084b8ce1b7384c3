"""The Redis stores, sync (:class:`RedisStateStore`) and async (:class:`AsyncRedisStateStore`, redis.asyncio):
one hash per key (``t``: token, ``d``: bytes), read and
written by two Lua scripts, so a read-if-changed and a compare-and-set are one round trip each and atomic
(``read_many``: several reads pipelined in one round trip). Counters (``count``: one script over hashes of
counters and a recency sorted set; ``read_counts``: HGETALL pipelined; ``read_recent``: a sorted-set range).

Every call is bounded: ``socket_timeout`` / ``socket_connect_timeout`` = ``timeout_s``, one retry on a
connection error (redis-py's own ``Retry``), then :class:`~cp_memory.state.errors.StoreUnavailable`. The two
share the scripts and the decoding of their answers; the async one keeps one client per event loop (a
redis.asyncio connection belongs to the loop that opened it). A key of
another type, or a hash without a token (anything this store did not write), reads as
:data:`~cp_memory.state.store.MALFORMED`; a write expecting that token replaces it.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Sequence
from typing import Any

from ..extras import requires
from .counters import Count, ReadCounts, ReadRecent
from .errors import StoreUnavailable
from .versioned import MALFORMED, Versioned, new_token

with requires("redis", "cp_memory.state.redis_store"):
    import redis
    import redis.asyncio
    from redis.asyncio.retry import Retry as AsyncRetry
    from redis.backoff import NoBackoff
    from redis.retry import Retry

__all__ = ["AsyncRedisStateStore", "RedisStateStore", "redis_client"]

_READ = """
local kind = redis.call('TYPE', KEYS[1]).ok
if kind == 'none' then return {''} end
if kind ~= 'hash' then return {ARGV[3]} end
local t = redis.call('HGET', KEYS[1], 't')
if not t then return {ARGV[3]} end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
if t == ARGV[1] then return {t} end
return {t, redis.call('HGET', KEYS[1], 'd') or ''}
"""

_WRITE = """
local kind = redis.call('TYPE', KEYS[1]).ok
local t = ''
if kind == 'hash' then t = redis.call('HGET', KEYS[1], 't') or ARGV[5]
elseif kind ~= 'none' then t = ARGV[5] end
if t ~= ARGV[1] then return 0 end
if t == ARGV[5] then redis.call('DEL', KEYS[1]) end
redis.call('HSET', KEYS[1], 't', ARGV[2], 'd', ARGV[3])
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 1
"""

# KEYS: the counters' hashes, then the recency set (or none); ARGV: ttl ms, recency score, member, the number of
# counter keys, then kind/name/delta triples (kind i: HINCRBY, f: HINCRBYFLOAT)
_COUNT = """
local n = tonumber(ARGV[4])
for k = 1, n do
  local kind = redis.call('TYPE', KEYS[k]).ok
  if kind ~= 'hash' and kind ~= 'none' then redis.call('DEL', KEYS[k]) end
  for i = 5, #ARGV, 3 do
    if ARGV[i] == 'f' then redis.call('HINCRBYFLOAT', KEYS[k], ARGV[i + 1], ARGV[i + 2])
    else redis.call('HINCRBY', KEYS[k], ARGV[i + 1], ARGV[i + 2]) end
  end
  redis.call('PEXPIRE', KEYS[k], ARGV[1])
end
if #KEYS > n then
  local z = KEYS[n + 1]
  local kind = redis.call('TYPE', z).ok
  if kind ~= 'zset' and kind ~= 'none' then redis.call('DEL', z) end
  redis.call('ZADD', z, ARGV[2], ARGV[3])
  redis.call('ZREMRANGEBYSCORE', z, '-inf', tonumber(ARGV[2]) - tonumber(ARGV[1]) / 1000)
  redis.call('PEXPIRE', z, ARGV[1])
end
return 1
"""


def _count_call(request: Count) -> tuple[list[str], list[Any]]:
    keys = [*request.keys, *([request.recent] if request.recent else [])]
    args: list[Any] = [int(request.ttl_s * 1000), repr(float(request.score)), request.member, len(request.keys)]
    for name, delta in request.deltas:
        whole = isinstance(delta, int) and not isinstance(delta, bool)
        args += ["i" if whole else "f", name, int(delta) if whole else repr(float(delta))]
    return keys, args


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _counts(rows: Any) -> tuple[dict[str, float], ...]:
    """HGETALL answers as counters (a field that is not a number: skipped, as something this store did not
    write)."""
    out = []
    for row in rows:
        values: dict[str, float] = {}
        for name, value in (row or {}).items():
            try:
                values[_text(name)] = float(value)
            except ValueError:
                continue
        out.append(values)
    return tuple(out)


def _options(timeout_s: float) -> dict[str, Any]:
    return dict(
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        retry_on_timeout=False,
        health_check_interval=0,
    )


def redis_client(url: str, *, timeout_s: float) -> redis.Redis:
    """A sync client with the store's bounds (timeouts, one retry on a connection error, no health checks)."""
    return redis.Redis.from_url(url, retry=Retry(NoBackoff(), 1), **_options(timeout_s))


def _versioned(got: Any) -> Versioned:
    token = got[0].decode() if isinstance(got[0], bytes) else str(got[0])
    if token == "":
        return Versioned("", None)
    if token == MALFORMED:
        return Versioned(MALFORMED, b"")
    return Versioned(token, bytes(got[1]) if len(got) > 1 else None)


def _read_args(have: str, ttl_s: int) -> list[Any]:
    return [have, int(ttl_s * 1000), MALFORMED]


def _write_args(data: bytes, expected: str, ttl_s: int, token: str | None) -> tuple[str, list[Any]]:
    token = token or new_token()
    return token, [expected, token, data, int(ttl_s * 1000), MALFORMED]


def _unavailable(what: str, exc: BaseException) -> StoreUnavailable:
    return StoreUnavailable(f"redis {what}: {type(exc).__name__}: {exc}")


class RedisStateStore:
    """Keys in one Redis database (``redis://host:port/db``); thread-safe (redis-py's connection pool)."""

    def __init__(self, url: str, *, timeout_s: float) -> None:
        self.client = redis_client(url, timeout_s=timeout_s)
        self._read = self.client.register_script(_READ)
        self._write = self.client.register_script(_WRITE)
        self._count = self.client.register_script(_COUNT)

    def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except redis.RedisError as exc:  # connection, timeout, OOM, script errors: the store cannot say
            raise _unavailable(what, exc) from exc

    def read(self, key: str, *, have: str = "", ttl_s: int) -> Versioned:
        return _versioned(self._call("read", self._read, keys=[key], args=_read_args(have, ttl_s)))

    def write(self, key: str, data: bytes, *, expected: str, ttl_s: int, token: str | None = None) -> str | None:
        token, args = _write_args(data, expected, ttl_s, token)
        done = self._call("write", self._write, keys=[key], args=args)
        return token if int(done) == 1 else None

    def delete(self, key: str) -> None:
        self._call("delete", self.client.delete, key)

    def read_many(self, reads: Sequence[tuple[str, str, int]]) -> tuple[Versioned, ...]:
        """The reads in one round trip (a pipeline of the read script; each read atomic on its own)."""

        def send() -> list[Any]:
            for _ in range(2):  # EVALSHA, not the Script object: a pipeline of Scripts asks SCRIPT EXISTS first
                pipe = self.client.pipeline(transaction=False)
                for key, have, ttl_s in reads:
                    pipe.evalsha(self._read.sha, 1, key, *_read_args(have, ttl_s))
                try:
                    return pipe.execute()  # type: ignore[no-any-return]
                except redis.exceptions.NoScriptError:  # a restarted or flushed server: load it, once
                    self.client.script_load(_READ)
            raise redis.exceptions.NoScriptError("the read script could not be loaded")

        return tuple(_versioned(got) for got in self._call("read", send))

    def count(self, request: Count) -> None:
        keys, args = _count_call(request)
        self._call("count", self._count, keys=keys, args=args)

    def read_counts(self, request: ReadCounts) -> tuple[dict[str, float], ...]:
        def send() -> list[Any]:
            pipe = self.client.pipeline(transaction=False)
            for key in request.keys:
                pipe.hgetall(key)
            return pipe.execute()  # type: ignore[no-any-return]

        return _counts(self._call("read counts", send))

    def read_recent(self, request: ReadRecent) -> tuple[str, ...]:
        r = request
        got = self._call("read recent", self.client.zrevrangebyscore, r.key, "+inf", r.since, start=0, num=r.limit)
        return tuple(_text(m) for m in got)

    def close(self) -> None:
        try:
            self.client.close()
        except redis.RedisError:
            pass


class _LoopClient:
    def __init__(self, url: str, timeout_s: float) -> None:
        self.client = redis.asyncio.Redis.from_url(url, retry=AsyncRetry(NoBackoff(), 1), **_options(timeout_s))
        self.read = self.client.register_script(_READ)
        self.write = self.client.register_script(_WRITE)
        self.count = self.client.register_script(_COUNT)


class AsyncRedisStateStore:
    """The same keys and scripts through redis.asyncio; one client per running event loop."""

    def __init__(self, url: str, *, timeout_s: float) -> None:
        self.url = url
        self.timeout_s = timeout_s
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopClient] = weakref.WeakKeyDictionary()

    def _client(self) -> _LoopClient:
        loop = asyncio.get_running_loop()
        found = self._clients.get(loop)
        if found is None:
            found = self._clients[loop] = _LoopClient(self.url, self.timeout_s)
        return found

    async def _call(self, what: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return await fn(*args, **kwargs)
        except redis.RedisError as exc:
            raise _unavailable(what, exc) from exc

    async def read(self, key: str, *, have: str = "", ttl_s: int) -> Versioned:
        c = self._client()
        return _versioned(await self._call("read", c.read, keys=[key], args=_read_args(have, ttl_s)))

    async def write(self, key: str, data: bytes, *, expected: str, ttl_s: int, token: str | None = None) -> str | None:
        token, args = _write_args(data, expected, ttl_s, token)
        done = await self._call("write", self._client().write, keys=[key], args=args)
        return token if int(done) == 1 else None

    async def delete(self, key: str) -> None:
        await self._call("delete", self._client().client.delete, key)

    async def read_many(self, reads: Sequence[tuple[str, str, int]]) -> tuple[Versioned, ...]:
        """:meth:`RedisStateStore.read_many` with ``await``."""
        c = self._client()

        async def send() -> list[Any]:
            for _ in range(2):  # as the sync store: EVALSHA, the script loaded once where the server lacks it
                pipe = c.client.pipeline(transaction=False)
                for key, have, ttl_s in reads:
                    pipe.evalsha(c.read.sha, 1, key, *_read_args(have, ttl_s))
                try:
                    return await pipe.execute()  # type: ignore[no-any-return]
                except redis.exceptions.NoScriptError:
                    await c.client.script_load(_READ)
            raise redis.exceptions.NoScriptError("the read script could not be loaded")

        return tuple(_versioned(got) for got in await self._call("read", send))

    async def count(self, request: Count) -> None:
        keys, args = _count_call(request)
        await self._call("count", self._client().count, keys=keys, args=args)

    async def read_counts(self, request: ReadCounts) -> tuple[dict[str, float], ...]:
        c = self._client()

        async def send() -> list[Any]:
            pipe = c.client.pipeline(transaction=False)
            for key in request.keys:
                pipe.hgetall(key)
            return await pipe.execute()  # type: ignore[no-any-return]

        return _counts(await self._call("read counts", send))

    async def read_recent(self, request: ReadRecent) -> tuple[str, ...]:
        r, c = request, self._client()
        got = await self._call("read recent", c.client.zrevrangebyscore, r.key, "+inf", r.since, start=0, num=r.limit)
        return tuple(_text(m) for m in got)

    async def aclose(self) -> None:
        """Close this loop's client (others close with their loops)."""
        found = self._clients.pop(asyncio.get_running_loop(), None)
        if found is not None:
            try:
                await found.client.aclose()
            except redis.RedisError:
                pass
