"""Real Claude Code sessions replayed at their recorded concurrency, directly and through the gateway (issue 31).

The committed ``..._concurrent`` trace holds four Claude Code sessions recorded at once, each request with the
time it reached the scripted server and the time its answer ended. Each session's first two turns go to the
local modelled Anthropic rules server (``benchmarks.hosted.server``) through the recording tap, at the
recorded concurrency ten times faster (the sessions side by side, each turn after its own session's answer):
once straight (passthrough), once through the gateway, each on a fresh modelled cache. The gateway keeps every
byte it sent before, Claude Code's own re-rendering does not, and the gateway never prefills more.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from functools import partial
from typing import Any

import pytest

from benchmarks.agents.arms import Arm
from benchmarks.agents.bench import CONCURRENT_TRACES
from benchmarks.agents.replay import Attribution, Sent, edit_body, replay_arm, stability
from benchmarks.agents.schedule import Concurrency
from benchmarks.agents.tap import Tap
from benchmarks.agents.trace import has_timings, load_trace, session_of

from .conftest import running_gateway

TRACE = CONCURRENT_TRACES[0]  # Claude Code's
SPEED = 10.0


def first_turns(per_session: int) -> list[dict[str, Any]]:
    """Every session's first ``per_session`` requests, in recorded order (timing kept)."""
    seen: dict[str, int] = {}
    out = []
    for record in load_trace(TRACE):
        session = session_of(record)
        seen[session] = seen.get(session, 0) + 1
        if seen[session] <= per_session:
            out.append(record)
    return out


@pytest.fixture()
def modelled() -> Iterator[Any]:
    from benchmarks.hosted.server import ProviderServer

    with ProviderServer() as server:
        yield server


def replay(
    server: Any, records: Sequence[Mapping[str, Any]], run: str, gateway: bool
) -> tuple[list[Sent], list[Any], Attribution]:
    edit = partial(edit_body, model=None, max_tokens=4)
    with Tap(server.url, headers={"x-bench-run": run}) as tap:
        if not gateway:
            return replay_arm(
                Arm("passthrough", tap.url), records, tap, edit=edit, concurrency=Concurrency.RECORDED, speed=SPEED
            )
        with running_gateway(tap.url, "anthropic") as running:
            return replay_arm(
                Arm("gateway", running.url), records, tap, edit=edit, concurrency=Concurrency.RECORDED, speed=SPEED
            )


def test_claude_code_sessions_at_their_recorded_concurrency_through_the_gateway(modelled: Any) -> None:
    records = first_turns(2)
    assert has_timings(records) and len({session_of(r) for r in records}) == 4 and len(records) == 8
    direct, direct_sent, direct_how = replay(modelled, records, "passthrough", gateway=False)
    through, through_sent, through_how = replay(modelled, records, "gateway", gateway=True)
    assert all(r.status == 200 and r.upstream_calls == 1 for r in direct + through)
    assert direct_how == through_how == Attribution(0, 0)  # every upstream call found its request
    for rows in (direct, through):  # a session's second turn went out after its first was answered
        first = {}
        for row in rows:
            if row.session in first:
                assert row.sent_s is not None and row.sent_s >= first[row.session]
            else:
                first[row.session] = row.answered_s
    # Claude Code re-renders its history on every session's second turn; the gateway keeps every byte
    seconds = [i for i, r in enumerate(records) if any(session_of(q) == session_of(r) for q in records[:i])]
    assert [i for i, v in enumerate(stability(records, direct_sent)) if v is not None] == seconds
    assert stability(records, through_sent) == [None] * len(records)
    assert sum(r.prefilled_tokens for r in through) <= sum(r.prefilled_tokens for r in direct)
