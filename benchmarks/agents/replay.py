"""Replaying a recorded trace through an arm, request by request, and what each arm sent and cost.

The replay sends each request of a trace (:mod:`benchmarks.agents.trace`) to an arm
(:mod:`benchmarks.agents.arms`) in front of the recording :class:`~benchmarks.agents.tap.Tap`, either one at a
time in recorded order (``seq``: the sessions interleaved as they ran) or at the recorded concurrency (the
sessions side by side, each request after its own session's earlier turns were answered, at its recorded offset
and think time: :mod:`benchmarks.agents.schedule`). The body is the client's own, with two edits made for every
arm alike (:func:`edit_body`): the model the engine serves and a small output cap; the answers the arm gets are
dropped, since the next request already holds the recorded answer, so every arm sees the same conversation.

Per request (:class:`Sent`): the prompt tokens, cached (read) and written tokens as the engine reported them
on the tap, the prefilled tokens (prompt - read), the time to the first byte through the arm, when it went out
and was answered, and whether the bytes the arm sent upstream kept its earlier prefix (:func:`stability`).
What reached the tap is matched to the request it serves by time (:func:`attribute`): a call belongs to the
request in flight when it arrived; where several were, to the one of the same session (the arm's session
header, Claude Code's ``metadata.user_id``, Codex's ``prompt_cache_key``, else the opening of its first user
message where none of them names the call's session: OpenClaw names none, and the gateway adds a
``prompt_cache_key`` of its own); a call still ambiguous goes to the earliest of them and is counted.
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import httpx

from benchmarks.agents.arms import Arm
from benchmarks.agents.schedule import Concurrency, Window, run_slots, slots_for
from benchmarks.agents.tap import Tap, Tapped
from benchmarks.agents.trace import SCRUBBED, opening_of, session_of, strip_marks
from cp_memory.gateway.protocols import Api, api_of
from cp_memory.providers.account import call_cost
from cp_memory.providers.rules import ANTHROPIC_PRICES, PriceRatios, openai_prices
from cp_memory.providers.usage import CacheUsage

__all__ = [
    "MODELLED_OPENAI_MODEL",
    "Attribution",
    "Sent",
    "attribute",
    "client_headers",
    "edit_body",
    "prices_for",
    "replay_arm",
    "stability",
]

log = logging.getLogger(__name__)

#: the OpenAI model whose list-price ratios price a replayed OpenAI trace (its recorded model is the scripted
#: server's name): the GPT-5 family's, cached reads 0.1x, writes free
MODELLED_OPENAI_MODEL = "gpt-5"

#: trace headers not sent again (recomputed by the client library, or hop-by-hop)
_DROP = frozenset({"content-length", "connection", "accept-encoding", "transfer-encoding"})


@dataclass(frozen=True)
class Sent:
    """One replayed request through one arm."""

    seq: int
    session: str
    status: int
    prompt_tokens: int
    cache_read_tokens: int
    cache_write_tokens: int
    cost: float
    ttft_s: float | None
    upstream_calls: int
    breaks_at: int | None = None  # None: byte-stable; -1: the head (model/system/tools) changed; i: item i
    sent_s: float | None = None  # when it went out, seconds since the arm's replay started
    answered_s: float | None = None  # when its answer was read whole, same clock

    @property
    def prefilled_tokens(self) -> int:
        """Prompt tokens the engine computed (not read from its cache)."""
        return max(0, self.prompt_tokens - self.cache_read_tokens)


#: The output caps a recorded body may carry, per protocol: Responses' ``max_output_tokens``; Chat's
#: ``max_completion_tokens`` (which vLLM and llama-server both read before ``max_tokens``) and ``max_tokens``;
#: Messages' ``max_tokens``.
OUTPUT_CAPS = ("max_output_tokens", "max_completion_tokens", "max_tokens")


def edit_body(body: Mapping[str, Any], *, model: str | None, max_tokens: int) -> dict[str, Any]:
    """The recorded body with the engine's ``model`` (None: as recorded) and the output capped at
    ``max_tokens``; nothing else. Every cap the body already carries is set (OpenClaw sends Chat's
    ``max_completion_tokens: 8192``, which the engines read before ``max_tokens``: capping ``max_tokens`` alone
    let a random-weight model decode 8,192 tokens a request); a body with none gets its protocol's
    (``max_output_tokens`` for Responses, ``max_tokens`` for Messages and Chat)."""
    out = dict(body)
    if model is not None:
        out["model"] = model
    caps = [cap for cap in OUTPUT_CAPS if cap in out]
    if not caps:
        caps = ["max_output_tokens" if "input" in out and "messages" not in out else "max_tokens"]
    for cap in caps:
        out[cap] = max_tokens
    return out


def prices_for(protocol: str | None) -> PriceRatios:
    """The price ratios a trace's modelled cost is counted in: Anthropic's for an Anthropic trace, the OpenAI
    :data:`MODELLED_OPENAI_MODEL`'s for any other."""
    return ANTHROPIC_PRICES if protocol == "anthropic" else openai_prices(MODELLED_OPENAI_MODEL)[0]


