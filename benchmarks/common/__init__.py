"""Shared by the benchmarks and the tests, never imported by cp_memory (not installed with it).

:mod:`benchmarks.common.cache_model` — a deterministic model of an engine's prefix cache (the
``model-cache`` engine of the benchmarks, checked against llama-server by the tests);
:mod:`benchmarks.common.provider_cache` — models of the OpenAI and Anthropic prompt caches after their
documented rules (:mod:`cp_memory.providers.rules`); :mod:`benchmarks.common.locomo` — the LoCoMo loader;
:mod:`benchmarks.common.harness` — the one harness (machine, envelope, outputs, shared options) and
:mod:`benchmarks.common.config` — a benchmark's typed config, parsed from those options.

The LoCoMo kit every benchmark stands on: :mod:`benchmarks.common.ingest` (conversations into mem0, one user
per speaker), :mod:`benchmarks.common.modes` (the modes, the cached search, the mode builder),
:mod:`benchmarks.common.metrics` (LoCoMo's F1, mean, percentile) and :mod:`benchmarks.common.export` (the
prompt export that ``benchmarks.replay`` reads).
"""
