"""Moved to :mod:`benchmarks.common.ingest`; only the names ``benchmarks.quality`` still imports from here."""

from benchmarks.common.ingest import Ingested, ingest, make_memory, user_memories

__all__ = ["Ingested", "ingest", "make_memory", "user_memories"]
