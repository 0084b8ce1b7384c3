"""LoCoMo TTFT benchmark: Mem0 retrieval, baseline vs ContextPilot alignment, on a real engine, fairly.

``python -m benchmarks.locomo --quick`` (see :mod:`benchmarks.locomo.cli` and docs/locomo.md); the run as a
function is :func:`benchmarks.locomo.run.run_benchmark`. This package imports nothing itself, so the
stdlib-only modules (``metrics``, ``export``) import without mem0, cp_memory or numpy (``benchmarks.replay``
runs on a bare machine).
"""
