"""LangGraph arms. Baseline: mem0's LangGraph guide (docs.mem0.ai/integrations/langgraph): a ``chatbot`` node
that searches mem0 with the newest message and calls ``ChatOpenAI`` with
``[SystemMessage(instructions + memories)] + messages``; the state is ``messages`` (``add_messages``) and
``mem0_user_id``. The cp arms replace the node by ``memory_node(MemoryPrompt(...), llm)``."""

from __future__ import annotations

from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages

from cp_memory.integrations.chat import Layout
from cp_memory.integrations.langgraph import MemoryPrompt, memory_node

from .arms import FrameworkRunner
from .probe import EngineProbe
from .workload import Chat, TurnRecord, fixed_answer

INSTRUCTIONS = (
    "You are a helpful customer support assistant. Use the provided context to personalize your "
    "responses and remember user preferences and past interactions."
)


class State(TypedDict):
    messages: Annotated[list[BaseMessage], add_messages]
    mem0_user_id: str


class LangGraphRunner(FrameworkRunner):
    name = "langgraph"
    arms = ("mem0", "cp-append", "cp-late")

    def _llm(self, base_url: str, probe: EngineProbe) -> ChatOpenAI:
        return ChatOpenAI(
            base_url=f"{base_url}/v1",
            api_key="none",
            model="local",
            temperature=0,
            max_tokens=self.max_tokens,
            streaming=True,
            stream_usage=True,
            http_client=probe.client(),
        )

    def _mem0_node(self, llm: ChatOpenAI) -> Any:
        mem0 = self.baseline_store

        def chatbot(state: State) -> dict[str, Any]:  # the guide's node, minus its mem0.add
            messages = state["messages"]
            memories = mem0.search(messages[-1].text, user_id=state["mem0_user_id"])
            context = "Relevant information from previous conversations:\n"
            for memory in memories["results"]:
                context += f"- {memory['memory']}\n"
            system_message = SystemMessage(content=f"{INSTRUCTIONS}\n{context}")
            response = llm.invoke([system_message, *messages])
            return {"messages": [response]}

        return chatbot

    def chat(self, arm: str, base_url: str, probe: EngineProbe, chat: Chat, answers: str) -> list[TurnRecord]:
        llm = self._llm(base_url, probe)
        if arm == "mem0":
            node = self._mem0_node(llm)
        else:
            layout: Layout = "append" if arm == "cp-append" else "late"
            node = memory_node(MemoryPrompt(self.cp[arm], system=INSTRUCTIONS, layout=layout, top_k=self.top_k), llm)
        graph = StateGraph(State)
        graph.add_node("chatbot", node)
        graph.add_edge(START, "chatbot")
        app = graph.compile(checkpointer=InMemorySaver())
        config: Any = {"configurable": {"thread_id": f"{arm}-chat{chat.index}"}}
        out = []
        for turn, question in enumerate(chat.questions, start=1):
            mark = probe.mark()
            state = app.invoke({"messages": [HumanMessage(question)], "mem0_user_id": self.user_id}, config)
            reply = state["messages"][-1]
            out.append(self.record(arm, answers, chat, turn, self.answer_exchange(probe, mark), str(reply.content)))
            if answers == "fixed":
                app.update_state(config, {"messages": [AIMessage(content=fixed_answer(question), id=reply.id)]})
        return out
