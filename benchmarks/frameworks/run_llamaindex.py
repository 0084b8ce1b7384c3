"""LlamaIndex arms. Baseline: mem0's LlamaIndex guide (docs.mem0.ai/integrations/llama-index):
``SimpleChatEngine.from_defaults(llm=llm, memory=Mem0Memory(...))`` (``llama-index-memory-mem0``), whose ``get``
adds a system message with the memories in front of the chat history. The cp arms pass a
``ContextPilotMem0Memory`` instead. The model client is LlamaIndex's ``OpenAILike``; turns use ``stream_chat``
(streamed, so TTFT is measurable)."""

from __future__ import annotations

from typing import Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.chat_engine import SimpleChatEngine
from llama_index.core.memory import Memory as LlamaIndexMemory
from llama_index.llms.openai_like import OpenAILike
from llama_index.memory.mem0 import Mem0Memory

from cp_memory.integrations.llamaindex import ContextPilotMem0Memory

from .arms import FrameworkRunner
from .probe import EngineProbe
from .workload import Chat, TurnRecord, fixed_answer


class LlamaIndexRunner(FrameworkRunner):
    name = "llamaindex"
    arms = ("mem0", "cp-append", "cp-late")

    def _memory(self, arm: str, chat: Chat) -> Any:
        context = {"user_id": self.user_id}
        primary = LlamaIndexMemory.from_defaults()
        if arm == "mem0":
            return Mem0Memory(context=context, client=self.baseline_store, primary_memory=primary)
        return ContextPilotMem0Memory(
            context=context,
            client=self.cp[arm],
            primary_memory=primary,
            layout="append" if arm == "cp-append" else "late",
            top_k=self.top_k,
            conversation_id=f"{arm}-chat{chat.index}",
            write_back=False,
        )

    def chat(self, arm: str, base_url: str, probe: EngineProbe, chat: Chat, answers: str) -> list[TurnRecord]:
        llm = OpenAILike(
            api_base=f"{base_url}/v1",
            api_key="none",
            model="local",
            is_chat_model=True,
            max_tokens=self.max_tokens,
            temperature=0,
            http_client=probe.client(),
        )
        memory = self._memory(arm, chat)
        engine = SimpleChatEngine.from_defaults(llm=llm, memory=memory)
        out = []
        for turn, question in enumerate(chat.questions, start=1):
            mark = probe.mark()
            response = engine.stream_chat(question)
            text = "".join(response.response_gen)
            if response.write_response_to_history_thread is not None:
                response.write_response_to_history_thread.join()
            out.append(self.record(arm, answers, chat, turn, self.answer_exchange(probe, mark), text))
            if answers == "fixed":
                history = memory.primary_memory.get_all()
                assert history and history[-1].role == MessageRole.ASSISTANT
                history[-1] = ChatMessage(role=MessageRole.ASSISTANT, content=fixed_answer(question))
                memory.primary_memory.set(history)
        return out
