"""One exception tree for the engine side: everything a client call or a managed engine's start() raises
for an engine fault is an ``EngineError``, exported by ``cp_memory.engine``."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

pytest.importorskip("httpx", reason="cp_memory.engine needs the engine extra")

import cp_memory.engine as engine
from cp_memory.engine import (
    EngineError,
    LlamaServerNotFound,
    ServerStartError,
    SGLangRouterUnavailable,
    SGLangUnavailable,
)

#: raised and caught inside the client's retry loop, never seen by a caller
INTERNAL = {"cp_memory.engine.errors.RetryableStatus"}


def _engine_exceptions() -> dict[str, type[BaseException]]:
    found = {}
    for info in pkgutil.iter_modules(engine.__path__, "cp_memory.engine."):
        module = importlib.import_module(info.name)
        for name, obj in vars(module).items():
            if inspect.isclass(obj) and issubclass(obj, BaseException) and obj.__module__ == module.__name__:
                found[f"{module.__name__}.{name}"] = obj
    return found


def test_start_errors_are_engine_errors_exported_by_the_package():
    assert issubclass(ServerStartError, EngineError)
    assert issubclass(SGLangUnavailable, ServerStartError)
    assert issubclass(SGLangRouterUnavailable, ServerStartError)
    assert issubclass(LlamaServerNotFound, EngineError) and issubclass(LlamaServerNotFound, FileNotFoundError)


def test_every_public_engine_exception_is_in_the_tree_and_exported():
    exceptions = _engine_exceptions()
    assert "cp_memory.engine.errors.ServerStartError" in exceptions
    for qualname, cls in exceptions.items():
        if qualname in INTERNAL:
            continue
        assert issubclass(cls, EngineError), f"{qualname} is not an EngineError"
        assert cls.__name__ in engine.__all__, f"{qualname} is not exported by cp_memory.engine"
        assert getattr(engine, cls.__name__) is cls
