"""The private LangGraph / aiosqlite behaviour we rely on. If one of these fails after
an upgrade, do not patch the test: fix the one adapter that reads it
(``langgraph_effects/_private.py``, ``node.py`` or ``ledger/sqlite.py``)."""

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

from langgraph_effects import _private
from langgraph_effects.core import identity
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
        seen["checkpointer"] = _private.checkpointer(config)
        seen["durability"] = _private.durability(config)
        seen["task_id"] = _private.task_id(config)
        seen["parent"] = _private.parent_checkpoint(config)
        seen["ns"] = _private.checkpoint_ns(config)
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
    # not use it); the turn coordinate survives (see test_turn_coordinate_...).
    first_task, first_message = seen["task_id"], seen["message_id"]
    before = next(s for s in graph.get_state_history(config) if s.next == ("tools",))
    graph.invoke(None, before.config)
    assert seen["message_id"] == first_message
    assert seen["task_id"] != first_task, "task ids became stable under replay: identity could use them"


def _turn_graph(saver: Any, seen: list[dict[str, Any]]) -> Any:
    """model -> tools -> model, the model repeating its call id every turn."""

    def model(state: State) -> dict[str, Any]:
        if isinstance(state["messages"][-1], HumanMessage):
            call = {"name": "probe", "args": {"x": 1}, "id": "call_0", "type": "tool_call"}
            return {"messages": [AIMessage("", tool_calls=[call])]}
        return {"messages": [AIMessage("done")]}

    def tools(state: State, config: RunnableConfig) -> dict[str, Any]:
        seen.append(
            {
                "task_id": _private.task_id(config),
                "parent": _private.parent_checkpoint(config),
                "durability": _private.durability(config),
            }
        )
        return {"messages": [ToolMessage("ok", tool_call_id="call_0")]}

    builder = StateGraph(State)
    builder.add_node("model", model)
    builder.add_node("tools", tools)
    builder.add_edge(START, "model")
    builder.add_conditional_edges(
        "model", lambda s: "tools" if getattr(s["messages"][-1], "tool_calls", None) else END, ["tools", END]
    )
    builder.add_edge("tools", "model")
    return builder.compile(checkpointer=saver)


