"""SGLangServer without a GPU: the command line is right and start() fails clearly."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from cp_memory.engine import (
    EngineError,
    SGLangServer,
    SGLangUnavailable,
    sglang_available,
)


def test_command_line() -> None:
    server = SGLangServer(
        "Qwen/Qwen2.5-0.5B-Instruct",
        mem_fraction_static=0.5,
        context_length=8192,
        schedule_policy="lpm",
        extra_args=["--chunked-prefill-size", "4096"],
    )
    cmd = server.command(31000)
    assert cmd[:3] == [sys.executable, "-m", "sglang.launch_server"]
    joined = " ".join(cmd)
    for part in (
        "--model-path Qwen/Qwen2.5-0.5B-Instruct",
        "--host 127.0.0.1",
        "--port 31000",
        "--enable-cache-report",
        "--enable-metrics",
        "--mem-fraction-static 0.5",
        "--context-length 8192",
        "--schedule-policy lpm",
        "--chunked-prefill-size 4096",
    ):
        assert part in joined
    with pytest.raises(RuntimeError, match="not started"):
        _ = server.base_url


@pytest.mark.skipif(importlib.util.find_spec("sglang") is not None, reason="sglang is installed")
def test_start_without_sglang_is_clear() -> None:
    assert not sglang_available()
    with pytest.raises(SGLangUnavailable, match="pip install 'cp-memory\\[sglang\\]'") as info:
        SGLangServer("some/model").start()
    assert isinstance(info.value, EngineError)
