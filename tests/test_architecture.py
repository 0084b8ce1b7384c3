"""docs/ARCHITECTURE.md stays true: the floors hold, every module is on the map, every module it names imports,
and the design rules hold: no upward import, no cycle between the package's rooms, no private name imported
across modules, one definition per public name, every public exception in its package's errors module, no
function over 60 lines.

The floors are checked by parsing every module's imports (``ast``), so they hold without the optional
extras installed; only the test that imports the named modules needs them (a module whose extra is missing
is skipped, or fails in strict mode: tests/support.py).
"""

from __future__ import annotations

import ast
import builtins
import functools
import importlib
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import missing

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "cp_memory"
DOC = ROOT / "docs" / "ARCHITECTURE.md"
TEXT = DOC.read_text()
NAMED = sorted(set(re.findall(r"`(cp_memory(?:\.[a-z_0-9]+)+)`", TEXT)))

#: the public re-exports: users import them, code inside the package imports where things live
FRONT = {"cp_memory", "cp_memory.render", "cp_memory.special_tokens"}
#: what the floor-0 modules may import besides the standard library and themselves
FLOOR0_THIRD_PARTY = {"numpy", "scipy"}


def _floors() -> dict[str, int]:
    """The "Floors" table of docs/ARCHITECTURE.md: module or package prefix -> floor."""
    section = TEXT.split("## Floors", 1)[1].split("\n## ", 1)[0]
    floors = {}
    for number, names in re.findall(r"^\| (\d) \| (.+?) \|", section, flags=re.M):
        for name in re.findall(r"`(cp_memory(?:\.[a-z_0-9]+)*)`", names):
            floors[name] = int(number)
    assert floors, "docs/ARCHITECTURE.md has no Floors table"
    return floors


FLOORS = _floors()


