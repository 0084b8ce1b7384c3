"""Multi-replica mem0 serving: baseline vs aligned context under round-robin, sglang-router and
user-affinity routing over several llama-server replicas.

    .venv/bin/python -m benchmarks.scale --replicas 3 --conversations 0-3 --questions 20

See docs/scale.md.
"""
