"""Every ```python block of docs/*.md runs as written, each in a fresh module and an empty working directory
(a newcomer's copy-paste), as tests/test_readme.py does for the README.

What stands in for what a newcomer would have:

* ``LlamaServer(smollm2_model_path())``: the real llama-server, on the random-weight test model (same
  tokenizer) instead of SmolLM2, so the examples run in seconds;
* the hosted providers (docs/hosted.md): the local rules server of ``benchmarks.hosted.server`` (modelled on
  the documented cache rules), reached through the official SDKs' own ``OPENAI_BASE_URL`` /
  ``ANTHROPIC_BASE_URL`` variables, exactly as docs/hosted.md tells a reader to try the examples offline;
* ``VLLMServer``: the real vLLM CPU build scripts/setup.sh installs (random-weight model directory).

A block that cannot run here (it needs a GPU, or a service no test can reach) carries an explicit marker on the
line before its fence, ``<!-- docs-test: skip (<reason>) -->``, and is listed in :data:`SKIPPED`; an unlisted
marker, or a listed block without one, fails. docs/CONTRACTS.md is not prose with examples but the generated
signature listing (``scripts/contracts.py``): its blocks are checked by tests/test_contracts.py instead.
"""

from __future__ import annotations

import os
import re
import sys
import textwrap
import types
from pathlib import Path

import pytest

from tests.support import missing

DOCS = Path(__file__).resolve().parent.parent / "docs"
NOT_EXAMPLES = {"CONTRACTS.md": "generated signature listing (tests/test_contracts.py)"}
MARKER = re.compile(r"<!-- docs-test: skip \((?P<reason>[^)]+)\) -->\n```python\n", re.S)
#: every block that is not run, by name: the reason is the doc's own marker
SKIPPED = {"scale.md#1"}
#: an import in an example -> (the module its extra brings, the extra)
NEEDS = {
    "cp_memory.integrations.langgraph": ("langgraph", "langgraph"),
    "cp_memory.integrations.llamaindex": ("llama_index.memory.mem0", "llamaindex"),
    "cp_memory.integrations.openai_agents": ("agents", "openai-agents"),
    "from anthropic": ("anthropic", "hosted"),
    "cp_memory.providers": ("bpe_openai", "hosted"),
    "EngineCacheFeed": ("zmq", "kv-events"),
    "KVEventFeed": ("zmq", "kv-events"),
    "SGLangRouter": ("sglang_router", "router"),
}


def _blocks() -> dict[str, tuple[str, str | None]]:
    """``page#i`` -> (code, skip reason or None) for every python block of every page."""
    out: dict[str, tuple[str, str | None]] = {}
    for page in sorted(p for p in DOCS.glob("*.md") if p.name not in NOT_EXAMPLES):
        text = page.read_text(encoding="utf-8")
        skipped = {m.end() for m in MARKER.finditer(text)}
        reasons = {m.end(): m.group("reason") for m in MARKER.finditer(text)}
        for i, m in enumerate(re.finditer(r"^([ \t]*)```python\n(.*?)^[ \t]*```", text, re.S | re.M), start=1):
            start = m.start(2)  # a block inside a list item is indented: run it dedented
            code = textwrap.dedent(m.group(2))
            out[f"{page.name}#{i}"] = (code, reasons[start] if start in skipped else None)
    return out


BLOCKS = _blocks()


def test_every_skip_is_marked_in_the_doc_and_listed_here() -> None:
    marked = {name for name, (_, reason) in BLOCKS.items() if reason is not None}
    assert marked == SKIPPED, f"marked in the docs: {sorted(marked)}, listed: {sorted(SKIPPED)}"
    assert len(BLOCKS) - len(SKIPPED) >= 15


def _require(module: str, extra: str) -> None:
    import importlib

    try:
        importlib.import_module(module)
    except ImportError:
        missing(f"the '{extra}' extra is not installed ({module})")


