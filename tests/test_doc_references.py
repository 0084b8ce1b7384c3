"""The docs cite tests as proof ("tests/x.py::test_y"): every cited test file and test name exists, so a
guarantee is never backed by a test that was renamed or removed."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CITED_FILE = re.compile(r"`?(tests/[\w/]+\.py)")
CITED_TEST = re.compile(r"(?<![\w/])(tests/[\w/]+\.py)?::(test_\w+)")


def _defined_tests() -> set[str]:
    names: set[str] = set()
    for path in (ROOT / "tests").rglob("*.py"):
        names.update(re.findall(r"^\s*(?:async )?def (test_\w+)", path.read_text(), re.M))
    return names


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_every_cited_test_exists(page: Path) -> None:
    text = page.read_text()
    missing_files = sorted({f for f in CITED_FILE.findall(text) if not (ROOT / f).is_file()})
    defined = _defined_tests()
    missing_tests = sorted({name for _, name in CITED_TEST.findall(text) if name not in defined})
    assert not missing_files and not missing_tests, f"{page.name} cites {missing_files + missing_tests}"
