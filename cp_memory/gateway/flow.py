"""One request through the gateway, without I/O: plan what to send, then record what the upstream reported.

:meth:`Gateway.plan` takes the client's raw body and returns a :class:`Plan`: the bytes to forward (the
client's own bytes, unchanged, whenever the gateway changes nothing), the tenant and session, what prefix
replay and the provider rules did. Any internal failure there is logged and gives the client's original
bytes (fail open). :meth:`Gateway.record` books the usage the upstream reported into the session's and the
tenant's :class:`~cp_memory.providers.account.SavingsAccount`, with the attribution: tokens cached beyond what
passthrough could have kept cached (before the first re-rendered segment, up to the client's last
Anthropic mark) are the gateway's.
"""

from __future__ import annotations

import logging
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ..providers.tokens import Counting, default_counting
from ..providers.usage import CacheUsage
from .codec import decode, encode
from .config import GatewayConfig, UpstreamKind
from .content import ContentResult, PendingContent, effective_steps, new_part_start, run_content
from .memories import Memories, MemoryQuery, MemoryStage, PlacementMode, leaf_text
from .protocols import Api, segments, with_segments
from .replay import ReplayResult, SegmentMemo, SentLog, replay
from .rules import RuleResult, apply_rules
from .schema import schema_enabled, strip_tools
from .sessions import SessionChange, SessionState, SessionStore
from .tenancy import Identity, identify

__all__ = ["Gateway", "Incoming", "Plan", "open_session_store"]

logger = logging.getLogger(__name__)


def open_session_store(config: GatewayConfig) -> SessionStore:
    """The sessions ``config.state_store`` names: this process's (None, the default) or Redis (imported only
    then: the ``redis`` extra)."""
    if config.state_store is None:
        return SessionStore(config.max_sessions, config.session_ttl_s, config.max_tenants)
    from .shared_sessions import SharedSessionStore

    return SharedSessionStore(config)


@dataclass(frozen=True)
class Loaded:
    """The session as a request loaded it (once: a round trip with a shared store), its sent log for the
    request's protocol then (None: none, or replay off) and the mem0 epoch its memory query used (None: no
    query). A log committed after the load by a concurrent request of the session is not seen: replay then
    matches an older request's bytes, which went out as well."""

    session: SessionState
    log: SentLog | None
    epoch: str | None = None


@dataclass
class Incoming:
    """One request as the gateway reads it, once: the raw bytes, the parsed body (None, with ``note`` saying
    why, when it is not a JSON object) and who sent it; the mem0 stage's query and the plan both read it and
    neither changes the body (the plan's stages copy what they change). ``loaded``: the session as the first of
    them loaded it, for the other."""

    api: Api
    raw: bytes
    body: dict[str, Any] | None = None
    identity: Identity | None = None
    note: str | None = None
    #: every number in the body is one the fast encoder writes as the standard library does (:mod:`.codec`)
    plain: bool = False
    loaded: Loaded | None = field(default=None, compare=False)


@dataclass
class Plan:
    """What to forward for one request and what to remember once it went out."""

    api: Api
    content: bytes
    original: bytes
    identity: Identity | None = None
    changed: bool = False
    failed_open: bool = False
    log: SentLog | None = None
    replayed: int = 0
    rewritten: int = 0
    passthrough_bound: int | None = None  # prompt tokens passthrough could at most have had cached
    marks: tuple[str, ...] = ()
    fields: tuple[str, ...] = ()
    stream: bool = False
    notes: list[str] = field(default_factory=list)
    memories: Memories | None = None  # the mem0 memories placed (commit their turn once the upstream answered)
    placement: PlacementMode | None = None  # how they were placed (``fresh``: roll their dedup turn back)
    content_pending: PendingContent | None = None  # the content stage's registrations, committed with the log
    content_pointers: int = 0
    content_rewrites: int = 0  # segments the content rules rewrote in this request
    session: SessionState | None = None  # the session as the request loaded it (commit and record use it)
    epoch: str | None = None  # the mem0 epoch the request's memory query used


