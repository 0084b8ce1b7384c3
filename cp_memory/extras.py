"""Optional extras: importing a part whose extra is missing raises an error naming the ``pip install``.

``import cp_memory`` needs only numpy and scipy; the mem0 wrappers, the engines and each framework
integration need their own extra (pyproject.toml). Without it, a bare ``ModuleNotFoundError: No module named
'langchain_core'`` tells a new user nothing about cp_memory; :func:`requires` turns it into one that says
which extra to install::

    with requires("langgraph", "cp_memory.integrations.langgraph"):
        from langchain_core.messages import HumanMessage

The error is still a ``ModuleNotFoundError`` (an ``ImportError``) for the same module name, so code that
probes for an optional part with ``except ImportError`` keeps working.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["install_hint", "requires"]


def install_hint(extra: str) -> str:
    """The command that installs ``extra``: ``pip install 'cp-memory[extra]'``."""
    return f"pip install 'cp-memory[{extra}]'"


@contextmanager
def requires(extra: str, feature: str) -> Iterator[None]:
    """Imports inside the block belong to ``extra``; a missing third-party module names it.

    A missing module of cp_memory itself is a broken install, not a missing extra: re-raised unchanged.
    """
    try:
        yield
    except ModuleNotFoundError as exc:
        missing = exc.name or ""
        if not missing or missing.split(".")[0] == "cp_memory":
            raise
        raise ModuleNotFoundError(
            f"{feature} needs the '{extra}' extra ({missing} is not installed): {install_hint(extra)}",
            name=missing,
        ) from exc
