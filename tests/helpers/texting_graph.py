"""A graph for ``tests/test_server_double_texting.py``, served by ``langgraph dev``.

Every human message asks for one ``send`` labelled with its text; the tool's effect
lands at a provider that keeps its own records (``TEXTING_PROVIDER``), then the
tool takes ``TEXTING_SLOW`` seconds to answer, so a second message arrives while the
first run is still in its tool. Then the model says ``done <text>``. The server's
checkpointer (``AsyncEffectSqliteSaver``) carries the ledger.
"""

from __future__ import annotations

import os
import time
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph

from langgraph_effects import Effect, EffectToolNode, current_operation
from langgraph_effects.testing import Provider
from tests.helpers.agent import State

provider = Provider(os.environ.get("TEXTING_PROVIDER", "provider.sqlite"), "dedup")


@tool
def send(text: str) -> str:
    """Send ``text``."""
    receipt = provider.apply({"operation": text}, key=current_operation().provider_key)
    time.sleep(float(os.environ.get("TEXTING_SLOW", "4")))  # landed; the answer is slow
    return f"sent {receipt.effect_id}"


def model(state: State) -> dict[str, Any]:
    """A send for the last human message not answered yet, else ``done``."""
    messages = state["messages"]
    human = next(m for m in reversed(messages) if isinstance(m, HumanMessage))
    after = messages[messages.index(human) + 1:]
    if not any(isinstance(m, AIMessage) and m.tool_calls for m in after):
        call = {"name": "send", "args": {"text": str(human.content)}, "id": f"c-{os.urandom(4).hex()}",
                "type": "tool_call"}
        return {"messages": [AIMessage("", tool_calls=[call])]}
    if any(isinstance(m, ToolMessage) for m in after):
        return {"messages": [AIMessage(f"done {human.content}")]}
    raise AssertionError("the model ran before its call was answered")


builder = StateGraph(State)
builder.add_node("model", model)
builder.add_node("tools", EffectToolNode([send], effects={"send": Effect(dedup_window=3600)}))
builder.add_edge(START, "model")
builder.add_conditional_edges(
    "model", lambda s: "tools" if s["messages"][-1].tool_calls else END, ["tools", END]
)
builder.add_edge("tools", "model")
graph = builder.compile()
