"""The ASGI app (Starlette): the three protocols shaped, everything else forwarded untouched, plus
``/metrics``, ``/cp/savings`` and ``/cp/health``.

The app drives :class:`~cp_memory.gateway.flow.Gateway`: read the body (bounded: 413 past the size limit,
408 past the time limit), plan, forward (:class:`~cp_memory.gateway.upstream.Upstream`), stream the answer
back byte for byte while reading its usage, record. An upstream error reaches the client with its status and
body; an unreachable upstream is a 502, a silent one a 504; a client that goes away mid-stream closes the
upstream stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar
from urllib.parse import quote

from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from .config import GatewayConfig, Mem0Source, UpstreamKind
from .errors import UpstreamBroken, UpstreamTimeout, UpstreamUnreachable
from .flow import Gateway, Incoming, Plan
from .mem0_store import Mem0Link
from .memories import Memories, MemoryQuery, PlacementMode, answer_text
from .metrics import CONTENT_TYPE, GatewayMetrics
from .protocols import Api, api_of
from .tenancy import identify
from .upstream import Answer, Upstream, error_body, request_headers, response_headers
from .usage_tap import SSETap, body_usage

__all__ = ["KEY_HEADER", "build_app"]

logger = logging.getLogger(__name__)

T = TypeVar("T")

KEY_HEADER = "x-cp-gateway-key"
#: bodies up to this size are planned on the event loop; larger ones in a worker thread
_INLINE_PLAN_BYTES = 256 * 1024


class _TooLarge(Exception):
    pass


def _error(status: int, kind: str, message: str) -> JSONResponse:
    return JSONResponse(error_body(kind, message), status_code=status)


class _App:
    """The handlers, over one gateway, one upstream pool and one metrics registry."""

    def __init__(self, config: GatewayConfig, kind: UpstreamKind, memory: Any = None) -> None:
        self.config = config
        self.gateway = Gateway(config, kind)
        self.metrics = GatewayMetrics()
        self.upstream = Upstream(config)
        self.mem0 = Mem0Link(config, memory) if config.mem0 is not Mem0Source.OFF else None

    # ------------------------------------------------------------------ lifecycle
    @contextlib.asynccontextmanager
    async def lifespan(self, app: Starlette) -> AsyncIterator[None]:
        await self.upstream.open()
        logger.info("gateway: forwarding to %s (%s)", self.config.upstream_base, self.gateway.kind.value)
        if self.mem0 is not None:
            await asyncio.to_thread(self.mem0.open)
        try:
            yield
        finally:
            await self.upstream.close()
            if self.mem0 is not None:
                await asyncio.to_thread(self.mem0.close)

    def _authorized(self, request: Request) -> bool:
        key = self.config.gateway_key
        if key is None:
            return True
        given = request.headers.get(KEY_HEADER, "")
        return hmac.compare_digest(given.encode(), key.get_secret_value().encode())

    async def _body(self, request: Request) -> bytes:
        declared = request.headers.get("content-length")
        if declared and declared.isdigit() and int(declared) > self.config.max_body_bytes:
            raise _TooLarge
        chunks: list[bytes] = []
        size = 0

        async def read() -> None:
            nonlocal size
            async for chunk in request.stream():
                size += len(chunk)
                if size > self.config.max_body_bytes:
                    raise _TooLarge
                chunks.append(chunk)

        await asyncio.wait_for(read(), timeout=self.config.body_timeout_s)
        return b"".join(chunks)

    # ------------------------------------------------------------------ routes
    async def health(self, request: Request) -> Response:
        return JSONResponse({"status": "ok", "upstream_kind": self.gateway.kind.value})

    async def metrics_page(self, request: Request) -> Response:
        if not self._authorized(request):
            return _error(401, "authentication_error", f"missing or wrong {KEY_HEADER} header")
        self.metrics.sessions.set(len(self.gateway.store))
        return Response(self.metrics.render(), media_type=CONTENT_TYPE)

    async def savings(self, request: Request) -> Response:
        """The caller's own tenant (same key, same tenant header) and its sessions; nobody else's."""
        if not self._authorized(request):
            return _error(401, "authentication_error", f"missing or wrong {KEY_HEADER} header")
        headers = {k.lower(): v for k, v in request.headers.items()}
        tenant = identify(self.gateway.secret, Api.OTHER, headers, {}).tenant
        state = await self._off_loop(self.gateway.store.peek_tenant, tenant)
        sessions = await self._off_loop(
            self.gateway.store.sessions_of, tenant, self.config.max_sessions_per_tenant_report
        )
        return JSONResponse(
            {
                "tenant": tenant,
                "totals": state.report() if state is not None else None,
                "sessions": [{"session": s.session, **s.report()} for s in sessions],
            }
        )

    async def proxy(self, request: Request) -> Response:
        if not self._authorized(request):
            return _error(401, "authentication_error", f"missing or wrong {KEY_HEADER} header")
        api = api_of(request.url.path) if request.method == "POST" else Api.OTHER
        try:
            raw = await self._body(request)
        except _TooLarge:
            self.metrics.requests.labels(api.value, "too_large").inc()
            return _error(413, "request_too_large", f"request body over {self.config.max_body_bytes} bytes")
        except (asyncio.TimeoutError, ClientDisconnect):
            self.metrics.requests.labels(api.value, "body_timeout").inc()
            return _error(408, "request_timeout", f"request body not received within {self.config.body_timeout_s} s")
        headers = {k.lower(): v for k, v in request.headers.items()}
        incoming, found = await self._memories(api, headers, raw)
        started = time.perf_counter()
        if len(raw) > _INLINE_PLAN_BYTES or self.gateway.store.remote:  # nor may a big body or a shared store
            plan = await asyncio.to_thread(self.gateway.plan, api, headers, raw, found, incoming)
        else:
            plan = self.gateway.plan(api, headers, raw, found, incoming)
        self.metrics.overhead.labels(api.value).observe(time.perf_counter() - started)
        self._count_plan(plan)
        if found is not None and plan.memories is None and self.mem0 is not None:  # not placed (failed open, ...)
            self.mem0.sent(found, False)
        return await self._forward(request, plan)

    async def _memories(self, api: Api, headers: dict[str, str], raw: bytes) -> tuple[Incoming | None, Memories | None]:
        """The request as read once (for the plan too) and its mem0 search (a store configured, a user named);
        (None, None) without mem0; never raises."""
        if self.mem0 is None or api is Api.OTHER:
            return None, None

        def query() -> tuple[Incoming, MemoryQuery | None]:
            incoming = self.gateway.read(api, headers, raw)
            return incoming, self.gateway.memory_query(api, headers, raw, incoming)

        if len(raw) > _INLINE_PLAN_BYTES or self.gateway.store.remote:  # it reads the session's sent log
            incoming, found = await asyncio.to_thread(query)
        else:
            incoming, found = query()
        return incoming, (await self.mem0.search(found) if found is not None else None)

    def _settle(self, plan: Plan, ok: bool, answer: bytes | None = None, streamed: bool = False) -> None:
        """The memories' dedup turn committed (``ok``) or rolled back; the answered turn queued for mem0."""
        if self.mem0 is None or plan.memories is None:
            return
        self.mem0.sent(plan.memories, ok and plan.placement is not PlacementMode.FRESH)  # fresh: shown, not kept
        if ok and answer is not None:
            self.mem0.add_turn(plan.memories.query, answer_text(plan.api, answer, streamed))

    def _count_plan(self, plan: Plan) -> None:
        if plan.failed_open:
            self.metrics.fail_open.inc()
        self.metrics.replayed.inc(plan.replayed)
        self.metrics.rewritten.inc(plan.rewritten)
        for where in plan.marks:
            self.metrics.marks.labels(where).inc()
        for name in plan.fields:
            self.metrics.fields.labels(name).inc()
        if plan.placement is not None:
            self.metrics.placements.labels(plan.placement.value).inc()
        self.metrics.content_rewrites.inc(plan.content_rewrites)
        self.metrics.content_pointers.inc(plan.content_pointers)

    # ------------------------------------------------------------------ forwarding
    async def _forward(self, request: Request, plan: Plan) -> Response:
        raw_headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in request.headers.raw]
        try:
            answer = await self.upstream.send(
                request.method, _target(request), request_headers(raw_headers), plan.content
            )
        except UpstreamTimeout as exc:
            self._settle(plan, False)
            self.metrics.requests.labels(plan.api.value, "upstream_timeout").inc()
            return _error(504, "upstream_timeout", f"the upstream did not answer in time ({exc})")
        except UpstreamUnreachable as exc:
            self._settle(plan, False)
            self.metrics.requests.labels(plan.api.value, "upstream_unreachable").inc()
            return _error(502, "upstream_unreachable", f"cannot reach the upstream: {exc}")
        self.metrics.upstream_status.labels(plan.api.value, f"{answer.status_code // 100}xx").inc()
        if answer.is_success:
            await self._off_loop(self.gateway.commit, plan)
        else:
            self._settle(plan, False)
        if answer.headers.get("content-type", "").startswith("text/event-stream"):
            return self._stream(plan, answer)
        return await self._whole(plan, answer)

    async def _whole(self, plan: Plan, answer: Answer) -> Response:
        try:
            data = await self._read_capped(answer)
        except UpstreamBroken as exc:
            self._settle(plan, False)
            self.metrics.requests.labels(plan.api.value, "upstream_broken").inc()
            return _error(502, "upstream_broken", f"the upstream's answer broke off: {exc}")
        finally:
            await answer.aclose()
        if answer.is_success:
            self._settle(plan, data is not None, data)
        if data is None:
            return _error(
                502, "upstream_too_large", f"the upstream's answer exceeds {self.config.max_response_bytes} bytes"
            )
        headers = response_headers(answer.headers)
        if plan.api is not Api.OTHER and answer.is_success:
            usage = body_usage(data)
            gateway = await self._book(plan, usage)
            headers.update(_usage_headers(usage, gateway, plan))
        self.metrics.requests.labels(plan.api.value, "ok" if answer.is_success else "upstream_error").inc()
        return Response(data, status_code=answer.status_code, headers=headers)

    async def _read_capped(self, answer: Answer) -> bytes | None:
        chunks: list[bytes] = []
        size = 0
        async for chunk in answer.chunks():
            size += len(chunk)
            if size > self.config.max_response_bytes:
                return None
            chunks.append(chunk)
        return b"".join(chunks)

    def _stream(self, plan: Plan, answer: Answer) -> StreamingResponse:
        tap = SSETap(self.config.max_sse_event_bytes)
        kept = _Kept(self.config.max_sse_event_bytes if plan.memories is not None and answer.is_success else 0)

        async def relay() -> AsyncIterator[bytes]:
            outcome = "ok" if answer.is_success else "upstream_error"
            try:
                async for chunk in answer.chunks():
                    tap.feed(chunk)
                    kept.feed(chunk)
                    yield chunk
            except UpstreamBroken as exc:  # the status is sent already: the stream ends early
                outcome = "upstream_broken"
                logger.warning("gateway: the upstream stream broke off: %s", exc)
            except BaseException:
                outcome = "client_gone"
                raise
            finally:
                await answer.aclose()
                tap.close()
                if plan.api is not Api.OTHER and answer.is_success:
                    await self._book(plan, tap.usage)
                    self._settle(plan, outcome == "ok", kept.data(), streamed=True)
                self.metrics.requests.labels(plan.api.value, outcome).inc()

        return StreamingResponse(
            relay(),
            status_code=answer.status_code,
            headers=response_headers(answer.headers),
            background=BackgroundTask(answer.aclose),
        )

    async def _off_loop(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)``; in a worker thread when the sessions live in a shared store (it waits on Redis)."""
        if self.gateway.store.remote:
            return await asyncio.to_thread(fn, *args)
        return fn(*args)

    async def _book(self, plan: Plan, usage: Any) -> int:
        gateway = await self._off_loop(self.gateway.record, plan, usage)
        self.metrics.usage(usage, gateway)
        return gateway


class _Kept:
    """A streamed answer's first ``limit`` bytes, kept for the turn added to mem0 (0: nothing kept)."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.chunks: list[bytes] = []
        self.size = 0

    def feed(self, chunk: bytes) -> None:
        if self.size < self.limit:
            self.chunks.append(chunk)
            self.size += len(chunk)

    def data(self) -> bytes:
        return b"".join(self.chunks)


