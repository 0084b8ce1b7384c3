"""The bytes the gateway forwards for every committed trace, fenced: each request of each trace in
``tests/gateway/traces`` goes through the gateway's I/O-free flow (plan, then commit, in recorded order, as
if every request was answered), in front of the trace's provider (Anthropic for Messages, OpenAI for Chat
Completions and Responses) and of vLLM, and the SHA-256 of every forwarded body must equal the one in
``forwarded.json``. A refactor of the hot path (issue 42) must leave them all unchanged; a change to what the
gateway forwards on purpose rewrites the file, and its diff names the requests that changed::

    python -m tests.gateway.test_trace_bytes --write
"""

from __future__ import annotations

import argparse
import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from benchmarks.agents.trace import load_trace
from cp_memory.gateway.config import GatewayConfig, UpstreamKind
from cp_memory.gateway.flow import Gateway
from cp_memory.gateway.protocols import Api, api_of

TRACES = Path(__file__).resolve().parent / "traces"
DIGESTS = TRACES / "forwarded.json"
#: a fixed secret, so the keys and salts the gateway adds are the same on every run
SECRET = "trace-bytes-secret-0123456789"
KINDS = ("provider", "vllm")


def _kind(api: Api, which: str) -> UpstreamKind:
    if which == "vllm":
        return UpstreamKind.VLLM
    return UpstreamKind.ANTHROPIC if api is Api.MESSAGES else UpstreamKind.OPENAI


def _api(record: dict[str, Any]) -> Api:
    return api_of(str(record.get("path", "")).split("?", 1)[0])


def forwarded(trace: Path, which: str) -> list[str]:
    """The first 16 hex digits of the SHA-256 of each body the gateway forwards for ``trace``."""
    records = [r for r in load_trace(trace) if _api(r) is not Api.OTHER]
    gateways: dict[UpstreamKind, Gateway] = {}
    out = []
    for record in records:
        api = _api(record)
        kind = _kind(api, which)
        gateway = gateways.get(kind)
        if gateway is None:
            gateway = gateways[kind] = Gateway(GatewayConfig(upstream="http://127.0.0.1:9", secret=SECRET), kind)
        raw = json.dumps(record["body"], ensure_ascii=False).encode("utf-8")
        plan = gateway.plan(api, record.get("headers") or {}, raw, None)
        assert not plan.failed_open, f"{trace.name}: request {len(out)} failed open"
        gateway.commit(plan)
        out.append(hashlib.sha256(plan.content if plan.content is not None else raw).hexdigest()[:16])
    return out


def _traces() -> list[Path]:
    return sorted(TRACES.glob("*.jsonl.xz"))


def all_digests() -> dict[str, Any]:
    return {t.name: {which: forwarded(t, which) for which in KINDS} for t in _traces()}


@pytest.mark.parametrize("trace", _traces(), ids=lambda p: p.name.split(".jsonl")[0])
def test_the_gateway_forwards_the_same_bytes_for_every_committed_trace(trace: Path) -> None:
    expected = json.loads(DIGESTS.read_text())[trace.name]
    for which in KINDS:
        got = forwarded(trace, which)
        changed = [i for i, (a, b) in enumerate(zip(got, expected[which], strict=False)) if a != b]
        assert len(got) == len(expected[which]) and not changed, (
            f"{trace.name} ({which}): requests {changed[:10]} forward other bytes than forwarded.json records "
            "(a change on purpose: python -m tests.gateway.test_trace_bytes --write)"
        )


def test_every_committed_trace_is_fenced() -> None:
    assert sorted(json.loads(DIGESTS.read_text())) == [t.name for t in _traces()]


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="rewrite forwarded.json from the current gateway")
    if parser.parse_args().write:
        DIGESTS.write_text(json.dumps(all_digests(), indent=1) + "\n")