def test_turn_coordinate_differs_per_turn_and_survives_time_travel() -> None:
    """The identity rule (identity.turn_of): the newest channel version of the checkpoint
    a tool task was prepared from names the step that wrote the AIMessage; it is unique
    per turn even when the model repeats its ids, and the fork that time travel saves
    copies it while minting a new checkpoint id and new task ids."""
    seen: list[dict[str, Any]] = []
    saver = InMemorySaver()
    graph = _turn_graph(saver, seen)
    config: Any = {"configurable": {"thread_id": "t"}}
    graph.invoke({"messages": [HumanMessage("go")]}, config)
    graph.invoke({"messages": [HumanMessage("go")]}, config, durability="sync")
    first, second = seen
    # At LangGraph's default durability ("async") the key is not in the config, and
    # the checkpoint holding the call may not be saved yet when the task starts: the
    # node cannot tell the mode and must read the checkpoint back before sending.
    assert first["durability"] is None and second["durability"] == "sync"

    def saved(parent: Any) -> Any:
        ns, checkpoint_id = parent
        return saver.get_tuple(
            {"configurable": {"thread_id": "t", "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}}
        )

    for s in seen:
        s["saved"] = saved(s["parent"])
    for s in (first, second):
        x = s["saved"]
        assert x is not None
        versions = x.checkpoint["channel_versions"]
        assert identity.versions_unique(versions), versions
        # The step that produced X wrote the AIMessage: it carries the newest version.
        assert versions["messages"] == max(versions.values())
        assert x.checkpoint["channel_values"]["messages"][-1].tool_calls[0]["id"] == "call_0"
    turns = [identity.turn_of(s["saved"].checkpoint["channel_versions"], "") for s in seen]
    assert turns[0] != turns[1]

    # Time travel to the second turn's X: a "fork" checkpoint, child of X, with X's
    # channel versions and a new id; the tool task is prepared from the fork.
    x = second["saved"]
    graph.invoke(None, x.config)
    replay = seen[2]
    fork = saved(replay["parent"])
    assert fork.metadata["source"] == "fork"
    assert fork.config["configurable"]["checkpoint_id"] != x.config["configurable"]["checkpoint_id"]
    assert fork.parent_config["configurable"]["checkpoint_id"] == x.config["configurable"]["checkpoint_id"]
    assert fork.checkpoint["channel_versions"] == x.checkpoint["channel_versions"]
    assert replay["task_id"] != second["task_id"]
    assert identity.turn_of(fork.checkpoint["channel_versions"], "") == turns[1]

    # The pre-model coordinate (identity.origin_of): the same when the model is asked
    # again from the state it answered (time travel to X's parent saves a fork of it),
    # another for another turn.
    origins = [identity.origin_of(s["saved"].checkpoint["versions_seen"]) for s in (first, second)]
    assert None not in origins and origins[0] != origins[1]
    assert identity.origin_of(fork.checkpoint["versions_seen"]) == origins[1]
    graph.invoke(None, x.parent_config)
    again = saved(seen[-1]["parent"])
    assert again.config["configurable"]["checkpoint_id"] != x.config["configurable"]["checkpoint_id"]
    assert identity.turn_of(again.checkpoint["channel_versions"], "") not in turns
    assert identity.origin_of(again.checkpoint["versions_seen"]) == origins[1]

    # An update_state edit of the thread is a new checkpoint with new versions.
    graph.update_state(x.config, {"messages": [HumanMessage("edited")]})
    latest = saver.get_tuple(config)
    assert latest is not None
    assert identity.turn_of(latest.checkpoint["channel_versions"], "") not in turns


def test_sqlite_saver_versions_name_one_write(tmp_path: Any) -> None:
    from langgraph.checkpoint.base import BaseCheckpointSaver
    from langgraph.checkpoint.sqlite import SqliteSaver

    with SqliteSaver.from_conn_string(str(tmp_path / "c.sqlite")) as saver:
        seen: list[dict[str, Any]] = []
        config: Any = {"configurable": {"thread_id": "t"}}
        _turn_graph(saver, seen).invoke({"messages": [HumanMessage("go")]}, config, durability="sync")
        latest = saver.get_tuple(config)
        assert latest is not None and identity.versions_unique(latest.checkpoint["channel_versions"])
    # A custom saver on the base class's default counts 1, 2, 3...: not unique across
    # branches, so the rule falls back to the checkpoint id (README).
    plain = BaseCheckpointSaver.get_next_version(InMemorySaver(), None, None)
    assert not identity.versions_unique({"messages": plain})


def test_functional_task_coordinates() -> None:
    """A Functional API task is pushed from the entrypoint's task: its checkpoint map has
    an entry for that task's namespace repeating the loop's checkpoint id, and the
    checkpoint is saved in the loop's namespace. ``langgraph_path`` names the call by
    its index, without the checkpoint-derived task id."""
    from langgraph.config import get_config
    from langgraph.func import entrypoint, task

    saver = InMemorySaver()
    seen: list[dict[str, Any]] = []

    @task
    def step(i: int) -> int:
        config = get_config()
        seen.append(
            {
                "parent": _private.parent_checkpoint(config),
                "path": _private.call_path(config),
                "task_id": _private.task_id(config),
                "durability": _private.durability(config),
            }
        )
        return i

    @entrypoint(checkpointer=saver)
    def flow(n: int) -> list[int]:
        return [step(i).result() for i in range(n)]

    config: Any = {"configurable": {"thread_id": "f"}}
    flow.invoke(2, config, durability="sync")
    assert [s["path"] for s in seen] == ["flow/0", "flow/1"]
    assert all(s["durability"] == "sync" for s in seen)
    ns, checkpoint_id = seen[0]["parent"]
    assert ns == ""
    target: Any = {"configurable": {"thread_id": "f", "checkpoint_ns": "", "checkpoint_id": checkpoint_id}}
    saved = saver.get_tuple(target)
    assert saved is not None and saved.metadata["source"] == "input"

    # Time travel to the input checkpoint: new task ids, the same call paths and turn.
    flow.invoke(None, saved.config)
    assert [s["path"] for s in seen[2:]] == ["flow/0", "flow/1"]
    assert seen[2]["task_id"] != seen[0]["task_id"]
    _, fork_id = seen[2]["parent"]
    fork = saver.get_tuple(
        {"configurable": {"thread_id": "f", "checkpoint_ns": "", "checkpoint_id": fork_id}}
    )
    assert fork is not None
    assert identity.turn_of(fork.checkpoint["channel_versions"], "") == identity.turn_of(
        saved.checkpoint["channel_versions"], ""
    )


@pytest.mark.asyncio
async def test_aiosqlite_runs_a_function_on_its_thread(tmp_path: Any) -> None:
    async with aiosqlite.connect(str(tmp_path / "x.sqlite")) as conn:
        def fn(db: sqlite3.Connection) -> int:
            assert isinstance(db, sqlite3.Connection)
            return int(db.execute("SELECT 41 + 1").fetchone()[0])

        assert await run_in_connection_thread(conn, fn) == 42


def test_a_task_reads_the_interrupt_it_raised_last_from_its_checkpoint() -> None:
    """LangGraph keeps one pending interrupt write per task in the checkpoint the task
    runs from, replaced each time it interrupts again, and hands stored answers back by
    position: what binds an answer to its question (``_runtime/question.py``)."""
    from langgraph._internal._constants import INTERRUPT
    from langgraph.types import Command, interrupt

    seen: list[Any] = []

    class Two(TypedDict):
        answers: list[Any]

    def asks(state: Two, config: RunnableConfig) -> dict[str, Any]:
        saver, parent = _private.checkpointer(config), _private.parent_checkpoint(config)
        assert saver is not None and parent is not None
        target = {"configurable": {"thread_id": "t", "checkpoint_ns": parent[0], "checkpoint_id": parent[1]}}
        saved = saver.get_tuple(target)
        seen.append(_private.pending_interrupt_values(saved, str(_private.task_id(config))))
        first = interrupt({"round": 0})
        second = interrupt({"round": 1})
        return {"answers": [first, second]}

    builder = StateGraph(Two)
    builder.add_node("asks", asks)
    builder.add_edge(START, "asks")
    graph = builder.compile(checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": "t"}}
    graph.invoke({"answers": []}, config)
    graph.invoke(Command(resume="a"), config)
    result = graph.invoke(Command(resume="b"), config)
    assert _private.INTERRUPT_CHANNEL == INTERRUPT
    assert seen == [None, [{"round": 0}], [{"round": 1}]]
    assert result["answers"] == ["a", "b"]


# -- one runner per thread (langgraph_effects/checkpoint/) ----------------------------------


def _squash(text: str) -> str:
    return " ".join(text.replace('"', " ").replace("(", " ( ").replace(")", " ) ").split())


def test_sqlite_saver_statements_are_the_ones_we_run_in_our_transaction() -> None:
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    from langgraph_effects.checkpoint import sqlite as ours

    put = _squash(inspect.getsource(AsyncSqliteSaver.aput))
    writes = _squash(inspect.getsource(AsyncSqliteSaver.aput_writes))
    assert _squash(ours.INSERT_CHECKPOINT_SQL) in put
    assert _squash(ours.UPSERT_WRITES_SQL) in writes
    assert _squash(ours.INSERT_WRITES_SQL) in writes
    assert "WRITES_IDX_MAP" in writes  # special writes replace, task writes are kept once


def test_postgres_saver_writes_through_its_cursor_method() -> None:
    # AsyncEffectPostgresSaver's fence is a trigger inside LangGraph's statements; for its own
    # late task results it sets a transaction-local flag first, on the cursor LangGraph's
    # aput_writes gets from ``_cursor`` (our override).
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    # That flag and their statements are one implicit transaction ended by one Sync
    # (pipeline mode, autocommit): a Sync, commit, transaction or pipeline of their own
    # inside would end it before their insert, and the trigger would refuse the writes.
    for method in (AsyncPostgresSaver.aput, AsyncPostgresSaver.aput_writes):
        source = inspect.getsource(method)
        assert "self._cursor(" in source, method.__name__
        assert "self.conn" not in source and "get_connection" not in source, method.__name__
        for ends_it in (".sync(", "commit", ".transaction(", ".pipeline(", "self.pipe"):
            assert ends_it not in source, (method.__name__, ends_it)
    assert list(inspect.signature(AsyncPostgresSaver._cursor).parameters) == ["self", "pipeline"]


async def test_a_run_loads_with_its_private_config_and_branches_are_marked() -> None:
    # The fence tells a runner from a deliberate branch by what LangGraph hands its saver:
    # a run's loads and saves carry ``__pregel_*`` keys, among them one object of the run
    # its own (``_private.run_of``), the same in every load and save of that run; a run
    # that names a checkpoint loads it by its id; ``update_state`` (any ``as_node``) saves
    # without the loop's keys.
    loads: list[dict[str, Any]] = []
    puts: list[dict[str, Any]] = []

    class Recording(InMemorySaver):
        async def aget_tuple(self, config: RunnableConfig) -> Any:
            loads.append(dict(config.get("configurable") or {}))
            return await super().aget_tuple(config)

        async def aput(self, config: RunnableConfig, checkpoint: Any, metadata: Any, versions: Any) -> Any:
            puts.append(dict(config.get("configurable") or {}))
            return await super().aput(config, checkpoint, metadata, versions)

    builder = StateGraph(State)
    builder.add_node("model", _model)
    builder.add_node("tools", ToolNode([probe_tool]))
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", lambda s: "tools" if s["messages"][-1].tool_calls else END)
    builder.add_edge("tools", "model")
    graph = builder.compile(checkpointer=Recording())
    config: RunnableConfig = {"configurable": {"thread_id": "contract-fence"}}
    await graph.ainvoke({"messages": [HumanMessage("go")]}, config, durability="sync")
    assert _private.from_graph_loop({"configurable": loads[0]}), loads[0]
    first_run = _private.run_of({"configurable": loads[0]})
    assert first_run is not None
    assert all(_private.run_of({"configurable": p}) is first_run for p in puts), puts
    history = [s async for s in graph.aget_state_history(config)]
    earlier = next(s for s in history if s.next == ("tools",))
    loads.clear()
    puts.clear()
    await graph.ainvoke({"messages": [HumanMessage("again")]}, earlier.config, durability="sync")
    assert loads[0]["checkpoint_id"] == earlier.config["configurable"]["checkpoint_id"], loads[0]
    run = _private.run_of({"configurable": loads[0]})
    assert run is not None and run is not first_run
    assert puts[0]["checkpoint_id"] == loads[0]["checkpoint_id"]  # its first save: a child of it
    assert all(_private.run_of({"configurable": c}) is run for c in loads + puts)
    edits = {"model": [AIMessage("edit")], "__input__": [HumanMessage("edit")], "__copy__": None}
    for as_node, messages in edits.items():
        puts.clear()
        await graph.aupdate_state(earlier.config, messages and {"messages": messages}, as_node=as_node)
        assert puts and not any(_private.from_graph_loop({"configurable": p}) for p in puts), (as_node, puts)


async def test_a_subgraph_under_time_travel_loads_through_the_replay_lookup() -> None:
    # A subgraph that keeps its own memory (checkpointer=True) replays from the last of
    # its checkpoints before the replayed one: LangGraph finds it with
    # ``alist(config, before=...)``, the config carrying the replay state.
    lookups: list[dict[str, Any]] = []

    class Recording(InMemorySaver):
        async def alist(self, config: Any, **kwargs: Any) -> Any:
            if kwargs.get("before") is not None and config is not None:
                lookups.append(dict(config.get("configurable") or {}))
            async for item in super().alist(config, **kwargs):
                yield item

    sub = StateGraph(State)
    sub.add_node("echo", lambda s: {"messages": [HumanMessage("echo")]})
    sub.add_edge(START, "echo")
    parent = StateGraph(State)
    parent.add_node("agent", sub.compile(checkpointer=True))
    parent.add_edge(START, "agent")
    graph = parent.compile(checkpointer=Recording())
    config: RunnableConfig = {"configurable": {"thread_id": "contract-replay"}}
    await graph.ainvoke({"messages": [HumanMessage("a")]}, config)
    await graph.ainvoke({"messages": [HumanMessage("b")]}, config)
    history = [s async for s in graph.aget_state_history(config)]
    before_b = next(s for s in history if s.next == ("agent",) and s.values["messages"][-1].content == "b")
    await graph.ainvoke(None, before_b.config)
    assert [c["checkpoint_ns"] for c in lookups] == ["agent"], lookups
    lookup = {"configurable": lookups[0]}
    assert _private.replaying(lookup) and _private.from_graph_loop(lookup)


@tool("probe")
def probe_tool(x: int) -> str:
    """Answer the probe."""
    return f"probed {x}"


def test_a_failed_task_is_stored_under_the_error_channel() -> None:
    from langgraph._internal._constants import ERROR
    from langgraph.checkpoint.base import WRITES_IDX_MAP

    from langgraph_effects.checkpoint import _fence

    assert ERROR == _fence.ERROR_CHANNEL and ERROR in WRITES_IDX_MAP
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


_ADAPTER_PROBE = """
import asyncio, sys
from langgraph_api._checkpointer._adapter import CheckpointerCapabilities, _CustomCheckpointerAdapter
from langgraph_effects import AsyncEffectSqliteSaver, ledger_of

async def main():
    async with AsyncEffectSqliteSaver.from_conn_string(sys.argv[1]) as saver:
        await saver.setup()
        caps = CheckpointerCapabilities.from_type(type(saver))
        adapter = _CustomCheckpointerAdapter(inner=saver, capabilities=caps)
        assert ledger_of(adapter) is saver.ledger, "the adapter hides the saver's ledger"

asyncio.run(main())
"""


@pytest.mark.slow
def test_server_custom_checkpointer_adapter_shows_our_ledger(tmp_path: Any) -> None:
    """LangGraph's server wraps a custom checkpointer from langgraph.json in a private
    adapter that forwards unknown attributes to it, so ``ledger_of`` finds the ledger of
    an ``AsyncEffectSqliteSaver`` through it (README "On LangGraph's server"). langgraph-api
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


# -- checkpoint savers and database drivers (langgraph_effects/_private.py) ------------


@pytest.mark.asyncio
async def test_private_aiosqlite_hop_runs_a_whole_transaction_on_its_thread(tmp_path: Any) -> None:
    from langgraph_effects import _private

    async with aiosqlite.connect(str(tmp_path / "hop.sqlite"), isolation_level=None) as conn:
        await conn.execute("CREATE TABLE t (v INTEGER)")

        def transaction(db: sqlite3.Connection) -> int:
            db.execute("BEGIN IMMEDIATE")
            db.executemany("INSERT INTO t (v) VALUES (?)", [(1,), (2,)])
            db.execute("COMMIT")
            return int(db.execute("SELECT SUM(v) FROM t").fetchone()[0])

        assert await _private.run_in_connection_thread(conn, transaction) == 3
        async with conn.execute("SELECT COUNT(*) FROM t") as cur:
            assert (await cur.fetchone()) == (2,)  # committed, seen by aiosqlite's own API


@pytest.mark.asyncio
async def test_private_sqlite_saver_is_setup_flag(tmp_path: Any) -> None:
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    from langgraph_effects import _private

    async with AsyncSqliteSaver.from_conn_string(str(tmp_path / "cp.sqlite")) as saver:
        assert _private.sqlite_saver_is_setup(saver) is False
        await saver.setup()
        assert _private.sqlite_saver_is_setup(saver) is True
        async with saver.conn.execute("SELECT name FROM sqlite_master WHERE name = 'checkpoints'") as cur:
            assert await cur.fetchone() is not None  # the flag means the tables exist
    assert "self.is_setup" in inspect.getsource(AsyncSqliteSaver.setup)


def test_private_postgres_pieces_keep_their_names() -> None:
    pytest.importorskip("langgraph.checkpoint.postgres")
    from langgraph.checkpoint.postgres import _ainternal, aio

    from langgraph_effects import _private

    # The public alias we annotate with is the private one LangGraph uses.
    assert "Conn" in aio.__all__ and aio.Conn is _ainternal.Conn
    assert list(inspect.signature(_ainternal.get_connection).parameters) == ["conn"]
    assert "_cursor" in vars(aio.AsyncPostgresSaver)
    assert "pipeline" in inspect.signature(aio.AsyncPostgresSaver._cursor).parameters
    # Our override reaches LangGraph's statements through the same name.
    from langgraph_effects.checkpoint.postgres import AsyncEffectPostgresSaver

    assert "_cursor" in vars(AsyncEffectPostgresSaver)
    assert _private.postgres_connection.__module__ == "langgraph_effects._private"


def test_private_sqlite_saver_statements_match_langgraph() -> None:
    from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

    from langgraph_effects import _private

    put = _squash(inspect.getsource(AsyncSqliteSaver.aput))
    writes = _squash(inspect.getsource(AsyncSqliteSaver.aput_writes))
    assert _squash(_private.INSERT_CHECKPOINT_SQL) in put
    assert _squash(_private.UPSERT_WRITES_SQL) in writes
    assert _squash(_private.INSERT_WRITES_SQL) in writes
# -- LangGraph's private pieces, behind one adapter (langgraph_effects/_private.py) -------------


def test_toolnode_overrides_named_in_the_adapter_keep_their_shape() -> None:
    """The methods ``EffectToolNode`` overrides exist on ``ToolNode`` with the parameters
    the adapter lists (the node passes them straight through to ``super()``)."""
    from langgraph_effects import EffectToolNode

    for name, params in _private.TOOL_NODE_OVERRIDES.items():
        assert tuple(inspect.signature(getattr(ToolNode, name)).parameters) == params, name
        assert name in EffectToolNode.__dict__, name


def test_toolnode_parses_every_input_shape_the_adapter_reads() -> None:
    """``_parse_input`` reads a message list, a state dict and a ``Send`` payload;
    ``_messages_key`` names the state key; ``history_of`` finds the history in each."""
    from langgraph.prebuilt.tool_node import ToolCallWithContext

    from langgraph_effects._runtime.binding import history_of

    # (``__type`` is name-mangled in the TypedDict's annotations)
    assert {"tool_call", "state"} <= set(ToolCallWithContext.__annotations__)

    @tool
    def probe(x: int) -> str:
        """Probe."""
        return str(x)

    call = {"name": "probe", "args": {"x": 1}, "id": "c1", "type": "tool_call"}
    asked = AIMessage("", tool_calls=[call])
    node = ToolNode([probe], messages_key="chat")
    assert _private.messages_key(node) == "chat"
    state = {"chat": [HumanMessage("go"), asked]}
    payload = {"__type": _private.TOOL_CALL_WITH_CONTEXT, "tool_call": call, "state": state}
    for value in (state, payload):
        assert [c["id"] for c in _private.tool_calls_in(node, value)] == ["c1"]
        assert history_of(value, "chat") == state["chat"]
    plain = ToolNode([probe])
    assert [c["id"] for c in _private.tool_calls_in(plain, [asked])] == ["c1"]


def test_toolnode_keeps_its_wrappers_where_the_adapter_reads_them() -> None:
    @tool
    def probe(x: int) -> str:
        """Probe."""
        return str(x)

    def wrap(request: Any, execute: Any) -> Any:
        return execute(request)

    async def awrap(request: Any, execute: Any) -> Any:
        return await execute(request)

    assert not _private.sync_only_wrapper(ToolNode([probe]))
    assert _private.sync_only_wrapper(ToolNode([probe], wrap_tool_call=wrap))
    assert not _private.sync_only_wrapper(ToolNode([probe], wrap_tool_call=wrap, awrap_tool_call=awrap))
    assert not _private.sync_only_wrapper(ToolNode([probe], awrap_tool_call=awrap))


def test_a_write_made_during_a_node_lands_before_its_returned_update() -> None:
    """``_private.write_now``: EffectMiddleware rewrites the history from inside the
    model call; the model node's reply must land after it, in the same step and commit."""
    from langchain_core.messages import RemoveMessage
    from langgraph.config import get_config
    from langgraph.graph.message import REMOVE_ALL_MESSAGES

    def rewrite(state: State) -> dict[str, Any]:
        history = [*state["messages"], ToolMessage("answered", tool_call_id="c0", id="t0")]
        _private.write_now(get_config(), "messages", [RemoveMessage(id=REMOVE_ALL_MESSAGES), *history])
        return {"messages": [AIMessage("reply", id="a1")]}

    def plain(state: State) -> dict[str, Any]:
        return {"messages": [AIMessage("reply", id="a1")]}

    counts = []
    for node in (plain, rewrite):
        saver = InMemorySaver()
        builder = StateGraph(State)
        builder.add_node("model", node)
        builder.add_edge(START, "model")
        builder.add_edge("model", END)
        config: Any = {"configurable": {"thread_id": "t"}}
        out = builder.compile(checkpointer=saver).invoke({"messages": [HumanMessage("go", id="h0")]}, config)
        counts.append(len(list(saver.list(config))))
    assert [m.id for m in out["messages"]] == ["h0", "t0", "a1"]
    assert counts[0] == counts[1] == 3


def test_create_agent_rewrites_the_history_when_it_answers_malformed_calls() -> None:
    """``_private.agent_repairs``: the model node of ``create_agent`` answers an invalid
    tool call itself by writing the whole history back (so a write made before it is
    lost, and EffectMiddleware sends its answers after it instead)."""
    from langchain.agents import create_agent
    from langchain.agents.middleware import AgentMiddleware
    from langchain_core.messages import RemoveMessage
    from langgraph.config import get_config
    from langgraph.graph.message import REMOVE_ALL_MESSAGES

    from langgraph_effects.testing import ScriptedChatModel

    bad = {"name": "probe", "args": "{", "id": "bad-1", "error": None, "type": "invalid_tool_call"}
    asked = AIMessage("", invalid_tool_calls=[bad], id="a0")  # type: ignore[list-item]
    clean = [HumanMessage("go", id="h0"), AIMessage("hi", id="a0")]
    assert _private.agent_repairs(clean) is None
    repaired = _private.agent_repairs([HumanMessage("go", id="h0"), asked])
    assert repaired is not None and [m.type for m in repaired] == ["human", "ai", "tool"]
    assert repaired[1] is asked and repaired[2].tool_call_id == "bad-1"

    class Early(AgentMiddleware):
        def wrap_model_call(self, request: Any, handler: Any) -> Any:
            extra = HumanMessage("written early", id="x")
            _private.write_now(get_config(), "messages", [RemoveMessage(id=REMOVE_ALL_MESSAGES), extra])
            return handler(request)

    agent = create_agent(
        ScriptedChatModel(script=lambda _: AIMessage("ok", id="a1")), tools=[], middleware=[Early()]
    )
    out = agent.invoke({"messages": [HumanMessage("go", id="h0"), asked, HumanMessage("again", id="h1")]})
    assert [m.type for m in out["messages"]] == ["human", "ai", "tool", "human", "ai"]  # early write lost
    assert out["messages"][2].tool_call_id == "bad-1"
    out = agent.invoke({"messages": clean})
    assert [m.id for m in out["messages"]] == ["x", "a1"]  # without a repair it holds


def test_functional_results_are_cached_by_place_and_sibling_calls_see_them() -> None:
    """LangGraph names a Functional API call by its place (checkpoint, task name, call
    index), never by its arguments: a resumed entrypoint whose order changed gets the
    saved result of call *i* for whatever it calls *i*-th, without running it. A task's
    write to a channel the entrypoint lacks is saved with its writes and given back
    with them; ``_private.sibling_calls`` sees every call of the parent, those answered
    from the saved writes included, with their input and writes."""
    from langgraph.config import get_config
    from langgraph.func import entrypoint, task

    saver = InMemorySaver()
    order = ["a", "b"]
    ran: list[str] = []
    seen: list[Any] = []

    @task
    def step(x: str) -> str:
        config = get_config()
        seen.append((x, _private.task_id(config), _private.sibling_calls(config)))
        ran.append(x)
        if x == "b" and len(ran) == 2:
            raise RuntimeError("crash")
        _private.write_now(config, "__probe__", {"was": x})
        return "result of " + x

    @entrypoint(checkpointer=saver)
    def flow(n: int) -> list[str]:
        return [step(x).result() for x in order]

    config: Any = {"configurable": {"thread_id": "c"}}
    with pytest.raises(RuntimeError):
        flow.invoke(1, config, durability="sync")
    first_ids = [s[1] for s in seen]
    order[:] = ["c", "b"]
    assert flow.invoke(None, config, durability="sync") == ["result of a", "result of b"]
    assert ran == ["a", "b", "b"]  # "c" never ran: it got "a"'s saved result
    assert seen[2][1] == first_ids[1]  # the same place, the same task id
    index, siblings = seen[2][2]
    assert index == 1
    cached = next(s for s in siblings if s.place == 0)
    assert cached.input == (("c",), {})
    assert ("__probe__", {"was": "a"}) in cached.writes and ("__return__", "result of a") in cached.writes
    assert _private.task_function(cached.proc) is step.func


def test_a_failed_functional_task_gets_its_other_writes_back_and_is_not_run_again() -> None:
    """Why ``@effectful`` leaves its mark only beside a result: a task that wrote and then
    failed is, on a resume, answered with ``None`` from its saved writes (the error is
    dropped, the rest given back) instead of being run again."""
    from langgraph.config import get_config
    from langgraph.func import entrypoint, task

    ran: list[int] = []

    @task
    def step() -> str:
        _private.write_now(get_config(), "__probe__", 1)
        ran.append(1)
        if len(ran) == 1:
            raise RuntimeError("crash")
        return "ran again"

    @entrypoint(checkpointer=InMemorySaver())
    def flow(n: int) -> list[str]:
        return [step().result()]

    config: Any = {"configurable": {"thread_id": "e"}}
    with pytest.raises(RuntimeError):
        flow.invoke(1, config, durability="sync")
    assert flow.invoke(None, config, durability="sync") == [None]
    assert ran == [1]


def test_a_create_agent_hook_reaches_the_agents_tool_node() -> None:
    """``EffectMiddleware`` checks its ``effects`` names against the agent's tools, which
    it reaches from a hook's config (``_private.graph_tool_nodes``): in a model call and in
    a tool call."""
    from langchain.agents import create_agent
    from langchain.agents.middleware import AgentMiddleware

    from langgraph_effects.testing import ScriptedChatModel, call_each_then_finish

    @tool
    def send(x: str) -> str:
        """Send."""
        return x

    seen: list[list[str]] = []

    class Probe(AgentMiddleware):
        def wrap_model_call(self, request: Any, handler: Any) -> Any:
            from langgraph.config import get_config

            seen.append([n for node in _private.graph_tool_nodes(get_config()) for n in node.tools_by_name])
            return handler(request)

        def wrap_tool_call(self, request: Any, handler: Any) -> Any:
            nodes = _private.graph_tool_nodes(request.runtime.config)
            seen.append([n for node in nodes for n in node.tools_by_name])
            return handler(request)

    model = ScriptedChatModel(script=call_each_then_finish([("send", {"x": "1"})]))
    agent = create_agent(model, tools=[send], middleware=[Probe()], checkpointer=InMemorySaver())
    agent.invoke({"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": "t"}})
    assert seen == [["send"], ["send"], ["send"]]  # model call, tool call, model call
