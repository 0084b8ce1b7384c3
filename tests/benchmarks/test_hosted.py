"""The benchmark's local provider server, driven by the official SDKs, streamed and not: usage comes back in
the providers' shapes and cp_memory reads the cache model's figures from it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.hosted.server import ProviderServer
from cp_memory.providers import UsageStream, read_usage

SYSTEM = "Stable instructions. " * 400  # ~1,600 tokens
RESULTS = Path(__file__).resolve().parents[2] / "docs" / "results"


def test_openai_sdk_against_the_local_server_stream_and_not():
    openai = pytest.importorskip("openai")
    with ProviderServer(step_s=10) as server:
        client = openai.OpenAI(base_url=server.url + "/v1", api_key="local")
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "first question"}]
        first = read_usage(
            client.chat.completions.create(model="gpt-5-mini", messages=messages, prompt_cache_key="cp-k")
        )
        assert first.cache_read_tokens == 0 and first.input_tokens > 1024
        stream = UsageStream()
        events = client.chat.completions.create(
            model="gpt-5-mini",
            messages=messages[:1] + [{"role": "user", "content": "second question"}],
            stream=True,
            stream_options={"include_usage": True},
            prompt_cache_key="cp-k",
        )
        text = "".join(c.choices[0].delta.content or "" for c in stream.wrap(events) if c.choices)
        assert text == "Noted."
        second = stream.usage
        assert second.cache_read_tokens >= 1024 and second.cache_read_tokens % 128 == 0
        assert server.log[-1]["cached"] == second.cache_read_tokens


def test_anthropic_sdk_against_the_local_server_stream_and_not():
    anthropic = pytest.importorskip("anthropic")
    with ProviderServer(step_s=10) as server:
        client = anthropic.Anthropic(base_url=server.url, api_key="local")
        system = [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}]
        first = read_usage(
            client.messages.create(
                model="claude-sonnet-4-5", max_tokens=8, system=system, messages=[{"role": "user", "content": "q1"}]
            )
        )
        assert first.cache_write_tokens > 1024 and first.cache_read_tokens == 0
        stream = UsageStream()
        with client.messages.create(
            model="claude-sonnet-4-5",
            max_tokens=8,
            system=system,
            stream=True,
            messages=[{"role": "user", "content": "q2"}],
        ) as events:
            for _ in stream.wrap(events):
                pass
        assert stream.usage.cache_read_tokens == first.cache_write_tokens
        assert stream.usage.output_tokens > 0
        with pytest.raises(anthropic.BadRequestError, match="maximum of 4"):
            many = [{"type": "text", "text": f"b{i}", "cache_control": {"type": "ephemeral"}} for i in range(5)]
            client.messages.create(
                model="claude-sonnet-4-5", max_tokens=8, system=many, messages=[{"role": "user", "content": "q"}]
            )


def test_report_re_renders_the_committed_run_from_its_records(tmp_path: Path) -> None:
    """``--report``: the summary, the aims and the table of docs/results/hosted.json come back from its records."""
    from benchmarks.hosted.cli import main

    assert main(["--report", str(RESULTS / "hosted.json"), "--out", str(tmp_path)]) == 0
    committed = json.loads((RESULTS / "hosted.json").read_text(encoding="utf-8"))
    again = json.loads((tmp_path / "hosted.json").read_text(encoding="utf-8"))
    assert again["summary"] == committed["summary"] and again["meta"]["aims"] == committed["meta"]["aims"]
    assert (tmp_path / "hosted.md").read_text(encoding="utf-8") == (RESULTS / "hosted.md").read_text(encoding="utf-8")
