"""``python -m benchmarks.agents replay``'s parts without an engine: the byte-stability verdicts on the committed
traces, the body edits every arm gets alike, the recording tap in front of the scripted server, the figures."""

from __future__ import annotations

import copy
from functools import partial
from pathlib import Path

from benchmarks.agents.arms import Arm, litellm_injecting_config
from benchmarks.agents.replay import Sent, edit_body, replay_arm, stability
from benchmarks.agents.report import change, markdown, summarise_arm
from benchmarks.agents.scripted import ScriptedServer
from benchmarks.agents.tap import Tap
from benchmarks.agents.trace import load_trace, prefix_breaks

TRACES = Path(__file__).resolve().parents[1] / "gateway" / "traces"
CLAUDE = TRACES / "claude_code_2.1.328_docs_code.jsonl.xz"
CODEX = TRACES / "codex_0.169.0_docs_code.jsonl.xz"
OPENCLAW = TRACES / "openclaw_2026.9.6_gen-docs8_concurrent.jsonl.xz"


def test_passthrough_shows_the_clients_own_re_rendering_and_nothing_else() -> None:
    records = load_trace(CLAUDE)
    verdicts = stability(records, [r["body"] for r in records])
    assert [r["seq"] for r, v in zip(records, verdicts, strict=True) if v is not None] == [
        b.seq for b in prefix_breaks(records)
    ]
    codex = load_trace(CODEX)
    assert stability(codex, [r["body"] for r in codex]) == [None] * len(codex)


def test_an_arm_that_rewrites_an_earlier_message_or_the_system_prompt_is_named() -> None:
    records = load_trace(CODEX)
    sent = [copy.deepcopy(r["body"]) for r in records]
    sent[4]["input"][0] = {"role": "user", "content": "compressed"}  # a rewritten earlier item
    sent[5]["instructions"] = "shorter instructions"  # a rewritten head
    verdicts = stability(records, sent)
    assert verdicts[4] == 0
    assert verdicts[5] == -1


def test_every_arm_gets_the_same_edits_and_nothing_else() -> None:
    claude = load_trace(CLAUDE)[0]["body"]
    edited = edit_body(claude, model="replay", max_tokens=4)
    assert edited["model"] == "replay" and edited["max_tokens"] == 4
    assert {k: v for k, v in edited.items() if k not in ("model", "max_tokens")} == {
        k: v for k, v in claude.items() if k not in ("model", "max_tokens")
    }
    codex = edit_body(load_trace(CODEX)[0]["body"], model=None, max_tokens=4)
    assert codex["max_output_tokens"] == 4 and codex["model"] == "scripted" and "max_tokens" not in codex


def test_every_output_cap_the_client_sent_is_capped() -> None:
    """OpenClaw sends Chat's ``max_completion_tokens: 8192``, which vLLM and llama-server read before
    ``max_tokens``: the replay caps the field the client sent, and adds ``max_tokens`` only where none is."""
    openclaw = load_trace(OPENCLAW)[0]["body"]
    assert openclaw["max_completion_tokens"] == 8192 and "max_tokens" not in openclaw
    edited = edit_body(openclaw, model="replay", max_tokens=4)
    assert edited["max_completion_tokens"] == 4 and "max_tokens" not in edited
    assert {k: v for k, v in edited.items() if k not in ("model", "max_completion_tokens")} == {
        k: v for k, v in openclaw.items() if k not in ("model", "max_completion_tokens")
    }
    both = edit_body({"messages": [], "max_tokens": 100, "max_completion_tokens": 200}, model=None, max_tokens=4)
    assert both["max_tokens"] == 4 and both["max_completion_tokens"] == 4
    assert edit_body({"messages": []}, model=None, max_tokens=4)["max_tokens"] == 4


def test_the_tap_records_what_the_arm_sent_and_the_upstreams_usage() -> None:
    records = load_trace(CODEX)[:3]
    with ScriptedServer() as server, Tap(server.url) as tap:
        rows, sent, _ = replay_arm(
            Arm("passthrough", tap.url), records, tap, edit=partial(edit_body, model=None, max_tokens=4)
        )
    assert [r.status for r in rows] == [200, 200, 200]
    assert all(r.upstream_calls == 1 and r.prompt_tokens > 1000 and r.ttft_s is not None for r in rows)
    assert [s["input"] for s in sent] == [r["body"]["input"] for r in records]
    assert all(s["max_output_tokens"] == 4 for s in sent)


