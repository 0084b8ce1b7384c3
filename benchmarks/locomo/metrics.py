"""Moved to :mod:`benchmarks.common.metrics`; only the names ``benchmarks.quality`` still imports from here."""

from benchmarks.common.metrics import QUALITY_CATEGORIES, clean_answer, locomo_f1, normalize_answer

__all__ = ["QUALITY_CATEGORIES", "clean_answer", "locomo_f1", "normalize_answer"]
