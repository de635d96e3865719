"""Graphs a user might write, over the example HTTP notification service, for the crash tests.

The tool posts to the service named by ``PROVIDER_URL`` (read at call time), with
the thread id as the notification's ``reference``, so that :func:`probe` can count
the effects of one thread from the service's own records. Under ``EffectToolNode``
/ ``EffectMiddleware`` it sends the operation's provider key as the
``Idempotency-Key``; under a plain ``ToolNode`` it has no key to send, as today.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Annotated, Any, TypedDict

import httpx
from langchain.agents import create_agent
from langchain_core.messages import AnyMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode, tools_condition

from langgraph_effects import Effect, EffectMiddleware, EffectToolNode
from langgraph_effects._runtime.context import maybe_current_operation
from langgraph_effects.testing import ScriptedChatModel, call_each_then_finish

CALLS = [("send_notification", {"to": "ada@example.com", "text": "Your invoice is paid."})]
DEDUP = {"send_notification": Effect(dedup_window=timedelta(hours=24))}


def _url() -> str:
    return os.environ["PROVIDER_URL"]


@tool
async def send_notification(to: str, text: str, config: RunnableConfig) -> str:
    """Send a notification email to ``to``."""
    op = maybe_current_operation()
    headers = {"Idempotency-Key": op.provider_key} if op is not None else {}
    reference = config["configurable"]["thread_id"]
    async with httpx.AsyncClient(base_url=_url(), timeout=10.0) as http:
        response = await http.post(
            "/notifications", json={"to": to, "text": text, "reference": reference}, headers=headers
        )
    response.raise_for_status()
    return f"notification {response.json()['id']} sent to {to}"


class State(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def _model() -> ScriptedChatModel:
    return ScriptedChatModel(script=call_each_then_finish(CALLS, final="The customer is notified."))


def _loop(tools: Any, checkpointer: Any) -> Any:
    model = _model()

    async def agent(state: State) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_node("tools", tools)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=checkpointer)


def plain_graph(checkpointer: Any) -> Any:
    """What people write today: the prebuilt ``ToolNode``."""
    return _loop(ToolNode([send_notification]), checkpointer)


def effect_graph(checkpointer: Any) -> Any:
    """The same graph with ``EffectToolNode`` and the service's dedup contract."""
    return _loop(EffectToolNode([send_notification], effects=DEDUP), checkpointer)


async def agent_graph(*, checkpointer: Any) -> Any:
    """``create_agent`` with ``EffectMiddleware`` (an async factory taking ``checkpointer=``)."""
    return create_agent(
        _model(), tools=[send_notification], middleware=[EffectMiddleware(DEDUP)], checkpointer=checkpointer
    )


def blind_graph(checkpointer: Any) -> Any:
    """``EffectToolNode`` with nothing declared: the send is blind, a crash goes to review."""
    return _loop(EffectToolNode([send_notification]), checkpointer)


@tool("send_notification")
def send_notification_sync(to: str, text: str, config: RunnableConfig) -> str:
    """Send a notification email to ``to`` (a sync app's tool: a plain ``def``)."""
    op = maybe_current_operation()
    headers = {"Idempotency-Key": op.provider_key} if op is not None else {}
    reference = config["configurable"]["thread_id"]
    body = {"to": to, "text": text, "reference": reference}
    response = httpx.post(f"{_url()}/notifications", json=body, headers=headers, timeout=10.0)
    response.raise_for_status()
    return f"notification {response.json()['id']} sent to {to}"


def sync_effect_graph(checkpointer: Any) -> Any:
    """:func:`effect_graph` as a sync app writes it (sync model node, sync tool), for
    ``crashtest(..., sync=True)``: every attempt runs ``graph.invoke``."""
    model = _model()

    def agent(state: State) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    builder = StateGraph(State)
    builder.add_node("agent", agent)
    builder.add_node("tools", EffectToolNode([send_notification_sync], effects=DEDUP))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=checkpointer)


def not_a_graph(checkpointer: Any) -> Any:
    """A common slip: the builder, not the compiled graph."""
    builder = StateGraph(State)
    builder.add_node("tools", ToolNode([send_notification]))
    builder.add_edge(START, "tools")
    return builder


def graph_without_checkpointer() -> Any:
    """Another slip: a factory that takes no checkpointer (it cannot be given one)."""
    return plain_graph(None)


def probe(thread_id: str) -> int:
    """Notifications the service holds for the thread (its admin listing has no lag)."""
    response = httpx.get(f"{_url()}/_admin/notifications", timeout=10.0)
    response.raise_for_status()
    return sum(1 for n in response.json()["data"] if n["reference"] == thread_id)


async def broken_probe(thread_id: str) -> int:
    """A probe whose sandbox is unreachable."""
    raise ConnectionError(f"the provider sandbox refused the connection (thread {thread_id})")
