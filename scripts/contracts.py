"""Write docs/CONTRACTS.md from the code: every public package's ``__all__``, with signatures and the first
line of each docstring. Nothing is copied by hand, so the page cannot go stale: tests/test_contracts.py
fails when the committed page differs from what this script writes.

    .venv/bin/python scripts/contracts.py            # rewrite docs/CONTRACTS.md
    .venv/bin/python scripts/contracts.py --check    # exit 1 if it is stale
"""

from __future__ import annotations

import argparse
import dataclasses
import enum
import importlib
import inspect
import re
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "CONTRACTS.md"

#: the public packages, lowest layer first (the floors of docs/ARCHITECTURE.md)
PACKAGES = (
    "cp_memory",
    "cp_memory.render",
    "cp_memory.special_tokens",
    "cp_memory.memory",
    "cp_memory.providers",
    "cp_memory.engine",
    "cp_memory.agents",
    "cp_memory.mem0_proxy",
    "cp_memory.gateway",
    "cp_memory.state",
)

_ADDRESS = re.compile(r" at 0x[0-9a-f]+")


def _first_line(obj: Any) -> str:
    doc = inspect.getdoc(obj) or ""
    return doc.strip().split("\n\n", 1)[0].replace("\n", " ").strip()


def _signature(obj: Any) -> str:
    try:
        text = str(inspect.signature(obj))
    except (TypeError, ValueError):
        return "(...)"
    return _ADDRESS.sub("", text)


def _ours(obj: Any) -> bool:
    return str(getattr(obj, "__module__", "") or "").startswith("cp_memory")


def _public_methods(cls: type) -> dict[str, Any]:
    """Public methods and properties cp_memory defines on ``cls`` or its cp_memory bases (never a third
    party's: mem0's own methods are mem0's contract, and its version may change them)."""
    found: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        if not _ours(klass):
            continue
        for name, member in vars(klass).items():
            if name.startswith("_"):
                continue
            if inspect.isfunction(member) or isinstance(member, (property, classmethod, staticmethod)):
                found[name] = member
    return dict(sorted(found.items()))


def _method_line(cls: type, name: str, member: Any) -> str:
    if isinstance(member, property):
        return f"    @property {name}"
    function = getattr(member, "__func__", member)
    if hasattr(function, "__signature__"):  # a signature copied from mem0 (plus ours): mem0's contract
        return f"    {name}(...)  # mem0's signature, plus cp_memory's keyword-only options"
    return f"    {name}{_signature(getattr(cls, name))}"


def _describe(name: str, obj: Any) -> list[str]:
    if inspect.isclass(obj):
        if issubclass(obj, enum.Enum):
            values = ", ".join(repr(m.value) for m in obj)
            return [f"class {name}(Enum): {values}", f"    # {_first_line(obj)}"]
        if dataclasses.is_dataclass(obj):
            fields = ", ".join(f.name for f in dataclasses.fields(obj) if not f.name.startswith("_"))
            head = f"@dataclass class {name}: {fields}"
        else:
            bases = ", ".join(b.__name__ for b in obj.__bases__ if b is not object)
            head = f"class {name}({bases})" if bases else f"class {name}"
        lines = [head, f"    # {_first_line(obj)}"]
        if not issubclass(obj, BaseException):
            if _ours(obj.__init__) or dataclasses.is_dataclass(obj) or obj.__init__ is object.__init__:
                lines.append(f"    __init__{_signature(obj)}")
            else:
                lines.append("    __init__(...)  # the base class's")
            lines += [_method_line(obj, n, m) for n, m in _public_methods(obj).items()]
        return lines
    if callable(obj):
        return [f"def {name}{_signature(obj)}", f"    # {_first_line(obj)}"]
    return [f"{name}: {type(obj).__name__}"]


def render() -> str:
    out = [
        "# Contracts: the public API, generated from the code",
        "",
        "Written by `scripts/contracts.py` from each public package's `__all__` (signatures and the first line of",
        "each docstring); `tests/test_contracts.py` fails when this page is stale. Read the docstrings for the",
        "full contract; the layers and what may import what are in [ARCHITECTURE.md](ARCHITECTURE.md).",
    ]
    for package in PACKAGES:
        module = importlib.import_module(package)
        out += ["", f"## `{package}`", "", f"{_first_line(module)}", "", "```python"]
        for name in sorted(getattr(module, "__all__", ())):
            out += _describe(name, getattr(module, name))
        out.append("```")
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/CONTRACTS.md is stale")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if PAGE.read_text() != text:
            sys.stderr.write("docs/CONTRACTS.md is stale: run scripts/contracts.py\n")
            return 1
        return 0
    PAGE.write_text(text)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
