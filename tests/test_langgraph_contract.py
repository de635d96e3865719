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


@pytest.mark.asyncio
@pytest.mark.parametrize("kind", ["sync tool", "async tool"])
async def test_a_run_config_callback_sees_every_toolnode_call_and_can_fail_it(kind: str) -> None:
    """What ``crashtest``'s faults stand on (``crashtest/worker.py``): a handler passed in
    the run config gets ``on_tool_start`` with the ``tool_call_id`` and the arguments,
    and an exception it raises from ``on_tool_end`` (``raise_error``) reaches the graph
    as the tool's own, after the tool ran; also for a sync tool (run under a sync
    callback manager), which is why the handler is a sync one, run inline."""
    from langchain_core.callbacks import BaseCallbackHandler
    from langchain_core.tools import StructuredTool

    ran: list[int] = []

    def run(x: int) -> str:
        ran.append(x)
        return "ok"

    async def arun(x: int) -> str:
        return run(x)

    probe = StructuredTool.from_function(
        **({"func": run} if kind == "sync tool" else {"coroutine": arun}), name="probe", description="Probe."
    )

    class Handler(BaseCallbackHandler):
        raise_error = True
        run_inline = True

        def __init__(self) -> None:
            self.starts: list[tuple[Any, Any]] = []

        def on_tool_start(self, serialized: Any, input_str: str, **kwargs: Any) -> None:
            self.starts.append((kwargs.get("tool_call_id"), kwargs.get("inputs")))

        def on_tool_end(self, output: Any, **kwargs: Any) -> None:
            raise TimeoutError("lost answer")

    builder = StateGraph(State)
    builder.add_node("model", _model)
    builder.add_node("tools", ToolNode([probe]))
    builder.add_edge(START, "model")
    builder.add_edge("model", "tools")
    builder.add_edge("tools", END)
    handler = Handler()
    graph = builder.compile(checkpointer=InMemorySaver())
    config: RunnableConfig = {"configurable": {"thread_id": "cb"}, "callbacks": [handler]}
    with pytest.raises(TimeoutError, match="lost answer"):
        await graph.ainvoke({"messages": [HumanMessage("go")]}, config)
    assert handler.starts == [("c1", {"x": 1})]
    assert ran == [1]  # the tool did run: the caller saw a timeout for done work
