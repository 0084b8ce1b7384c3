"""The Chain-of-Agents benchmark's command line, run as users run it (``python -m benchmarks.coa``).

A fresh interpreter on real llama-server workers (random-weight model), a few LoCoMo questions, both
workloads: the command must finish, write its three outputs, keep LoCoMo text out of them (CC BY-NC:
questions and gold answers by digest only) and report the engines' own token counts.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from ..support import llama_server_binary, locomo_file

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.engine, pytest.mark.slow]


def test_the_command_runs_end_to_end_and_keeps_locomo_text_out(tmp_path: Path) -> None:
    locomo = locomo_file()
    llama_server_binary()
    out = tmp_path / "coa"
    cmd = [
        sys.executable,
        "-m",
        "benchmarks.coa",
        "--locomo",
        str(locomo),
        "--conversations",
        "1",
        "--questions",
        "4",
        "--k",
        "2",
        "--turns",
        "2",
        "--workers",
        "2",
        "--concurrency",
        "2",
        "--worker-max-tokens",
        "8",
        "--manager-max-tokens",
        "4",
        "--reps",
        "1",
        "--arms",
        "round_robin,agent_aware",
        "--out",
        str(out),
    ]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600, env=dict(os.environ))
    assert done.returncode == 0, done.stderr[-3000:]
    assert {p.name for p in out.iterdir()} >= {"coa_routing.md", "coa_routing.json"}
    result = json.loads((out / "coa_routing.json").read_text())
    assert set(result["summary"]) == {"single", "multi"}
    for workload in result["summary"].values():
        assert set(workload) == {"round_robin", "agent_aware"}
    for run in result["runs"]:
        assert run["failed"] == 0
        # the client's prefilled tokens are the engines' own counters
        assert run["prefilled_tokens"] == run["engine_prefilled_tokens"]
    raw = (out / "coa_routing.json").read_text() + (out / "coa_routing.md").read_text()
    data = json.loads(locomo.read_text())
    questions = [qa["question"] for qa in data[0]["qa"] if len(qa["question"]) > 30]
    assert questions and not any(q in raw for q in questions)
    assert all(rec["question"].startswith("sha1:") for rec in result["questions"])
    assert "vs round-robin" in (out / "coa_routing.md").read_text()
