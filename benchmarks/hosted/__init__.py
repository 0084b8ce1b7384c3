"""Hosted providers' prompt caches: mem0's documented patterns vs cp_memory (``python -m benchmarks.hosted``).

LoCoMo chats and one-shot questions through the official ``openai`` and ``anthropic`` SDKs, against a local
server that applies the providers' documented cache rules (or, with ``--base-url``, the real provider).
docs/hosted.md describes the workload, the arms and the results.
"""
