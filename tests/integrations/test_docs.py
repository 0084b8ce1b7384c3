"""The examples of docs/integrations.md run as written (on the random-weight model instead of SmolLM2)."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest

from tests.integrations.conftest import _missing, require_extra

DOC = Path(__file__).resolve().parents[2] / "docs" / "integrations.md"
EXAMPLES = {
    name: block
    for name, block in zip(
        ("langgraph", "llamaindex", "openai_agents"),
        [b for b in re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.DOTALL)],
        strict=False,
    )
}
NEEDS = {"langgraph": "langgraph", "llamaindex": "llama_index.memory.mem0", "openai_agents": "agents"}


@pytest.mark.slow
@pytest.mark.engine
@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_runs(name: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    require_extra(NEEDS[name], name.replace("_", "-"))
    from tests.mem0_fixtures import require_mem0

    require_mem0()
    from cp_memory import engine

    try:
        engine.find_llama_server()
        model = engine.random_model_path()
    except (FileNotFoundError, ImportError) as exc:
        _missing(f"llama-server or the random test model is not available: {exc}")
    monkeypatch.setattr(engine, "smollm2_model_path", lambda: model)
    module = types.ModuleType(f"docs_integrations_{name}")  # a real module: LangGraph resolves the
    monkeypatch.setitem(sys.modules, module.__name__, module)  # State's annotations through it
    exec(compile(EXAMPLES[name], f"docs/integrations.md ({name})", "exec"), module.__dict__)  # noqa: S102
    assert capsys.readouterr().out.strip(), "the example printed the model's answers"
