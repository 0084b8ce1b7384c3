"""``python -m cp_memory.engine.build``: the command the "llama-server not found" error names exists in an
install (the build script ships inside the package; scripts/build_llama_server.sh runs the same file)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("httpx")

from cp_memory.engine import LlamaServerNotFound, find_llama_server
from cp_memory.engine.build import script_path

ROOT = Path(__file__).resolve().parents[2]


def test_the_not_found_error_names_a_command_an_installed_package_has(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("CP_MEMORY_LLAMA_SERVER", raising=False)
    monkeypatch.setenv("CP_MEMORY_CACHE", str(tmp_path))
    with pytest.raises(LlamaServerNotFound, match=r"-m cp_memory\.engine\.build") as info:
        find_llama_server()
    assert sys.executable in str(info.value)  # the exact command, for the interpreter that raised it
    assert script_path().is_file() and script_path().is_relative_to(ROOT / "cp_memory")


def test_the_checkout_script_runs_the_packaged_one() -> None:
    wrapper = (ROOT / "scripts" / "build_llama_server.sh").read_text()
    assert "cp_memory/engine/build_llama_server.sh" in wrapper


@pytest.mark.engine
def test_the_command_reuses_a_built_binary_and_prints_its_path() -> None:
    try:
        built = find_llama_server()
    except FileNotFoundError:
        pytest.skip("llama-server is not built here: the command would build it (5-10 minutes)")
    out = subprocess.run(
        [sys.executable, "-m", "cp_memory.engine.build"], capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert Path(out.stdout.strip()) == built
