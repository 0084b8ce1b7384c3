"""The supported mem0ai range (pyproject: ``mem0ai>=2.1.0,<3``): the newest is what the venv has; the
oldest is installed beside it by scripts/setup.sh (``.venv/mem0-oldest``) and the wrapper's contract,
scope and extras-filter tests run against it in a subprocess. 2.0.x is out: its ``update`` takes
``data=``, not ``text=``.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
OLDEST = ROOT / ".venv" / "mem0-oldest"


def test_pyproject_states_the_supported_range():
    text = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'"mem0ai>=2\.1\.0,<3"', text)


@pytest.mark.slow
@pytest.mark.mem0
def test_the_oldest_supported_mem0_passes_the_contract_and_scope_tests():
    if not OLDEST.is_dir():
        if os.environ.get("CP_MEMORY_REQUIRE_ENGINE"):
            pytest.fail(f"{OLDEST} missing: scripts/setup.sh installs the oldest supported mem0ai there")
        pytest.skip(f"{OLDEST} missing (run scripts/setup.sh)")
    env = {**os.environ, "PYTHONPATH": str(OLDEST)}
    probe = subprocess.run(
        [sys.executable, "-c", "import mem0, importlib.metadata as m; print(m.version('mem0ai'), mem0.__file__)"],
        env=env,
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    )
    assert probe.stdout.startswith("2.1.0 ") and str(OLDEST) in probe.stdout
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-x",
            "-p",
            "no:cacheprovider",
            "tests/memory/test_contract.py",
            "tests/memory/test_scope.py",
            "tests/memory/test_filters.py",
            "tests/memory/test_turns.py",
        ],
        env=env,
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=900,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
