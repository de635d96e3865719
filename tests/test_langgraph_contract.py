"""The private LangGraph / aiosqlite behaviour we rely on. If one of these fails after
an upgrade, do not patch the test: fix the one adapter that reads it
(``langgraph_effects/_pregel.py``, ``node.py`` or ``ledger/sqlite.py``)."""

from __future__ import annotations

import inspect
import sqlite3
from typing import Annotated, Any, TypedDict

import aiosqlite
import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode

from langgraph_effects import _pregel
from langgraph_effects.ledger.sqlite import run_in_connection_thread


class State(TypedDict):
    messages: Annotated[list[Any], add_messages]


def _model(state: State) -> dict[str, Any]:
    if isinstance(state["messages"][-1], HumanMessage):
        call = {"name": "probe", "args": {"x": 1}, "id": "c1", "type": "tool_call"}
        return {"messages": [AIMessage("", tool_calls=[call])]}
    return {"messages": [AIMessage("done")]}


def test_toolnode_private_methods_keep_their_shape() -> None:
    for name in ("_execute_tool_sync", "_execute_tool_async"):
        params = list(inspect.signature(getattr(ToolNode, name)).parameters)
        assert params == ["self", "request", "input_type", "config"], (name, params)
    for name in ("_func", "_afunc"):
        params = list(inspect.signature(getattr(ToolNode, name)).parameters)
        assert params == ["self", "input", "config", "runtime"], (name, params)
    assert callable(ToolNode._parse_input)
    assert "_messages_key" in ToolNode([]).__dict__


def test_wrappers_call_the_per_call_executor() -> None:
    """A wrap_tool_call wrapper's ``execute`` goes through ``_execute_tool_sync``."""
    seen: list[str] = []

    class Spy(ToolNode):
        def _execute_tool_sync(self, request: Any, input_type: Any, config: Any) -> Any:
            seen.append(request.tool_call["id"])
            return super()._execute_tool_sync(request, input_type, config)

    @tool
    def probe(x: int) -> str:
        """Probe."""
        return str(x)

    def twice(request: Any, execute: Any) -> Any:
        execute(request)
        return execute(request)

    builder = StateGraph(State)
    builder.add_node("model", _model)
    builder.add_node("tools", Spy([probe], wrap_tool_call=twice))
    builder.add_edge(START, "model")
    builder.add_edge("model", "tools")
    builder.add_edge("tools", END)
    out = builder.compile().invoke({"messages": [HumanMessage("go")]})
    assert seen == ["c1", "c1"]
    assert isinstance(out["messages"][-1], ToolMessage)


def test_node_config_carries_the_keys_we_read() -> None:
    seen: dict[str, Any] = {}

    def tools(state: State, config: RunnableConfig) -> dict[str, Any]:
        seen["checkpointer"] = _pregel.checkpointer(config)
        seen["durability"] = _pregel.durability(config)
        seen["task_id"] = _pregel.task_id(config)
        seen["parent"] = _pregel.parent_checkpoint(config)
        seen["ns"] = _pregel.checkpoint_ns(config)
        seen["message_id"] = state["messages"][-1].id
        return {"messages": []}

    saver = InMemorySaver()
    builder = StateGraph(State)
    builder.add_node("model", _model)
    builder.add_node("tools", tools)
    builder.add_edge(START, "model")
    builder.add_edge("model", "tools")
    builder.add_edge("tools", END)
    graph = builder.compile(checkpointer=saver)
    config: Any = {"configurable": {"thread_id": "t"}}
    graph.invoke({"messages": [HumanMessage("go")]}, config, durability="sync")

    assert seen["checkpointer"] is saver
    assert seen["durability"] == "sync"
    assert seen["task_id"] and seen["ns"] == f"tools:{seen['task_id']}"
    ns, checkpoint_id = seen["parent"]
    assert ns == ""
    # The parent checkpoint is the one that holds the AIMessage with the call.
    target: Any = {"configurable": {"thread_id": "t", "checkpoint_ns": "", "checkpoint_id": checkpoint_id}}
    saved = saver.get_tuple(target)
    assert saved is not None
    assert saved.checkpoint["channel_values"]["messages"][-1].id == seen["message_id"]

    # Time travel to that checkpoint: LangGraph mints a new task id (so identity must
    # not use it), while the AIMessage id (our anchor) is the same.
    first_task, first_message = seen["task_id"], seen["message_id"]
    before = next(s for s in graph.get_state_history(config) if s.next == ("tools",))
    graph.invoke(None, before.config)
    assert seen["message_id"] == first_message
    assert seen["task_id"] != first_task, "task ids became stable under replay: identity could use them"


@pytest.mark.asyncio
async def test_aiosqlite_runs_a_function_on_its_thread(tmp_path: Any) -> None:
    async with aiosqlite.connect(str(tmp_path / "x.sqlite")) as conn:
        def fn(db: sqlite3.Connection) -> int:
            assert isinstance(db, sqlite3.Connection)
            return int(db.execute("SELECT 41 + 1").fetchone()[0])

        assert await run_in_connection_thread(conn, fn) == 42



_ADAPTER_PROBE = """
import asyncio, sys
from langgraph_api._checkpointer._adapter import CheckpointerCapabilities, _CustomCheckpointerAdapter
from langgraph_effects import EffectSqliteSaver, ledger_of

async def main():
    async with EffectSqliteSaver.from_conn_string(sys.argv[1]) as saver:
        await saver.setup()
        caps = CheckpointerCapabilities.from_type(type(saver))
        adapter = _CustomCheckpointerAdapter(inner=saver, capabilities=caps)
        assert ledger_of(adapter) is saver.ledger, "the adapter hides the saver's ledger"

asyncio.run(main())
"""


def test_server_custom_checkpointer_adapter_shows_our_ledger(tmp_path: Any) -> None:
    """LangGraph's server wraps a custom checkpointer from langgraph.json in a private
    adapter that forwards unknown attributes to it, so ``ledger_of`` finds the ledger of
    an ``EffectSqliteSaver`` through it (README "On LangGraph's server"). langgraph-api
    reads its configuration at import, so the probe runs in a process with the settings
    ``langgraph dev`` gives its in-memory runtime."""
    import importlib.util
    import os
    import subprocess
    import sys

    if importlib.util.find_spec("langgraph_api") is None:
        if os.environ.get("CI") == "true":
            pytest.fail("CI=true but langgraph-api (the server extra) is not installed")
        pytest.skip("needs the server extra (langgraph-api)")
    env = {
        **os.environ,
        "REDIS_URI": "fake",
        "DATABASE_URI": ":memory:",
        "MIGRATIONS_PATH": "__inmem",
        "LANGGRAPH_RUNTIME_EDITION": "inmem",
    }
    probe = subprocess.run(
        [sys.executable, "-c", _ADAPTER_PROBE, str(tmp_path / "agent.sqlite")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert probe.returncode == 0, probe.stderr[-3000:]
