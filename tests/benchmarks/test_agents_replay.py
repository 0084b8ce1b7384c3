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


def test_the_tap_records_what_the_arm_sent_and_the_upstreams_usage() -> None:
    records = load_trace(CODEX)[:3]
    with ScriptedServer() as server, Tap(server.url) as tap:
        rows, sent = replay_arm(
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
