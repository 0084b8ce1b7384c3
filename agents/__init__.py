"""Agent workloads (Chain-of-Agents) with agent-aware routing on top of cp_memory."""
