"""Chain-of-Agents routing benchmark on llama-server workers: round-robin vs SGLang's router
(``sglang-router --policy cache_aware``) vs agent-aware routing, single- and multi-turn, in one run.

    .venv/bin/python -m benchmarks.coa                       # defaults: 3 workers, random-weight model
    .venv/bin/python -m benchmarks.coa.breakdown docs/results/coa_routing.json single

See docs/coa.md for the setup and the numbers.
"""
