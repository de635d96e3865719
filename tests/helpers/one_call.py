"""A small graph (model -> EffectToolNode -> END) asking for fixed tool calls in one
AIMessage, a sender tool over a provider, and raw reads of a SQLite ledger file."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import BaseTool, tool
from langgraph.graph import END, START, StateGraph

from langgraph_effects import Effect, current_operation
from langgraph_effects._integrations.node import EffectToolNode
from langgraph_effects.lab.providers import Provider
from tests.helpers.agent import State as AgentState


def one_call_graph(
    tools: list[BaseTool],
    effects: dict[str, Effect],
    saver: Any,
    calls: list[dict[str, Any]],
    **node_kw: Any,
) -> Any:
    """model -> tools -> END; the model asks for ``calls`` in one AIMessage."""

    def model(state: AgentState) -> dict[str, Any]:
        if any(isinstance(m, ToolMessage) for m in state["messages"]):
            return {}
        return {"messages": [AIMessage("", tool_calls=calls, id="ai-1")]}

    builder = StateGraph(AgentState)
    builder.add_node("model", model)
    builder.add_node("tools", EffectToolNode(tools, effects=effects, **node_kw))
    builder.add_edge(START, "model")
    builder.add_edge("model", "tools")
    builder.add_edge("tools", END)
    return builder.compile(checkpointer=saver)


def call(name: str, call_id: str = "call-0", **args: Any) -> dict[str, Any]:
    return {"name": name, "args": args, "id": call_id, "type": "tool_call"}


def tool_messages(state: Any) -> list[ToolMessage]:
    return [m for m in state.values["messages"] if isinstance(m, ToolMessage)]


def make_sender(provider: Provider, *, big: bool = False) -> BaseTool:
    @tool
    def send(label: str) -> str:
        """Send ``label`` under our provider key."""
        receipt = provider.apply({"operation": label}, key=current_operation().provider_key)
        # A result that needs new pages in the ledger file (so a full disk bites).
        return receipt.effect_id + (" " + "r" * 20_000 if big else "")

    return send


def ledger_rows(path: Path) -> list[tuple[Any, ...]]:
    """(op_id, state, version, tenant, policy_version) of every operation, read raw."""
    with sqlite3.connect(path) as db:
        return db.execute(
            "SELECT op_id, state, version, tenant, policy_version FROM effect_operations ORDER BY op_id"
        ).fetchall()


def audit_rows(path: Path) -> list[tuple[Any, ...]]:
    with sqlite3.connect(path) as db:
        return db.execute(
            "SELECT op_id, seq, event, to_state FROM effect_audit ORDER BY op_id, seq"
        ).fetchall()
