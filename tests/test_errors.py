"""One error tree: everything cp_memory raises on purpose is a ``CPMemoryError``, so one ``except`` catches it
all; each package's errors derive from the package's base and live in its ``errors`` module; and each keeps the
builtin exception callers caught before (``except ValueError`` / ``TimeoutError`` / ... still work).

tests/test_architecture.py finds every exception class by parsing (a new one outside an ``errors`` module fails
there without importing anything); this file imports them and checks their bases.
"""

from __future__ import annotations

import importlib
import inspect
from types import ModuleType

import pytest

import cp_memory
from cp_memory.core.errors import CPMemoryError
from tests.support import missing
from tests.test_architecture import ERROR_LAYERS, MODULES

#: every package of cp_memory (what users import names from)
PACKAGES = sorted(name for name, path in MODULES.items() if path.name == "__init__.py")


def _import(name: str) -> ModuleType:
    """The module, or a skip (a failure in strict mode) naming the extra it needs."""
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and not exc.name.startswith("cp_memory"):
            missing(f"{name} needs an optional extra: {exc}")
        raise


def _layer_base(layer: str) -> type[BaseException]:
    base = getattr(_import(f"{layer}.errors"), ERROR_LAYERS[layer])
    assert inspect.isclass(base) and issubclass(base, BaseException)
    return base


def _exported_exceptions(package: ModuleType) -> dict[str, type[BaseException]]:
    found = {}
    for name in getattr(package, "__all__", ()):
        if f"{package.__name__}.{name}" in MODULES:
            continue  # a submodule (``cp_memory.integrations.chat``), not a class
        try:
            obj = getattr(package, name)
        except ModuleNotFoundError as exc:  # a lazy export whose extra is missing
            missing(f"{package.__name__}.{name} needs an optional extra: {exc}")
        if inspect.isclass(obj) and issubclass(obj, BaseException):
            found[name] = obj
    return found


def test_the_root_is_exported_by_the_package_and_every_layer_base_derives_from_it():
    assert cp_memory.CPMemoryError is CPMemoryError and "CPMemoryError" in cp_memory.__all__
    assert CPMemoryError.__bases__ == (Exception,)
    for layer in sorted(set(ERROR_LAYERS) - {"cp_memory.core"}):
        assert _layer_base(layer).__bases__[0] is CPMemoryError, f"{layer}'s base derives from the root first"


@pytest.mark.parametrize("layer", sorted(ERROR_LAYERS))
def test_every_exception_of_a_layers_errors_module_derives_from_the_layer_base(layer):
    module, base = _import(f"{layer}.errors"), _layer_base(layer)
    defined = {
        name: obj
        for name, obj in vars(module).items()
        if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == module.__name__
    }
    assert base.__name__ in defined
    for name, cls in defined.items():
        assert issubclass(cls, CPMemoryError) and issubclass(cls, base), f"{layer}.errors.{name}"
        assert name in module.__all__, f"{layer}.errors.{name} is not in its __all__"


@pytest.mark.parametrize("package", PACKAGES)
def test_every_exception_a_package_exports_is_in_its_layers_tree(package):
    """Walks each package's ``__all__``: an exception exported anywhere is a ``CPMemoryError`` defined in its
    layer's errors module, under the layer's base."""
    for name, cls in _exported_exceptions(_import(package)).items():
        layer = ".".join(cls.__module__.split(".")[:2])
        assert layer in ERROR_LAYERS and cls.__module__ == f"{layer}.errors", f"{package}.{name}: {cls.__module__}"
        assert issubclass(cls, CPMemoryError) and issubclass(cls, _layer_base(layer)), f"{package}.{name}"


#: the builtin exception each class was caught as before the tree (and still is)
BUILTIN_BASES = {
    "cp_memory.engine.errors.EngineError": (RuntimeError,),
    "cp_memory.engine.errors.EngineTimeout": (TimeoutError,),
    "cp_memory.engine.errors.EngineDeadlineExceeded": (TimeoutError,),
    "cp_memory.engine.errors.MalformedEvents": (ValueError,),
    "cp_memory.engine.errors.VLLMModelError": (ValueError,),
    "cp_memory.engine.errors.LlamaServerNotFound": (FileNotFoundError,),
    "cp_memory.state.errors.ForeignRecord": (ValueError,),
    "cp_memory.state.errors.LostRecord": (ValueError,),
    "cp_memory.agents.errors.ChainOfAgentsError": (RuntimeError,),
    "cp_memory.memory.errors.FiltersTypeError": (TypeError, AttributeError),
}


@pytest.mark.parametrize("qualname", sorted(BUILTIN_BASES))
def test_every_class_keeps_the_builtin_exception_callers_catch(qualname):
    module, name = qualname.rsplit(".", 1)
    cls = getattr(_import(module), name)
    for builtin in BUILTIN_BASES[qualname]:
        assert issubclass(cls, builtin), f"{qualname} is no longer a {builtin.__name__}"


@pytest.mark.parametrize(
    "old_path",
    [
        "cp_memory.engine._server.ServerStartError",
        "cp_memory.engine.vllm.VLLMUnavailable",
        "cp_memory.engine.vllm.VLLMModelError",
        "cp_memory.engine.sglang.SGLangUnavailable",
        "cp_memory.engine.router.SGLangRouterUnavailable",
        "cp_memory.engine.llamacpp.LlamaServerNotFound",
        "cp_memory.engine.kv_wire.MalformedEvents",
        "cp_memory.engine.kv_events.MalformedEvents",
        "cp_memory.engine.answers.RetryableStatus",
        "cp_memory.state.store.StoreUnavailable",
        "cp_memory.state.records.ForeignRecord",
        "cp_memory.state.records.LostRecord",
        "cp_memory.agents.records.ChainOfAgentsError",
        "cp_memory.memory.wrappers.FiltersTypeError",
    ],
)
def test_the_import_paths_from_before_the_tree_still_work(old_path):
    module, name = old_path.rsplit(".", 1)
    cls = getattr(_import(module), name)
    assert cls.__module__.endswith(".errors") and issubclass(cls, CPMemoryError)


def test_one_except_catches_an_engine_fault_a_store_outage_and_a_failed_chain():
    from cp_memory.agents.errors import ChainOfAgentsError
    from cp_memory.state.errors import StoreUnavailable

    engine_timeout = _import("cp_memory.engine.errors").EngineTimeout
    chain = ChainOfAgentsError("worker 0 failed", question="q", role="worker", step=0, worker_name="w0")
    for fault in (engine_timeout("read timed out"), StoreUnavailable("redis is down"), chain):
        try:
            raise fault
        except CPMemoryError as caught:
            assert caught is fault
