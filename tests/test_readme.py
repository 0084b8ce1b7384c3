"""The README's core example runs as written."""

import contextlib
import io
import re
from pathlib import Path

README = Path(__file__).resolve().parent.parent / "README.md"


def test_core_example_runs_and_prints_what_the_comments_say():
    text = README.read_text()
    section = text.split("## The core", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README-core", "exec"), {})
    printed = out.getvalue().splitlines()
    assert printed[0].startswith("('m2', 'm1', 'm9') 2")
    assert printed[1] == (
        "Please read the context in the following priority order: [Doc 2] > [Doc 3] > [Doc 1] and answer the question."
    )
    assert printed[2] == "((1, 2, 3), (1, 2, 6), (1, 4, 0)) (0, 1, 2)"
    assert printed[3] == "Please refer to [Doc 1] in the previous conversation (turn 1)."


def test_mem0_example_runs():
    section = README.read_text().split("## Mem0: `ContextPilotMemory`", 1)[1]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "README-mem0", "exec"), {})
    printed = out.getvalue()
    assert "'Alice moved to Lisbon in 2023.'" in printed
    assert "Bob" not in printed  # another user's memory never shows up
    assert printed.rstrip().splitlines()[-1].count("in the previous conversation (turn 1)") >= 1
    assert "Question: Where does Alice live?\nAnswer:" in printed


def test_every_python_example_runs_as_written(tmp_path, monkeypatch):
    """Each ```python block of the README runs in a fresh namespace, in an empty folder (a newcomer's)."""
    from tests.mem0_fixtures import require_mem0

    require_mem0()
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), re.S)
    assert len(blocks) >= 3
    monkeypatch.chdir(tmp_path)
    for i, code in enumerate(blocks, start=1):
        with contextlib.redirect_stdout(io.StringIO()):
            exec(compile(code, f"README-python-{i}", "exec"), {})