def client_headers(recorded: Mapping[str, str], arm: Arm) -> dict[str, str]:
    """The recorded headers as the replay sends them to ``arm`` (placeholder keys, the arm's own added)."""
    out = {k: ("sk-replay-placeholder" if v == SCRUBBED else v) for k, v in recorded.items() if k not in _DROP}
    if recorded.get("authorization") == SCRUBBED:
        out["authorization"] = "Bearer sk-replay-placeholder"
    return out | {"content-type": "application/json"} | arm.headers


def _send(client: httpx.Client, arm: Arm, record: Mapping[str, Any], data: bytes) -> tuple[int, float | None]:
    t0 = time.perf_counter()
    first: float | None = None
    headers = client_headers(record.get("headers") or {}, arm)
    with client.stream("POST", arm.url + str(record["path"]), content=data, headers=headers) as answer:
        for chunk in answer.iter_raw():
            if first is None and chunk:
                first = time.perf_counter() - t0
        if answer.status_code >= 400:
            log.warning("%s: request %s answered %d", arm.name, record.get("seq"), answer.status_code)
        return answer.status_code, first


def _generation(tapped: Sequence[Tapped]) -> list[Tapped]:
    return [t for t in tapped if t.method == "POST" and api_of(t.path.split("?", 1)[0]) is not Api.OTHER]


def _usage(calls: Sequence[Tapped]) -> CacheUsage:
    total = CacheUsage()
    for call in calls:
        total = total + call.usage
    return total


@dataclass(frozen=True)
class Attribution:
    """How the tap's calls were matched to requests: ``ambiguous`` went to the earliest of several requests in
    flight (neither time nor session told them apart), ``unmatched`` arrived while no request was."""

    ambiguous: int = 0
    unmatched: int = 0


def attribute(
    records: Sequence[Mapping[str, Any]], windows: Sequence[Window], calls: Sequence[Tapped]
) -> tuple[list[list[Tapped]], Attribution]:
    """Each request's upstream calls (see the module docstring), in the order given, and how the matching
    went."""
    out: list[list[Tapped]] = [[] for _ in records]
    ambiguous = unmatched = 0
    for call in calls:
        live = [w for w in windows if w.sent <= call.arrived <= w.answered]
        if len(live) > 1:
            body = call.json()
            seen = {"headers": call.headers, "body": body if isinstance(body, dict) else {}}
            session, opening = session_of(seen), opening_of(seen)
            # the session first; the opening only where no request in flight names the call's session (an
            # arm's own id), since one harness may open every conversation with the same words
            live = (
                [w for w in live if session_of(records[w.index]) == session]
                or [w for w in live if opening is not None and opening_of(records[w.index]) == opening]
                or live
            )
            ambiguous += len(live) > 1
        if not live:
            unmatched += 1
            continue
        out[min(live, key=lambda w: w.sent).index].append(call)
    return out, Attribution(ambiguous, unmatched)


