"""Every Python example of docs/integrations.md and docs/mem0.md runs as written (on the random-weight model
instead of SmolLM2), each in a fresh module and an empty working directory (the examples' relative paths)."""

from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest

from tests.integrations.conftest import _missing, require_extra

DOCS = Path(__file__).resolve().parents[2] / "docs"
PAGES = ("integrations.md", "mem0.md")
#: an import in an example -> the module its extra brings (skipped, or failed in strict mode, without it)
NEEDS = {
    "cp_memory.integrations.langgraph": ("langgraph", "langgraph"),
    "cp_memory.integrations.llamaindex": ("llama_index.memory.mem0", "llamaindex"),
    "cp_memory.integrations.openai_agents": ("agents", "openai-agents"),
}


def _examples() -> list[tuple[str, str]]:
    out = []
    for page in PAGES:
        blocks = re.findall(r"```python\n(.*?)```", (DOCS / page).read_text(encoding="utf-8"), re.DOTALL)
        out += [(f"{page}#{i}", block) for i, block in enumerate(blocks, start=1)]
    return out


EXAMPLES = dict(_examples())


def test_every_page_has_examples() -> None:
    for page in PAGES:
        assert any(name.startswith(page) for name in EXAMPLES), page


@pytest.mark.slow
@pytest.mark.engine
@pytest.mark.parametrize("name", sorted(EXAMPLES))
def test_example_runs(
    name: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code = EXAMPLES[name]
    for module, (needs, extra) in NEEDS.items():
        if module in code:
            require_extra(needs, extra)
    from tests.mem0_fixtures import require_mem0

    require_mem0()
    if "LlamaServer" in code:
        from cp_memory import engine

        try:
            engine.find_llama_server()
            model = engine.random_model_path()
        except (FileNotFoundError, ImportError) as exc:
            _missing(f"llama-server or the random test model is not available: {exc}")
        monkeypatch.setattr(engine, "smollm2_model_path", lambda: model)
    monkeypatch.chdir(tmp_path)
    module = types.ModuleType("docs_example_" + re.sub(r"\W", "_", name))  # a real module: LangGraph
    monkeypatch.setitem(sys.modules, module.__name__, module)  # resolves the State's annotations through it
    exec(compile(code, f"docs/{name}", "exec"), module.__dict__)  # noqa: S102
    assert capsys.readouterr().out.strip(), "the example printed something (the model's answers)"