def _sent(seq: int, prompt: int, read: int, ttft: float, breaks: int | None = None) -> Sent:
    return Sent(seq, "s", 200, prompt, read, 0, float(prompt - read), ttft, 1, breaks)


def test_the_figures_pair_every_arm_with_passthrough() -> None:
    base = [[_sent(0, 1000, 0, 1.0), _sent(1, 1200, 900, 0.5, breaks=1)]]
    arm = [[_sent(0, 1000, 0, 1.0), _sent(1, 1200, 1000, 0.4)]]
    summary = summarise_arm(arm, base, modelled=False)
    assert summary["prefilled_tokens"]["total"] == 1200
    assert summary["byte_stability"] == {"breaks": [], "added": [], "stable": 2}
    assert summary["ttft"]["paired_median_ms"] == -50.0
    assert change(1200, 1300) == -7.7
    base_summary = summarise_arm(base, None, modelled=False)
    table = markdown(
        {
            "command": "python -m benchmarks.agents replay",
            "runs": [
                {
                    "trace": "t.jsonl.xz",
                    "engine_label": "an engine",
                    "requests": 2,
                    "modelled": False,
                    "arms": {"passthrough": base_summary, "gateway": summary, "headroom": {"unavailable": "no"}},
                }
            ],
        }
    )
    assert "the client's own re-rendering: [1]" in table and "| headroom | not run: no |" in table


def test_litellm_injects_anthropic_cache_control() -> None:
    config = litellm_injecting_config("http://127.0.0.1:9", anthropic=True)
    assert "cache_control_injection_points" in config and 'model: "anthropic/*"' in config
    assert 'api_base: "http://127.0.0.1:9/v1"' in litellm_injecting_config("http://127.0.0.1:9", anthropic=False)


def test_the_modelled_rules_server_serves_codex_its_responses_with_openai_cache_rules() -> None:
    """The Codex trace on the modelled OpenAI rules (through the recording tap, as the replay sends it): the
    first request reads nothing, every later request of a session reads its cached prefix in 128-token steps
    (a session's first may read another's shared head, where their cache keys meet on a machine), reported
    as ``input_tokens_details.cached_tokens`` in the streamed ``response.completed``; cost in GPT-5 price
    ratios (cached reads 0.1x)."""
    from benchmarks.agents.replay import prices_for
    from benchmarks.hosted.server import ProviderServer

    records = load_trace(CODEX)[:8]
    with ProviderServer() as server, Tap(server.url, headers={"x-bench-run": "codex"}) as tap:
        rows, _, _ = replay_arm(
            Arm("passthrough", tap.url), records, tap, edit=partial(edit_body, model=None, max_tokens=4)
        )
    firsts = {r.session: r.seq for r in reversed(rows)}
    assert all(r.status == 200 and r.prompt_tokens > 1024 for r in rows)
    assert rows[0].cache_read_tokens == 0 and all(r.cache_read_tokens % 128 == 0 for r in rows)
    later = [r for r in rows if firsts[r.session] != r.seq]
    assert later and all(r.cache_read_tokens > 1024 and r.cache_read_tokens % 128 == 0 for r in later)
    assert prices_for("responses").read == 0.1
    assert rows[-1].cost == (rows[-1].prompt_tokens - rows[-1].cache_read_tokens) + 0.1 * rows[-1].cache_read_tokens


def test_the_openai_sdk_streams_a_response_from_the_modelled_server() -> None:
    from openai import OpenAI

    from benchmarks.hosted.server import ANSWER, ProviderServer

    body = load_trace(CODEX)[0]["body"]
    with ProviderServer() as server:
        client = OpenAI(base_url=server.url + "/v1", api_key="sk-modelled")
        kwargs = {k: body[k] for k in ("input", "tools", "prompt_cache_key")}
        usage = []
        for _ in range(2):
            with client.responses.stream(model="gpt-5", **kwargs) as stream:
                final = stream.get_final_response()
            usage.append(final.usage)
    assert final.output_text == ANSWER
    assert usage[0] is not None and usage[1] is not None
    assert usage[0].input_tokens_details.cached_tokens == 0
    assert usage[1].input_tokens_details.cached_tokens == usage[0].input_tokens // 128 * 128
