"""Shared by the benchmarks and the tests, never imported by cp_memory (not installed with it).

:mod:`benchmarks.common.cache_model` — a deterministic model of an engine's prefix cache (the
``model-cache`` engine of the benchmarks, checked against llama-server by the tests);
:mod:`benchmarks.common.provider_cache` — models of the OpenAI and Anthropic prompt caches after their
documented rules (:mod:`cp_memory.providers.rules`); :mod:`benchmarks.common.locomo` — the LoCoMo loader.
"""