def replay_arm(
    arm: Arm,
    records: Sequence[Mapping[str, Any]],
    tap: Tap,
    *,
    edit: Callable[[Mapping[str, Any]], dict[str, Any]],
    timeout: float = 900,
    concurrency: Concurrency = Concurrency.SERIAL,
    speed: float = 1.0,
) -> tuple[list[Sent], list[Any], Attribution]:
    """Send ``records`` through ``arm``, one at a time in order or at their recorded ``concurrency``
    (:mod:`benchmarks.agents.schedule`; ``speed``: :func:`~benchmarks.agents.schedule.slots_for`'s); returns each
    request's :class:`Sent` (stability not yet checked), the body the arm sent upstream for it (None where
    nothing reached the engine), in record order, and how the tap's calls were matched to requests
    (:func:`attribute`)."""
    tap.wait_idle()
    tap.take()
    answers: dict[int, tuple[int, float | None]] = {}
    with httpx.Client(timeout=timeout) as client:

        def send(i: int) -> None:
            data = json.dumps(edit(records[i]["body"]), ensure_ascii=False).encode()
            answers[i] = _send(client, arm, records[i], data)

        windows = run_slots(slots_for(records, concurrency, speed=speed), send)
    if not tap.wait_idle():
        log.warning("%s: the tap still forwards a request after the replay", arm.name)
    matched, how = attribute(records, windows, _generation(tap.take()))
    if how.ambiguous or how.unmatched:
        log.warning("%s: %d upstream calls matched by guess, %d to no request", arm.name, how.ambiguous, how.unmatched)
    prices = prices_for(str(records[0].get("protocol")) if records else None)
    start = min((w.sent for w in windows), default=0.0)
    rows: list[Sent] = []
    for record, window, calls in zip(records, windows, matched, strict=True):
        usage = _usage(calls)
        status, ttft = answers[window.index]
        rows.append(
            Sent(
                seq=int(record["seq"]),
                session=session_of(record),
                status=status,
                prompt_tokens=usage.input_tokens,
                cache_read_tokens=usage.cache_read_tokens,
                cache_write_tokens=usage.cache_write_tokens,
                cost=call_cost(usage, prices),
                ttft_s=ttft,
                upstream_calls=len(calls),
                sent_s=round(window.sent - start, 4),
                answered_s=round(window.answered - start, 4),
            )
        )
    return rows, [calls[-1].json() if calls else None for calls in matched], how


def _head(body: Mapping[str, Any]) -> str:
    return json.dumps({k: strip_marks(body.get(k)) for k in ("model", "system", "instructions", "tools")})


def _items(body: Mapping[str, Any]) -> list[str]:
    raw = body.get("messages", body.get("input"))
    items = raw if isinstance(raw, list) else [raw]
    return [json.dumps(strip_marks(m), ensure_ascii=False) for m in items]


def stability(records: Sequence[Mapping[str, Any]], sent: Sequence[Any]) -> list[int | None]:
    """Per request: None when the body the arm sent upstream starts with what it sent for the previous request
    of the same conversation (same session and recorded head: system, tools, model), marks aside; else where
    it first differs (-1: the head itself, i: item i). A conversation that shrank (compaction) starts over."""
    last: dict[tuple[str, str], Mapping[str, Any]] = {}
    out: list[int | None] = []
    for record, body in zip(records, sent, strict=True):
        key = (session_of(record), _head(record["body"]))
        before = last.get(key)
        verdict: int | None = None
        if isinstance(body, dict) and isinstance(before, dict):
            now, then = _items(body), _items(before)
            if _head(body) != _head(before):
                verdict = -1
            elif len(then) <= len(now):
                verdict = next((i for i, (a, b) in enumerate(zip(then, now, strict=False)) if a != b), None)
        if isinstance(body, dict):
            last[key] = body
        out.append(verdict)
    return out
