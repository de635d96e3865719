"""One turn of a thread whose model repeats ids, run as a killable worker.

``python -m tests.helpers.turns_agent SPEC_JSON`` runs one turn ("remind me") of
``spec.thread`` (or resumes it) and prints one JSON line. The model behaves like the
model servers that broke turn identity: with ``ids="repeat"`` every tool-call
AIMessage has the id ``msg-1`` and its call the id ``call_0``; with ``ids="unique"``
both are fresh per answer. ``trim`` removes the earlier turns from the history
(``RemoveMessage``) before the model runs, as memory-managed agents do.

``schema``: ``add_messages`` (``messages`` with the ``add_messages`` reducer),
``list`` (a plain list with ``operator.add``: messages without ids), ``custom_key``
(``add_messages`` under the key ``chat``); ``kind``: ``node`` (a StateGraph with
``EffectToolNode``) or ``agent`` (``create_agent`` + ``EffectMiddleware``).
"""

from __future__ import annotations

import asyncio
import json
import operator
import os
import signal
import sys
import uuid
from dataclasses import asdict, dataclass
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, RemoveMessage, ToolMessage
from langchain_core.tools import BaseTool, tool
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import REMOVE_ALL_MESSAGES, add_messages

from langgraph_effects import AsyncEffectSqliteSaver, Effect
from langgraph_effects._integrations.middleware import EffectMiddleware
from langgraph_effects._integrations.node import EffectToolNode
from langgraph_effects._runtime import faults as _faults
from langgraph_effects._runtime.context import current_operation
from langgraph_effects.lab.providers import Provider
from langgraph_effects.testing import ScriptedChatModel


@dataclass
class TurnSpec:
    db: str
    provider: str
    thread: str = "t1"
    kind: str = "node"  # node | agent
    schema: str = "add_messages"  # add_messages | list | custom_key
    ids: str = "repeat"  # repeat | unique
    trim: bool = False
    contract: str = "dedup"  # dedup | blind
    crash: str | None = None  # a fault point: the worker SIGKILLs itself there
    resume: bool = False
    durability: str | None = "sync"  # None: LangGraph's default


class ListState(TypedDict):
    messages: Annotated[list[BaseMessage], operator.add]


class MessagesState(TypedDict):
    messages: Annotated[list[BaseMessage], add_messages]


class ChatState(TypedDict):
    chat: Annotated[list[BaseMessage], add_messages]


def answer(spec: TurnSpec, history: list[BaseMessage]) -> AIMessage:
    """A tool call for a new request, "done" once the tool answered."""
    if isinstance(history[-1], ToolMessage):
        return AIMessage("done", id=None if spec.schema == "list" else f"done-{uuid.uuid4().hex}")
    repeat = spec.ids == "repeat"
    call_id = "call_0" if repeat else f"call-{uuid.uuid4().hex}"
    call = {"name": "remind", "args": {"what": "water the plants"}, "id": call_id, "type": "tool_call"}
    return AIMessage("", tool_calls=[call], id="msg-1" if repeat else f"msg-{uuid.uuid4().hex}")


def remind_tool(spec: TurnSpec, provider: Provider) -> BaseTool:
    keyed = spec.contract != "blind"

    @tool
    def remind(what: str) -> str:
        """Set a reminder."""
        receipt = provider.apply({"operation": what}, key=current_operation().provider_key if keyed else None)
        return f"reminder set ({receipt.effect_id})"

    return remind


def effects(spec: TurnSpec) -> dict[str, Effect]:
    return {"remind": Effect(dedup_window=3600)} if spec.contract == "dedup" else {}


def build(spec: TurnSpec, saver: Any, provider: Provider, remind: BaseTool | None = None) -> Any:
    """The agent of ``spec`` (``remind``: a tool to use instead of the default one)."""
    remind = remind or remind_tool(spec, provider)
    if spec.kind == "agent":
        from langchain.agents import create_agent
        from langchain.agents.middleware import AgentMiddleware

        class Trim(AgentMiddleware):
            """Keep only the newest message before each model call of a new turn."""

            def before_model(self, state: Any, runtime: Any) -> dict[str, Any] | None:
                history = state["messages"]
                if not isinstance(history[-1], HumanMessage) or len(history) == 1:
                    return None
                return {"messages": [RemoveMessage(id=REMOVE_ALL_MESSAGES), history[-1]]}

        model = ScriptedChatModel(script=lambda messages: answer(spec, list(messages)))
        middleware: list[Any] = [Trim()] if spec.trim else []
        return create_agent(
            model,
            tools=[remind],
            middleware=[*middleware, EffectMiddleware(effects(spec))],
            checkpointer=saver,
        )
    key = "chat" if spec.schema == "custom_key" else "messages"
    state: Any = {"list": ListState, "add_messages": MessagesState, "custom_key": ChatState}[spec.schema]

    def model(s: Any) -> dict[str, Any]:
        history = list(s[key])
        out: list[Any] = [answer(spec, history)]
        if spec.trim and isinstance(history[-1], HumanMessage) and len(history) > 1:
            out = [RemoveMessage(id=REMOVE_ALL_MESSAGES), history[-1], *out]
        return {key: out}

    builder = StateGraph(state)
    builder.add_node("model", model)
    builder.add_node("tools", EffectToolNode([remind], effects=effects(spec), messages_key=key))
    builder.add_edge(START, "model")
    builder.add_conditional_edges(
        "model", lambda s: "tools" if getattr(s[key][-1], "tool_calls", None) else END, ["tools", END]
    )
    builder.add_edge("tools", "model")
    return builder.compile(checkpointer=saver)


async def run(spec: TurnSpec) -> dict[str, Any]:
    provider = Provider(spec.provider, "dedup" if spec.contract == "dedup" else "blind")
    if spec.crash:
        _faults.install(spec.crash, lambda point, op: os.kill(os.getpid(), signal.SIGKILL))
    config: Any = {"configurable": {"thread_id": spec.thread}}
    key = "chat" if spec.schema == "custom_key" else "messages"
    async with AsyncEffectSqliteSaver.from_conn_string(spec.db) as saver:
        await saver.setup()
        graph = build(spec, saver, provider)
        payload = None if spec.resume else {key: [HumanMessage("remind me to water the plants")]}
        kwargs: dict[str, Any] = {"durability": spec.durability} if spec.durability else {}
        await graph.ainvoke(payload, config, **kwargs)
        state = await graph.aget_state(config)
        return {
            "messages": [
                {"type": m.type, "content": m.content, "artifact": getattr(m, "artifact", None)}
                for m in state.values.get(key, [])
            ],
            "interrupts": [{"id": i.id, "value": i.value} for i in state.interrupts],
        }


def spec_json(spec: TurnSpec) -> str:
    return json.dumps(asdict(spec))


if __name__ == "__main__":
    print(json.dumps(asyncio.run(run(TurnSpec(**json.loads(sys.argv[1])))), default=str))
