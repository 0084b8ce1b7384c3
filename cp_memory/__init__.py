"""cp_memory: ContextPilot-style context reuse for Mem0 and agent frameworks."""
