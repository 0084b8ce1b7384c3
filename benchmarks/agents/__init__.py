"""Real agent harnesses (Claude Code, Codex) driven by a scripted model server, their recorded traces, and the
gateway's added latency.

- :mod:`benchmarks.agents.tasks`: the scripted tasks and the scratch folders they run in;
- :mod:`benchmarks.agents.scripted`: the scripted model server (Anthropic Messages, OpenAI Responses and Chat
  Completions, streamed and not) that answers with tool calls and records every request to a trace;
- :mod:`benchmarks.agents.trace`: trace files (JSONL, keys scrubbed) and the byte-stability checks;
- :mod:`benchmarks.agents.harnesses`: running ``claude -p`` and ``codex exec`` against a base URL;
- :mod:`benchmarks.agents.tap`, :mod:`benchmarks.agents.arms`, :mod:`benchmarks.agents.engines`,
  :mod:`benchmarks.agents.replay`, :mod:`benchmarks.agents.report`: the replay of a trace through each arm
  (passthrough, the gateway, ContextPilot, LiteLLM, Headroom) on a real or modelled prefix cache;
- ``python -m benchmarks.agents record``: record traces of the real harnesses;
- ``python -m benchmarks.agents replay`` (:mod:`benchmarks.agents.bench`): replay them (docs/agents.md).
"""
