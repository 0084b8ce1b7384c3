"""LoCoMo TTFT benchmark: Mem0 retrieval, baseline vs ContextPilot alignment, on a real engine, fairly.

``python -m benchmarks.locomo --quick`` (see :mod:`benchmarks.locomo.cli` and docs/locomo.md).
"""
from __future__ import annotations

from .cli import BenchConfig, BenchResult, main, run_benchmark

__all__ = ["BenchConfig", "BenchResult", "main", "run_benchmark"]