def _modules(folder: Path = PACKAGE) -> dict[str, Path]:
    """Every module under ``folder`` (the package, or the benchmarks), found on disk (importing nothing)."""
    out = {}
    for path in sorted(folder.rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


@functools.cache
def _tree(path: Path) -> ast.Module:
    """A module parsed once for every rule."""
    return ast.parse(path.read_text(), str(path))


MODULES = _modules()


def _target(package: str, node: ast.ImportFrom) -> str:
    """The absolute module of ``from x import ...`` written in ``package`` (relative imports resolved)."""
    if not node.level:
        return node.module or ""
    base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _from_imports(name: str, path: Path) -> list[tuple[int, str, str]]:
    """(line, absolute module, imported name) for every ``from x import y`` of a module."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    return [
        (node.lineno, _target(package, node), alias.name)
        for node in ast.walk(_tree(path))
        if isinstance(node, ast.ImportFrom)
        for alias in node.names
    ]


def _imports(name: str, path: Path) -> list[tuple[int, str]]:
    """(line, absolute module) for every import in the module, relative ones resolved; ``from x import y``
    yields ``x.y`` when that is a module of the package, else ``x``."""
    found = [
        (node.lineno, alias.name)
        for node in ast.walk(_tree(path))
        if isinstance(node, ast.Import)
        for alias in node.names
    ]
    for line, target, imported in _from_imports(name, path):
        sub = f"{target}.{imported}"
        found.append((line, sub if sub in MODULES else target))
    return sorted(found)


def _private(name: str) -> bool:
    """``_helper`` (not a dunder such as ``__version__``)."""
    return name.startswith("_") and not name.startswith("__")


def _floor(module: str) -> tuple[str, int]:
    """The Floors entry a module falls under (the longest prefix; ``cp_memory`` only for itself)."""
    if module == "cp_memory":
        return module, FLOORS[module]
    best = max((p for p in FLOORS if p != "cp_memory" and (module == p or module.startswith(p + "."))), key=len)
    return best, FLOORS[best]


def _package(module: str) -> str:
    return ".".join(module.split(".")[:2])


def _internal_imports() -> list[tuple[str, int, str]]:
    return [
        (name, line, target)
        for name, path in MODULES.items()
        for line, target in _imports(name, path)
        if target == "cp_memory" or target.startswith("cp_memory.")
    ]


def test_every_module_is_on_the_floors():
    unplaced = []
    for name in MODULES:
        try:
            _floor(name)
        except ValueError:
            unplaced.append(name)
    assert unplaced == [], f"modules on no floor of docs/ARCHITECTURE.md: {unplaced}"


def test_no_module_imports_a_higher_floor():
    """core <- embedded / engine / providers <- memory <- agents / integrations (docs/ARCHITECTURE.md)."""
    wrong = []
    for name, line, target in _internal_imports():
        (_, mine), (_, theirs) = _floor(name), _floor(target)
        if theirs > mine:
            wrong.append(f"{name}:{line} imports {target} (floor {mine} imports floor {theirs})")
        elif theirs == mine and _package(name) != _package(target):
            wrong.append(f"{name}:{line} imports {target} (another package on floor {mine})")
    assert wrong == []


def test_the_package_imports_the_core_where_it_lives_never_its_public_re_exports():
    wrong = [f"{name}:{line} imports {target}" for name, line, target in _internal_imports() if target in FRONT]
    assert wrong == []


def test_floor_zero_needs_only_the_standard_library_numpy_and_scipy():
    allowed = set(sys.stdlib_module_names) | FLOOR0_THIRD_PARTY | {"cp_memory", "__future__"}
    wrong = [
        f"{name}:{line} imports {target}"
        for name, path in MODULES.items()
        if _floor(name)[1] == 0
        for line, target in _imports(name, path)
        if target.split(".")[0] not in allowed
    ]
    assert wrong == []


def test_the_package_never_imports_the_benchmarks_or_the_tests():
    wrong = [
        f"{name}:{line} imports {target}"
        for name, path in MODULES.items()
        for line, target in _imports(name, path)
        if target.split(".")[0] in ("benchmarks", "tests")
    ]
    assert wrong == []


def test_every_module_is_on_the_map():
    missing_ = sorted(set(MODULES) - set(NAMED) - {"cp_memory"})
    assert missing_ == [], f"modules missing from docs/ARCHITECTURE.md: {missing_}"


def test_the_map_names_only_modules_that_exist():
    gone = sorted(n for n in NAMED if n not in MODULES)
    assert gone == [], f"docs/ARCHITECTURE.md names modules that do not exist: {gone}"


@pytest.mark.slow  # imports every extra (mem0, torch, the SDKs): the full tier only
@pytest.mark.parametrize("name", NAMED)
def test_every_named_module_imports(name):
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and not exc.name.startswith("cp_memory"):
            missing(f"{name} needs an optional extra: {exc}")
        raise


def test_the_core_imports_no_io_stack():
    """The core needs only numpy and scipy: importing it must not pull mem0, httpx or pydantic."""
    core = sorted(n for n in MODULES if _floor(n)[1] == 0 or n in FRONT)
    code = (
        f"import importlib, sys\nfor m in {core!r}: importlib.import_module(m)\n"
        "heavy = [m for m in ('mem0', 'httpx', 'pydantic', 'torch', 'qdrant_client') if m in sys.modules]\n"
        "print(','.join(heavy))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == ""


#: the most lines a function or method may take (``end_lineno - lineno + 1``, docstring included)
MAX_FUNCTION_LINES = 60


def _function_lengths() -> dict[str, int]:
    """``path::Class.function`` (nested functions too) -> its lines, for every function of the package and
    of the benchmarks."""
    lengths: dict[str, int] = {}

    def visit(node: ast.AST, path: str, scope: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                name = f"{scope}.{child.name}" if scope else child.name
                if not isinstance(child, ast.ClassDef):
                    assert child.end_lineno is not None
                    lengths[f"{path}::{name}"] = child.end_lineno - child.lineno + 1
                visit(child, path, name)
            else:
                visit(child, path, scope)

    for path in [*MODULES.values(), *sorted((ROOT / "benchmarks").rglob("*.py"))]:
        rel = path.relative_to(ROOT).as_posix()
        visit(_tree(path), rel, "")
    return lengths


def test_no_function_is_over_60_lines():
    """Small functions, one step each: a longer one is split into named steps (docs/ARCHITECTURE.md)."""
    lengths = _function_lengths()
    too_long = {name: n for name, n in lengths.items() if n > MAX_FUNCTION_LINES}
    assert too_long == {}, f"functions over {MAX_FUNCTION_LINES} lines: split them into named steps"


def _rooms() -> dict[str, set[str]]:
    """The package's rooms (``cp_memory.core``, ``cp_memory.memory``, ...) -> the rooms each imports."""
    graph: dict[str, set[str]] = {_package(name): set() for name in MODULES}
    for name, _, target in _internal_imports():
        if _package(name) != _package(target):
            graph[_package(name)].add(_package(target))
    return graph


def test_no_cycle_between_the_packages_rooms():
    """Rooms import one way: no room reaches itself through the rooms it imports (depth-first search)."""
    graph, cycles = _rooms(), []

    def reach(room: str, path: list[str]) -> None:
        for nxt in sorted(graph.get(room, ())):
            if nxt == path[0]:
                cycles.append(" -> ".join([*path, nxt]))
            elif nxt not in path:
                reach(nxt, [*path, nxt])

    for room in sorted(graph):
        reach(room, [room])
    assert cycles == []


def test_no_cycle_between_modules():
    """No module reaches itself through the modules it imports, a function-level or TYPE_CHECKING import
    included (a factory that imports its implementation lazily lives above both; a shared record lives
    below both): strongly connected components of the module graph (Tarjan) must all be single modules."""
    graph: dict[str, set[str]] = {name: set() for name in MODULES}
    for name, _, target in _internal_imports():
        if target in MODULES and target != name:
            graph[name].add(target)
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles: list[list[str]] = []

    def visit(v: str) -> None:
        order[v] = low[v] = len(order)
        stack.append(v)
        for w in sorted(graph[v]):
            if w not in order:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], order[w])
        if low[v] == order[v]:
            component = [stack.pop()]
            while component[-1] != v:
                component.append(stack.pop())
            if len(component) > 1:
                cycles.append(sorted(component))

    for name in sorted(graph):
        if name not in order:
            visit(name)
    assert cycles == []


