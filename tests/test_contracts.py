"""docs/CONTRACTS.md is generated from the code (scripts/contracts.py), so it can never go stale."""

import subprocess
import sys
from pathlib import Path

from tests.mem0_fixtures import require_mem0

ROOT = Path(__file__).resolve().parent.parent


def test_the_contracts_page_is_what_the_code_says() -> None:
    require_mem0()  # the page lists the mem0 wrappers' signatures
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "contracts.py"), "--check"], cwd=ROOT, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr + "run: .venv/bin/python scripts/contracts.py"
