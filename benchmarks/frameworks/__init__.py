"""Framework integrations benchmark: mem0's documented LangGraph / LlamaIndex / OpenAI Agents SDK patterns vs
cp_memory's integrations, measured at the engine through each framework's own model client
(``python -m benchmarks.frameworks``; see docs/integrations.md)."""
