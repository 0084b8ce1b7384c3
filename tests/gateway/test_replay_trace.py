"""A real Claude Code session, replayed on a real engine, directly and through the gateway (issue 31).

The committed trace of Claude Code 2.1.328 (``traces/``) holds its requests as the harness sent them. Its
first session's first three requests go to a llama-server (random-weight model, one slot, prompt cache on)
through the recording tap of ``benchmarks.agents`` — once straight (passthrough), once through the gateway —
each time on an emptied cache. Claude Code re-renders its history (the ``system``-role message inside
``messages`` comes back as a plain string on its next turn), so passthrough's second request changes a prefix it
sent before; the gateway sends that prefix again exactly as it did, and the engine's own counts show it never
prefills more than passthrough.
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial
from pathlib import Path
from typing import Any

import pytest

from benchmarks.agents.arms import Arm
from benchmarks.agents.replay import Sent, edit_body, replay_arm, stability
from benchmarks.agents.tap import Tap
from benchmarks.agents.trace import load_trace, session_of

from .conftest import running_gateway

pytestmark = pytest.mark.engine
TRACE = Path(__file__).with_name("traces") / "claude_code_2.1.328_docs_code.jsonl.xz"
TEMPLATE = Path(__file__).with_name("chatml_tools.jinja")


def first_session(n: int) -> list[dict[str, Any]]:
    records = load_trace(TRACE)
    session = session_of(records[0])
    return [r for r in records if session_of(r) == session][:n]


@pytest.fixture(scope="module")
def llama(random_model: Path) -> Iterator[Any]:
    from cp_memory.engine import LlamaServer

    extra = ["--jinja", "--chat-template-file", str(TEMPLATE)]
    with LlamaServer(random_model, slots=1, ctx_size=8192, cache_ram_mib=256, extra_args=extra) as server:
        yield server


def replay(llama: Any, records: list[dict[str, Any]], through_gateway: bool) -> tuple[list[Sent], list[Any]]:
    llama.flush_cache()
    edit = partial(edit_body, model="replay", max_tokens=4)
    with Tap(llama.base_url) as tap:
        if not through_gateway:
            rows, sent, _ = replay_arm(Arm("passthrough", tap.url), records, tap, edit=edit)
            return rows, sent
        with running_gateway(tap.url, "llamacpp") as gateway:
            rows, sent, _ = replay_arm(Arm("gateway", gateway.url), records, tap, edit=edit)
            return rows, sent


def test_a_claude_code_session_through_the_gateway_never_prefills_more(llama: Any) -> None:
    records = first_session(3)
    assert [r["seq"] for r in records] == [0, 4, 5]
    direct, direct_sent = replay(llama, records, through_gateway=False)
    through, through_sent = replay(llama, records, through_gateway=True)
    assert all(r.status == 200 and r.upstream_calls == 1 for r in direct + through)
    print(
        "prefilled tokens per request, passthrough:",
        [r.prefilled_tokens for r in direct],
        "gateway:",
        [r.prefilled_tokens for r in through],
    )
    # the same prompts reach the engine (the gateway only re-sends earlier bytes as they were)
    assert [r.prompt_tokens for r in through] == pytest.approx([r.prompt_tokens for r in direct], rel=0.02)
    for d, g in zip(direct, through, strict=True):
        assert g.prefilled_tokens <= d.prefilled_tokens, (d, g)
    # Claude Code's own re-rendering shows on passthrough's second request; the gateway keeps every byte
    assert stability(records, direct_sent)[1] is not None
    assert stability(records, through_sent) == [None, None, None]
