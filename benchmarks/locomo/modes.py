"""Moved to :mod:`benchmarks.common.modes`; only the names ``benchmarks.quality`` still imports from here."""

from benchmarks.common.modes import CachedSearch, KSpec, ModeBuilder, ModeSpec, parse_mode

__all__ = ["CachedSearch", "KSpec", "ModeBuilder", "ModeSpec", "parse_mode"]