def _target(request: Request) -> str:
    """The path and query as the client wrote them (percent-encoding kept), for the upstream."""
    raw = request.scope.get("raw_path")
    path = raw.decode("latin-1") if raw else quote(request.url.path)
    query = request.scope.get("query_string", b"").decode("latin-1")
    return f"{path}?{query}" if query else path


def _usage_headers(usage: Any, gateway: int, plan: Plan) -> dict[str, str]:
    """The ``X-CP-*`` headers of a non-streamed answer: what the upstream reported, and the gateway's share."""
    out = {
        "x-cp-input-tokens": str(usage.input_tokens),
        "x-cp-cache-read-tokens": str(usage.cache_read_tokens),
        "x-cp-cache-write-tokens": str(usage.cache_write_tokens),
        "x-cp-cached-by-gateway-tokens": str(gateway),
        "x-cp-replayed-segments": str(plan.replayed),
    }
    if plan.identity is not None:
        out["x-cp-session"] = plan.identity.session
    return out


def build_app(config: GatewayConfig, kind: UpstreamKind | None = None, *, memory: Any = None) -> Starlette:
    """The gateway as an ASGI app; ``kind`` is the resolved upstream kind (default: the configured one, with
    ``auto`` resolved from the URL only — :func:`cp_memory.gateway.detect.detect_kind` probes it).
    ``memory``: a ready mem0 store (a :class:`~cp_memory.memory.wrappers.ContextPilotMemory`) for
    ``config.mem0`` other than ``off``, instead of opening the configured one."""
    from .detect import kind_from_url

    resolved = kind or (
        config.upstream_kind if config.upstream_kind is not UpstreamKind.AUTO else kind_from_url(config.upstream)
    )
    handlers = _App(config, resolved, memory)
    routes = [
        Route("/metrics", handlers.metrics_page, methods=["GET"]),
        Route("/cp/health", handlers.health, methods=["GET"]),
        Route("/cp/savings", handlers.savings, methods=["GET"]),
        Route("/{path:path}", handlers.proxy, methods=["GET", "POST", "PUT", "PATCH", "DELETE", "HEAD", "OPTIONS"]),
    ]
    app = Starlette(routes=routes, lifespan=handlers.lifespan)
    app.state.gateway = handlers.gateway
    app.state.metrics = handlers.metrics
    app.state.mem0 = handlers.mem0
    return app
