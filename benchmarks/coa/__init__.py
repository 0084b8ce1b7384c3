"""Chain-of-Agents routing benchmark: round-robin vs agent-aware routing on llama-server workers.

    .venv/bin/python -m benchmarks.coa                     # defaults: 3 workers, random-weight model
    .venv/bin/python -m benchmarks.coa --model smollm2 --questions 4

See docs/coa.md for the setup and the numbers.
"""
