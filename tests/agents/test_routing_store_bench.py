"""``python -m benchmarks.coa.routers_state``: two CoA routers sharing Redis route as one router; two with their
own state send documents to workers that do not hold them (the engine cache model: machine-independent)."""

from __future__ import annotations

import json
from pathlib import Path

from benchmarks.coa import routers_state
from tests.redis_server import redis_binary
from tests.support import locomo_file


def test_two_routers_with_redis_match_one_router(tmp_path: Path) -> None:
    redis_binary()  # skip locally / fail in strict CI without redis-server
    argv = ["--conversations", "0-1", "--questions", "6", "--k", "3", "--locomo", str(locomo_file())]
    assert routers_state.main([*argv, "--out", str(tmp_path)]) == 0
    runs = {r["arm"]: r for r in json.loads((tmp_path / "routers_state.json").read_text())["runs"]}
    one, local, shared = runs["one"], runs["two_local"], runs["two_redis"]
    assert one["worker_calls"] == local["worker_calls"] == shared["worker_calls"] > 0
    assert one["strayed"] == 0 and local["strayed"] > 0  # two local routers split documents over workers
    assert shared["strayed"] <= 1 and shared["home"] >= one["home"] - 1
    assert shared["cached_tokens"] > local["cached_tokens"]
    assert "| two_redis |" in (tmp_path / "routers_state.md").read_text()