def _prepare(code: str, monkeypatch: pytest.MonkeyPatch, stack: list[object]) -> None:
    """Stand-ins and prerequisites for one block (see the module docstring)."""
    for needle, (module, extra) in NEEDS.items():
        if needle in code:
            _require(module, extra)
    if "default_memory" in code or "mem0" in code:
        from tests.mem0_fixtures import require_mem0

        require_mem0()
    if "LlamaServer" in code:
        from cp_memory import engine

        try:
            engine.find_llama_server()
            model = engine.random_model_path()
        except (FileNotFoundError, ImportError) as exc:
            missing(f"llama-server or the random test model is not available: {exc}")
        monkeypatch.setattr(engine, "smollm2_model_path", lambda: model)
    if "VLLMServer" in code:
        from cp_memory.engine.vllm import VLLMUnavailable, find_vllm_python

        try:
            find_vllm_python()
        except VLLMUnavailable as exc:
            missing(f"vLLM is not installed (scripts/setup.sh installs the CPU build): {exc}")
    if "Anthropic()" in code or "OpenAI()" in code:  # docs/hosted.md: the local rules server, modelled
        from benchmarks.hosted.server import ProviderServer

        server = ProviderServer(step_s=15.0).__enter__()
        stack.append(server)
        for key, value in {
            "OPENAI_BASE_URL": f"{server.url}/v1",
            "ANTHROPIC_BASE_URL": server.url,
            "OPENAI_API_KEY": "sk-local",
            "ANTHROPIC_API_KEY": "sk-ant-local",
            "CACHE_KEY_SECRET": "a-local-secret-of-32-characters!",
        }.items():
            monkeypatch.setenv(key, value)


def _marks(code: str) -> list[pytest.MarkDecorator]:
    marks = [pytest.mark.slow]
    if "LlamaServer" in code:
        marks.append(pytest.mark.engine)
    if "VLLMServer" in code:
        marks.append(pytest.mark.vllm)
    if "SGLangRouter" in code:
        marks.append(pytest.mark.engine)
    return marks


@pytest.mark.parametrize("name", [pytest.param(n, marks=_marks(BLOCKS[n][0])) for n in sorted(BLOCKS)])
def test_example_runs_as_written(
    name: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    code, reason = BLOCKS[name]
    if reason is not None:
        pytest.skip(f"marked in docs/{name.split('#')[0]}: {reason}")
    stack: list[object] = []
    environ = dict(os.environ)  # an example may set variables (docs/hosted.md): restored after it
    try:
        _prepare(code, monkeypatch, stack)
        monkeypatch.chdir(tmp_path)
        module = types.ModuleType("docs_example_" + re.sub(r"\W", "_", name))  # a real module: LangGraph
        monkeypatch.setitem(sys.modules, module.__name__, module)  # resolves the State's annotations through it
        exec(compile(code, f"docs/{name}", "exec"), module.__dict__)  # noqa: S102
    finally:
        for server in stack:
            server.__exit__(None, None, None)  # type: ignore[attr-defined]
        os.environ.clear()
        os.environ.update(environ)
    if "print(" in code:
        assert capsys.readouterr().out.strip(), "the example printed nothing"
    if "ContextPilotMem0Memory" in code:  # the LlamaIndex example stores what mem0's own guide stores
        stored = [r["memory"] for r in module.store.get_all(filters={"user_id": "alice"})["results"]]
        assert not [t for t in stored if t.startswith("Context:") or "Where does Alice live?" in t], stored


def test_the_llamaindex_example_stores_no_raw_questions_and_answers() -> None:
    """mem0's LlamaIndex guide adds each message with mem0's defaults (its LLM extracts the facts); the example
    stored the raw questions and answers (``add_kwargs={"infer": False}``), which the next search returned as
    memories. It now writes nothing back (its offline store has no LLM) and the page says what write-back stores."""
    code = next(c for c, _ in BLOCKS.values() if "ContextPilotMem0Memory" in c)
    assert "add_kwargs" not in code and "write_back=False" in code
    text = (DOCS / "integrations.md").read_text(encoding="utf-8")
    assert "what mem0's own LlamaIndex guide stores" in text and "never the rendered `Context:` block" in text


def test_environment_variables_the_hosted_examples_read_are_named_in_the_doc() -> None:
    text = (DOCS / "hosted.md").read_text(encoding="utf-8")
    for variable in ("OPENAI_BASE_URL", "ANTHROPIC_BASE_URL", "CACHE_KEY_SECRET", "benchmarks.hosted.server"):
        assert variable in text


def test_the_docs_say_mem0s_guides_fail_on_mem0_2_and_name_what_is_not_covered() -> None:
    """The claim holds on the installed mem0 (2.x): the guides' ``search(query, user_id=...)`` is refused."""
    text = (DOCS / "integrations.md").read_text(encoding="utf-8")
    for name in ("CrewAI", "AG2", "Vercel AI SDK", "Top-level entity parameters"):
        assert name in text, name
    from tests.mem0_fixtures import require_mem0

    require_mem0()
    from cp_memory.embedded import default_memory

    memory = default_memory()
    try:
        with pytest.raises(ValueError, match="Top-level entity parameters"):
            memory.search("Where does Alice live?", user_id="alice")  # mem0's guides, as written
    finally:
        memory.close()