#: private names imported across modules, each with why it waits: empty since issue 33 (a shared piece is
#: public in its owner module); an entry needs a reason and is refused once no longer needed
PRIVATE_IMPORTS_ALLOWED: dict[tuple[str, str], str] = {}


def test_no_private_name_is_imported_across_modules():
    """A ``_name`` is its module's own: another module (of the package or of the benchmarks) that needs it
    needs a public name. A package may import its own private *modules* (``cp_memory.engine._server`` inside
    ``cp_memory.engine``); nothing outside the package imports them (``ManagedServer`` is exported by
    ``cp_memory.engine``)."""
    wrong, seen = [], set()
    for name, path in {**MODULES, **_modules(ROOT / "benchmarks")}.items():
        for line, target, imported in _from_imports(name, path):
            where = f"{target}.{imported}"
            if _private(imported) and where not in MODULES:
                seen.add((name, where))
                if (name, where) not in PRIVATE_IMPORTS_ALLOWED:
                    wrong.append(f"{name}:{line} imports the private name {where}")
            parts = where.split(".") if where in MODULES else target.split(".")
            if parts[0] == "cp_memory" and any(_private(p) for p in parts):
                inside = _package(name) == _package(".".join(parts))
                if not inside:
                    wrong.append(f"{name}:{line} imports the private module {'.'.join(parts)}")
    assert wrong == []
    stale = sorted(set(PRIVATE_IMPORTS_ALLOWED) - seen)
    assert stale == [], f"PRIVATE_IMPORTS_ALLOWED lists imports that are gone: {stale}"


#: public names (classes, functions) defined in more than one module, each with why: empty since issue 33
#: (one definition per name, distinct names for distinct things); ``main`` (an entry point's name) is exempt
DEFINED_TWICE_ALLOWED: dict[str, str] = {}


def test_one_definition_per_public_name():
    """A public class or function name means one thing: it is defined (at a module's top level) in one module
    of the package; other modules import it."""
    where: dict[str, set[str]] = {}
    for name, path in MODULES.items():
        for node in _tree(path).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name[0] != "_":
                where.setdefault(node.name, set()).add(name)
    twice = {n: sorted(m) for n, m in where.items() if len(m) > 1 and n != "main"}
    assert sorted(set(twice) - set(DEFINED_TWICE_ALLOWED)) == [], f"defined in several modules: {twice}"
    stale = sorted(set(DEFINED_TWICE_ALLOWED) - set(twice))
    assert stale == [], f"DEFINED_TWICE_ALLOWED lists names defined once now: {stale}"


#: the packages with errors of their own -> the base every one of them derives from (in ``<package>.errors``)
ERROR_LAYERS = {
    "cp_memory.core": "CPMemoryError",
    "cp_memory.engine": "EngineError",
    "cp_memory.state": "StateError",
    "cp_memory.memory": "MemoryLayerError",
    "cp_memory.agents": "AgentsError",
    "cp_memory.gateway": "UpstreamError",
}
_BUILTIN_EXCEPTIONS = {n for n, v in vars(builtins).items() if isinstance(v, type) and issubclass(v, BaseException)}


def _exceptions() -> set[tuple[str, str]]:
    """(module, name) of every top-level exception class of the package, found by parsing: a class with a
    builtin exception, a class of the package that is one, or a third party's ``...Error`` /
    ``...Exception`` among its bases."""
    classes = [
        (name, node.name, [ast.unparse(base) for base in node.bases])
        for name, path in MODULES.items()
        for node in _tree(path).body
        if isinstance(node, ast.ClassDef)
    ]
    bases_of: dict[str, list[str]] = {}
    for _, cls, bases in classes:
        bases_of.setdefault(cls, []).extend(bases)

    @functools.cache
    def is_exception(base: str) -> bool:
        if base in _BUILTIN_EXCEPTIONS or base.endswith(("Error", "Exception")):
            return True
        return any(is_exception(b) for b in bases_of.get(base, ()))

    return {(module, cls) for module, cls, bases in classes if any(is_exception(b) for b in bases)}


def test_every_public_exception_is_defined_in_its_packages_errors_module():
    """One error tree per package, in one module: a public exception class lives in ``<package>.errors`` of a
    package with an error base (``ERROR_LAYERS``); a private control-flow one (``_Corrupt``) stays where it
    is used. tests/test_errors.py imports the classes and checks their bases."""
    found = _exceptions()
    wrong = sorted(
        f"{module}.{cls}"
        for module, cls in found
        if not _private(cls) and (_package(module) not in ERROR_LAYERS or module != f"{_package(module)}.errors")
    )
    assert wrong == [], f"public exceptions outside their package's errors module: {wrong}"
    missing_bases = {(f"{layer}.errors", base) for layer, base in ERROR_LAYERS.items()} - found
    assert missing_bases == set()