def _blocks_before(api: Api, segs: list[Any], n_head: int, upto: int) -> int:
    """Anthropic: the number of prefix-order blocks in segments ``0..upto-1`` (tools, system, messages)."""
    count = 0
    for i, seg in enumerate(segs[:upto]):
        if i < n_head:
            count += len(seg) if isinstance(seg, list) else (1 if isinstance(seg, str) and seg else 0)
        else:
            content = seg.get("content") if isinstance(seg, Mapping) else None
            count += len(content) if isinstance(content, list) else 1
    return count


class Gateway:
    """The gateway's state and its I/O-free flow; the ASGI app (:mod:`cp_memory.gateway.app`) drives it."""

    def __init__(self, config: GatewayConfig, kind: UpstreamKind, *, counting: Counting | None = None) -> None:
        self.config = config
        self.kind = kind
        given = config.secret.get_secret_value().encode() if config.secret is not None else b""
        self.secret = given or secrets.token_bytes(32)
        self.store: SessionStore = open_session_store(config)
        self.counting = counting or default_counting()
        self.segment_memo = SegmentMemo()  # replay's per-segment work, remembered across requests
        self.memory_stage = MemoryStage(
            query_turns=config.memories_query_turns,
            dedup=config.replay,
            kind=kind,
            counting=self.counting,
        )

    def identify(self, api: Api, headers: Mapping[str, str], body: Mapping[str, Any]) -> Identity:
        return identify(self.secret, api, headers, body)

    def read(self, api: Api, headers: Mapping[str, str], raw: bytes) -> Incoming:
        """The request parsed and identified, once (:class:`Incoming`); never raises (an identity that cannot
        be worked out is None: the plan then fails open and logs why)."""
        if api is Api.OTHER:
            return Incoming(api, raw)
        try:
            decoded = decode(raw)
        except (ValueError, UnicodeDecodeError):
            return Incoming(api, raw, note="not JSON: forwarded as sent")
        body = decoded.value
        if not isinstance(body, dict):
            return Incoming(api, raw, note="not a JSON object: forwarded as sent")
        try:
            identity = self.identify(api, headers, body)
        except Exception:
            logger.exception("gateway: identifying a %s request failed", api.value)
            identity = None
        return Incoming(api, raw, body, identity, plain=decoded.plain)

    def plan(
        self,
        api: Api,
        headers: Mapping[str, str],
        raw: bytes,
        memories: Memories | None = None,
        incoming: Incoming | None = None,
    ) -> Plan:
        """The bytes to forward; never raises (an internal failure forwards ``raw`` unchanged). ``memories``:
        what the app's mem0 search found for this request (:meth:`memory_query`), placed after the prefix;
        ``incoming``: the request as :meth:`read` gave it to the query (read here when not given)."""
        plan = Plan(api, raw, raw)
        if api is Api.OTHER:
            return plan
        if incoming is None or incoming.api is not api or incoming.raw is not raw:
            incoming = self.read(api, headers, raw)
        body = incoming.body
        if body is None:
            plan.notes.append(incoming.note or "no body: forwarded as sent")
            return plan
        plan.stream = body.get("stream") is True
        try:
            if incoming.identity is None:
                raise ValueError("the request's tenant and session could not be worked out")
            plan.identity = incoming.identity
            self._shape(plan, headers, incoming, memories)
        except Exception:  # fail open: the client's own request goes out, and a log line says why
            logger.exception("gateway: planning a %s request failed; forwarding it unchanged", api.value)
            plan.content, plan.changed, plan.failed_open, plan.log, plan.memories = raw, False, True, None, None
            plan.placement = None
        return plan

    def _shape(self, plan: Plan, headers: Mapping[str, str], incoming: Incoming, memories: Memories | None) -> None:
        api, body = plan.api, incoming.body
        assert plan.identity is not None and body is not None
        stripped = self._tool_schema(api, headers, body, plan.identity.tenant)
        body = stripped if stripped is not None else body
        loaded = self._load(incoming)
        state, log = loaded.session, loaded.log
        plan.session, plan.epoch = state, loaded.epoch
        segs, n_head = segments(api, body)
        texts = self.segment_memo.texts(segs, incoming.plain)  # once: the memo's keys for the digests and for replay
        client_digests = self.segment_memo.digests(api, segs, texts)  # once: replay and the sent log need them
        replayed = replay(api, log, segs, client_digests, self.segment_memo, texts, incoming.plain)
        content = self._content(plan, headers, state, segs, replayed, n_head, known=log is not None)
        if content is not None and content.changed:
            shaped = with_segments(api, body, content.segments, n_head)
        else:
            shaped = with_segments(api, body, replayed.segments, n_head) if replayed.substituted else body
        before = shaped
        placed, placement = None, None
        if memories is not None:
            shaped, placed, placement = self.memory_stage.place(api, shaped, memories, state.memories)
        previous_end = self._previous_end(api, log, replayed, n_head)
        rules = apply_rules(
            self.kind,
            api,
            shaped,
            secret=self.secret,
            tenant=plan.identity.tenant,
            session=plan.identity.session,
            previous_end=previous_end,
            counting=self.counting,
            add_marks=self.config.add_marks,
            key_shards=self.config.openai_key_shards,
        )
        if "over 4 marks" in rules.notes:  # the client's own request, unchanged: the API answers it
            plan.notes.append("more than 4 cache_control marks: forwarded as sent")
            return
        out = rules.body
        changed = content is not None and content.changed
        plan.changed = bool(
            replayed.substituted or rules.added or changed or placed is not None or stripped is not None
        )
        if plan.changed:
            plan.content = encode(out, incoming.plain)
        sent = segments(api, out)[0]
        if placement is PlacementMode.FRESH and placed is not None:  # not replayed: the next request has it without
            sent[placed] = segments(api, before)[0][placed]
            placed = None
        plan.log = self._sent_log(sent, client_digests, log, replayed.replayed, content, placed)
        plan.memories = memories if placement is not None else None
        plan.placement = placement
        plan.replayed, plan.rewritten = replayed.replayed, replayed.rewritten
        plan.marks = tuple(m.where for m in rules.marks)
        plan.fields = rules.added
        plan.passthrough_bound = self._bound(replayed, rules, segs)

    def _load(self, incoming: Incoming) -> Loaded:
        """The request's session, loaded once a request (the memory query's load when it made one)."""
        if incoming.loaded is None:
            assert incoming.identity is not None
            state = self.store.load(incoming.identity.tenant, incoming.identity.session)
            incoming.loaded = Loaded(state, state.logs.get(incoming.api) if self.config.replay else None)
        return incoming.loaded

    def _tool_schema(
        self, api: Api, headers: Mapping[str, str], body: dict[str, Any], tenant: str
    ) -> dict[str, Any] | None:
        """The body with its tools' meta keywords removed (:mod:`cp_memory.gateway.schema`); None: unchanged.
        Before replay and the rules, so the sent log and the marks see the tools as they go out."""
        on = self.config.tool_schema_tenants.get(tenant, self.config.tool_schema)
        if not schema_enabled(on, headers) or "tools" not in body:
            return None
        tools = strip_tools(api, body["tools"])
        return None if tools is body["tools"] else {**body, "tools": tools}

    def memory_query(
        self, api: Api, headers: Mapping[str, str], raw: bytes, incoming: Incoming | None = None
    ) -> MemoryQuery | None:
        """The mem0 search this request asks for (a user named, a new user message), or None; never raises.
        ``incoming``: the request as :meth:`read` gave it (read here when not given)."""
        try:
            if incoming is None or incoming.api is not api or incoming.raw is not raw:
                incoming = self.read(api, headers, raw)
            body, who = incoming.body, incoming.identity
            if body is None or who is None:
                return None
            loaded = self._load(incoming)
            found = self.memory_stage.query(api, headers, body, who, loaded.log, loaded.session.memories)
            if found is not None:
                incoming.loaded = Loaded(loaded.session, loaded.log, loaded.session.memories.epoch())
            return found
        except Exception:  # fail open: no memories
            logger.exception("gateway: reading the memory query of a %s request failed", api.value)
            return None

    def _content(
        self,
        plan: Plan,
        headers: Mapping[str, str],
        state: SessionState,
        segs: list[Any],
        replayed: ReplayResult,
        n_head: int,
        *,
        known: bool,
    ) -> ContentResult | None:
        """The content stage on replay's segments (None: off, or it failed and replay + rules go out);
        ``known``: the session has a sent log (the one replay read)."""
        assert plan.identity is not None
        tenant_steps = self.config.content_tenants.get(plan.identity.tenant, self.config.content_steps)
        steps = effective_steps(tenant_steps, headers)
        if not steps or not self.config.replay:  # without replay a rewrite would not come back next turn
            return None
        try:
            start = new_part_start(segs, n_head, replayed.replayed, known=known)
            result = run_content(plan.api, replayed.segments, n_head, start, state.content, steps, seed=not known)
            if len(result.segments) != len(segs):
                raise RuntimeError("the content stage changed the number of segments")
        except Exception:  # fall back to what replay + rules alone would send, and say why
            logger.exception("gateway: the content stage failed on a %s request; sending it without", plan.api.value)
            plan.notes.append("content stage failed: replay + rules only")
            return None
        plan.content_pending = result.pending or None
        plan.content_rewrites = len(result.changed)
        plan.content_pointers = result.pointers + result.chunk_pointers
        return result

    @staticmethod
    def _sent_log(
        sent: list[Any],
        client_digests: tuple[str, ...],
        log: SentLog | None,
        replayed: int,
        content: ContentResult | None,
        placed: int | None = None,
    ) -> SentLog:
        """The sent segments under the digests of the client's own: the same digests but where the content
        rules rewrote a segment (in this request or, replayed, in an earlier one), so that when the client
        sends its original text again, replay sends the rewritten one again (and does not count it as the
        client's re-rendering). The segment that carries new mem0 memories (``placed``) is one of them: the
        client's next copy (without memories) is replayed with them."""
        rewrites = {i for i in log.rewrites if i < replayed} if log is not None else set()
        rewrites.update(content.changed if content is not None else ())
        if placed is not None:
            rewrites.add(placed)
        return SentLog(tuple(sent), client_digests, frozenset(rewrites))

    def _previous_end(self, api: Api, log: SentLog | None, replayed: ReplayResult, n_head: int) -> int | None:
        """Anthropic: the last block of the previous request, when all of it is still this one's prefix."""
        if api is not Api.MESSAGES or log is None or not log.segments or replayed.replayed < len(log.segments):
            return None
        return _blocks_before(api, list(log.segments), n_head, len(log.segments)) - 1

    def _bound(self, replayed: ReplayResult, rules: RuleResult, segs: list[Any]) -> int | None:
        bounds: list[int] = []
        if replayed.first_rewritten is not None:
            bounds.append(self.counting.tokens(leaf_text(segs[: replayed.first_rewritten])))
        if rules.marks and rules.client_mark_tokens is not None:
            bounds.append(rules.client_mark_tokens)
        return min(bounds) if bounds else None

    def commit(self, plan: Plan) -> None:
        """The request went out (the upstream answered 2xx): its segments become the session's sent log, with
        its content registrations and memory placement (one :class:`~.sessions.SessionChange`, one write)."""
        if plan.identity is None or plan.log is None:
            return
        state = plan.session or self.store.session(plan.identity.tenant, plan.identity.session)
        cached = plan.placement is not None and self.memory_stage.settles_cached(plan.placement)
        self.store.commit(state, SessionChange(plan.api, plan.log, plan.content_pending, plan.epoch, cached))

    def record(self, plan: Plan, usage: CacheUsage) -> int:
        """Book ``usage`` for the plan's session and tenant; returns the tokens attributed to the gateway."""
        gateway = 0
        if plan.passthrough_bound is not None:
            gateway = max(0, usage.cache_read_tokens - plan.passthrough_bound)
        if plan.identity is None:
            return gateway
        state = plan.session or self.store.session(plan.identity.tenant, plan.identity.session)
        self.store.book(state, usage, gateway, plan.replayed, plan.rewritten)
        return gateway
