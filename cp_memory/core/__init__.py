"""The paper core: context blocks, the context index and its alignment, scheduling, multi-turn dedup,
annotations and cache-stable rendering.

Standard library, numpy and scipy only (no mem0, pydantic, httpx or torch); every other part of cp_memory
builds on it and nothing here imports them (tests/test_architecture.py). Import from the modules
(``cp_memory.core.index``, ...); the package's most used names are also exported by :mod:`cp_memory`.
"""
