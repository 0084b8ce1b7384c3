"""Agent-framework integrations: the cache-stable prompt layout, inside each framework.

One module per framework, each behind its own optional extra and imported only when used, so
``import cp_memory`` stays light:

=========================================  ================================  ======================
module                                     what it gives                     extra
=========================================  ================================  ======================
:mod:`cp_memory.integrations.langgraph`    LangChain messages / a graph node  ``cp-memory[langgraph]``
:mod:`cp_memory.integrations.llamaindex`   a ``Mem0Memory`` subclass          ``cp-memory[llamaindex]``
:mod:`cp_memory.integrations.openai_agents` a memory tool + run hooks         ``cp-memory[openai-agents]``
=========================================  ================================  ======================

All three share :mod:`cp_memory.integrations.chat`: a fixed system prompt, the history, then the
memories (aligned, de-duplicated, annotated) late in the conversation, never in the system message;
two layouts, ``"late"`` and ``"append"`` (see :data:`~cp_memory.integrations.chat.Layout`).
docs/integrations.md has runnable examples and the measured effect.
"""

from __future__ import annotations

__all__ = ["chat", "langgraph", "llamaindex", "openai_agents"]
