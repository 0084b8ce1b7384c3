"""LoCoMo TTFT benchmark: Mem0 retrieval, baseline vs ContextPilot alignment, on a real engine, fairly.

``python -m benchmarks.locomo --quick`` (see :mod:`benchmarks.locomo.cli` and docs/locomo.md).

The names below load lazily, so the stdlib-only modules (``metrics``, ``export``) import without mem0,
cp_memory or numpy (``benchmarks.replay`` runs on a bare machine).
"""

from __future__ import annotations

from typing import Any

__all__ = ["BenchConfig", "BenchResult", "main", "run_benchmark"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        from . import cli

        return getattr(cli, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
