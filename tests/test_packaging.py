"""Packaging: the wheel installs only ``cp_memory`` and lives next to the OpenAI Agents SDK.

``openai-agents`` installs a top-level ``agents`` package. cp-memory's Chain-of-Agents used to install
one too, so whichever was installed last silently replaced the other's ``agents/__init__.py``. The
wheel must therefore ship a single top-level name, ``cp_memory``, and both imports must work in one
interpreter.

The wheel is built from a copy of the sources (so the shared checkout gets no ``build/`` or
``*.egg-info``), installed with ``--no-deps`` into a private target directory, and imported by a fresh
interpreter whose working directory is outside the repository (the repository root cannot shadow
anything there; the target directory comes first on ``sys.path``, ahead of the editable install).
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import textwrap
import zipfile
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.slow


def _pip(*args: str, cwd: Path) -> str:
    cmd = [sys.executable, "-m", "pip", "--disable-pip-version-check", "--no-input", *args]
    out = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=300, check=False)
    if out.returncode != 0:
        pytest.fail(f"{' '.join(cmd)} failed ({out.returncode}):\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    return out.stdout + out.stderr


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The project's wheel, built without build isolation (no index needed) from a copy of the sources."""
    src = tmp_path_factory.mktemp("src")
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(ROOT / name, src / name)
    shutil.copytree(
        ROOT / "cp_memory", src / "cp_memory", ignore=shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")
    )
    out = tmp_path_factory.mktemp("wheel")
    # the venv's own setuptools when it has one (no index needed); else pip's isolated build env
    isolation = [] if importlib.util.find_spec("setuptools") is None else ["--no-build-isolation"]
    log = _pip("wheel", "-v", "--no-deps", *isolation, "--wheel-dir", str(out), str(src), cwd=out)
    (out / "build.log").write_text(log, encoding="utf-8")  # the build backend's output (-v)
    (whl,) = out.glob("cp_memory-*.whl")
    yield whl


def test_the_licence_is_an_spdx_expression_and_the_build_does_not_warn(wheel: Path) -> None:
    """``license = { text = ... }`` made setuptools print a deprecation warning at every install; the SPDX
    string form (setuptools >= 77) is the metadata field ``License-Expression``."""
    log = (wheel.parent / "build.log").read_text(encoding="utf-8")
    assert "project.license` as a TOML table is deprecated" not in log
    assert not [line for line in log.splitlines() if "Deprecat" in line and "icense" in line], log[-3000:]
    with zipfile.ZipFile(wheel) as zf:
        meta = zf.read(next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA"))).decode()
    assert "License-Expression: Apache-2.0" in meta.splitlines()


def _top_level_names(whl: Path) -> set[str]:
    """Top-level importable names in a wheel (packages, modules), metadata directories left out."""
    with zipfile.ZipFile(whl) as zf:
        names = {n.split("/", 1)[0] for n in zf.namelist()}
        top_level = next((n for n in zf.namelist() if n.endswith(".dist-info/top_level.txt")), None)
        declared = set(zf.read(top_level).decode().split()) if top_level else set()
    files = {n.removesuffix(".py") for n in names if not n.endswith((".dist-info", ".data"))}
    return files | declared


def test_wheel_installs_only_cp_memory(wheel: Path) -> None:
    assert _top_level_names(wheel) == {"cp_memory"}
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
    # the Chain-of-Agents package ships inside the namespace, with its modules
    assert "cp_memory/agents/__init__.py" in names
    assert "cp_memory/agents/coa.py" in names
    assert "cp_memory/py.typed" in names  # PEP 561 marker: type checkers use our annotations
    assert "cp_memory/engine/build_llama_server.sh" in names  # python -m cp_memory.engine.build runs it
    for forbidden in ("agents/", "tests/", "benchmarks/"):
        assert not any(n.startswith(forbidden) for n in names), forbidden


def test_openai_agents_sdk_and_chain_of_agents_import_in_one_process(wheel: Path, tmp_path: Path) -> None:
    pytest.importorskip("agents", reason="openai-agents is in the 'test' extra: pip install 'cp-memory[test]'")
    target = tmp_path / "site"
    _pip("install", "--no-deps", "--no-index", "--target", str(target), str(wheel), cwd=tmp_path)
    assert not (target / "agents").exists(), "the wheel installed a top-level 'agents' package"
    script = textwrap.dedent("""
        import importlib.metadata, json
        from agents import Agent, Runner
        from cp_memory.agents import ChainOfAgents
        import agents, cp_memory
        sdk = importlib.metadata.distribution("openai-agents")
        ours = importlib.metadata.distribution("cp-memory")   # the wheel's: first on sys.path
        print(json.dumps({"agents": agents.__file__, "cp_memory": cp_memory.__file__,
                          "Agent": Agent.__module__, "Runner": Runner.__module__,
                          "ChainOfAgents": ChainOfAgents.__module__,
                          "sdk_files": [str(f.locate()) for f in sdk.files or ()
                                        if str(f) == "agents/__init__.py"],
                          "our_files": [str(f) for f in ours.files or ()],
                          "our_dist": str(ours.locate_file(""))}))
    """)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = str(target)
    out = subprocess.run(
        [sys.executable, "-c", script], cwd=outside, env=env, capture_output=True, text=True, timeout=120, check=False
    )
    assert out.returncode == 0, out.stderr[-3000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    # the SDK's own package answered `import agents` ...
    assert seen["Agent"].startswith("agents.") and seen["Runner"].startswith("agents.")
    assert [Path(p).resolve() for p in seen["sdk_files"]] == [Path(seen["agents"]).resolve()]
    # ... and Chain-of-Agents came from the installed wheel, under the project's namespace
    assert Path(seen["cp_memory"]).is_relative_to(target)
    assert Path(seen["our_dist"]).resolve() == target.resolve()
    assert not [f for f in seen["our_files"] if f.split("/", 1)[0] in ("agents", "tests", "benchmarks")]
    assert seen["ChainOfAgents"] == "cp_memory.agents.coa"


def test_the_wheel_builds_llama_server_with_a_command_it_ships(wheel: Path, tmp_path: Path) -> None:
    """The error messages send wheel users to ``python -m cp_memory.engine.build`` (scripts/ is not in the
    wheel): from an installed wheel it runs the packaged build script, which reuses a built binary at once."""
    pytest.importorskip("httpx", reason="the engine extra: pip install 'cp-memory[engine]'")
    from cp_memory.engine import find_llama_server

    try:
        built = find_llama_server()
    except FileNotFoundError:
        pytest.skip("llama-server is not built here: the command would build it (5-10 minutes)")
    target = tmp_path / "site"
    _pip("install", "--no-deps", "--no-index", "--target", str(target), str(wheel), cwd=tmp_path)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "CP_MEMORY_LLAMA_SERVER")}
    env["PYTHONPATH"] = str(target)
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    out = subprocess.run(
        [sys.executable, "-m", "cp_memory.engine.build"],
        cwd=outside,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert out.returncode == 0, out.stderr[-3000:]
    assert Path(out.stdout.strip().splitlines()[-1]).resolve() == built.resolve()
    assert "already built" in out.stderr
