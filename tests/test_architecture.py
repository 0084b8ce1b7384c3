"""docs/ARCHITECTURE.md stays true: every module it names imports, and every module of the package is named.

Modules behind an optional extra that is not installed are skipped by name (their extra is listed).
"""

from __future__ import annotations

import importlib
import pkgutil
import re
from pathlib import Path

import pytest

import cp_memory

DOC = Path(__file__).resolve().parents[1] / "docs" / "ARCHITECTURE.md"
NAMED = sorted(set(re.findall(r"`(cp_memory(?:\.[a-z_0-9]+)+)`", DOC.read_text())))
OPTIONAL = {  # module -> the import its extra provides
    "cp_memory.integrations.langgraph": "langgraph",
    "cp_memory.integrations.llamaindex": "llama_index.memory.mem0",
    "cp_memory.integrations.openai_agents": "agents",
}


def all_modules() -> set[str]:
    out = set()
    for info in pkgutil.walk_packages(cp_memory.__path__, "cp_memory."):
        if not info.name.rsplit(".", 1)[-1].startswith("__"):
            out.add(info.name)
    return out


@pytest.mark.parametrize("name", NAMED)
def test_every_named_module_imports(name):
    if name in OPTIONAL:
        pytest.importorskip(OPTIONAL[name])
    importlib.import_module(name)


def test_every_module_is_on_the_map():
    missing = sorted(all_modules() - set(NAMED))
    assert missing == [], f"modules missing from docs/ARCHITECTURE.md: {missing}"


def test_the_core_imports_no_io_stack():
    """The core needs only numpy and scipy: importing it must not pull mem0, httpx or pydantic."""
    import subprocess
    import sys

    code = (
        "import sys, cp_memory, cp_memory.core.render, cp_memory.core.scope, cp_memory.render\n"
        "heavy = [m for m in ('mem0', 'httpx', 'pydantic', 'torch', 'qdrant_client') if m in sys.modules]\n"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == ""
