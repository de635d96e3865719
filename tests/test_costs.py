"""What one turn of tool calls costs the ledger, counted (never timed).

Counted at the SQLite ledger's own connection: every trip to its worker thread (one
per transaction or read) and every ``COMMIT`` it executes (each a durable fsync
under ``synchronous=FULL``). Issue 15's budget: at most 2 trips per call, 2 durable
commits per call (3 for a blind call, whose intent is committed ``pending`` first),
and for 8 parallel calls at most 3 commits in all: the intents in one, outcomes that
arrive together group-committed. The provider keeps its own records, so the test
also proves each call was sent exactly once.
"""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langchain.agents import create_agent
from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.tools import BaseTool, tool
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import tools_condition

from langgraph_effects import (
    AsyncEffectSqliteSaver,
    Effect,
    EffectMiddleware,
    EffectToolNode,
    current_operation,
)
from langgraph_effects.lab.providers import Provider
from langgraph_effects.ledger import sqlite as sqlite_ledger
from langgraph_effects.testing import ScriptedChatModel, call_each_then_finish


class _State(TypedDict):
    messages: Annotated[list[BaseMessage], add_messages]


@dataclass
class Counts:
    trips: int = 0
    commits: int = 0


def _send_tool(provider: Provider, *, keyed: bool, together: int = 1) -> BaseTool:
    """The provider applies each call; the calls of a turn then return together (a
    barrier), as parallel requests to a remote service do, so their outcomes reach
    the ledger at once."""
    barrier: dict[str, asyncio.Barrier] = {}

    @tool
    async def send(n: int) -> str:
        """Send notification ``n``."""
        op = current_operation()
        key = op.provider_key if keyed else None
        payload = {"operation": f"{op.thread_id}:send:{n}"}
        receipt = await asyncio.to_thread(provider.apply, payload, key=key)
        await barrier.setdefault(op.thread_id, asyncio.Barrier(together)).wait()
        return receipt.effect_id

    return send


def _node_graph(send: BaseTool, effect: Effect, fanout: int, saver: Any) -> Any:
    model = ScriptedChatModel(script=call_each_then_finish([("send", {"n": i}) for i in range(fanout)]))

    async def agent(state: _State) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder = StateGraph(_State)
    builder.add_node("agent", agent)
    builder.add_node("tools", EffectToolNode([send], effects={"send": effect}))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=saver)


def _agent_graph(send: BaseTool, effect: Effect, fanout: int, saver: Any) -> Any:
    model = ScriptedChatModel(script=call_each_then_finish([("send", {"n": i}) for i in range(fanout)]))
    return create_agent(
        model, tools=[send], middleware=[EffectMiddleware({"send": effect})], checkpointer=saver
    )


@asynccontextmanager
async def _counted(monkeypatch: pytest.MonkeyPatch, saver: AsyncEffectSqliteSaver) -> AsyncIterator[Counts]:
    counts = Counts()
    ledger = saver.ledger
    real = sqlite_ledger.run_in_connection_thread

    async def trip(conn: Any, fn: Callable[[sqlite3.Connection], Any]) -> Any:
        if conn is ledger.conn:  # type: ignore[attr-defined]
            counts.trips += 1
        return await real(conn, fn)

    def trace(statement: str) -> None:
        if statement.strip().upper().startswith("COMMIT"):
            counts.commits += 1

    await real(ledger.conn, lambda db: db.set_trace_callback(trace))  # type: ignore[attr-defined]
    monkeypatch.setattr(sqlite_ledger, "run_in_connection_thread", trip)
    try:
        yield counts
    finally:
        monkeypatch.setattr(sqlite_ledger, "run_in_connection_thread", real)
        await real(ledger.conn, lambda db: db.set_trace_callback(None))  # type: ignore[attr-defined]


BUILDERS = {"node": _node_graph, "middleware": _agent_graph}
KEYED = Effect(dedup_window=3600)


async def _one_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: str, fanout: int, effect: Effect
) -> tuple[Counts, Provider]:
    blind = effect.kind == "blind"
    provider = Provider(tmp_path / "provider.sqlite", "blind" if blind else "dedup")
    send = _send_tool(provider, keyed=not blind, together=fanout)
    async with AsyncEffectSqliteSaver.from_conn_string(str(tmp_path / "agent.sqlite")) as saver:
        await saver.setup()
        graph = BUILDERS[path](send, effect, fanout, saver)
        # A warm-up turn on another thread: setup and first-use work is not counted.
        await graph.ainvoke({"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": "w"}})
        async with _counted(monkeypatch, saver) as counts:
            result = await graph.ainvoke(
                {"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": "t"}}, durability="sync"
            )
    assert result["messages"][-1].content == "done"
    return counts, provider


@pytest.mark.parametrize("path", sorted(BUILDERS))
async def test_one_keyed_call_costs_two_trips_and_two_commits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    counts, provider = await _one_turn(tmp_path, monkeypatch, path, 1, KEYED)
    assert provider.count_effects() == {"t:send:0": 1, "w:send:0": 1}
    assert (counts.trips, counts.commits) == (2, 2)


@pytest.mark.parametrize("path", sorted(BUILDERS))
async def test_one_blind_call_costs_three_commits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    counts, provider = await _one_turn(tmp_path, monkeypatch, path, 1, Effect.blind())
    assert provider.count_effects() == {"t:send:0": 1, "w:send:0": 1}
    assert counts.commits == 3 and counts.trips <= 3


@pytest.mark.parametrize("path", sorted(BUILDERS))
async def test_eight_parallel_calls_share_their_commits(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    counts, provider = await _one_turn(tmp_path, monkeypatch, path, 8, KEYED)
    assert provider.count_effects() == {f"{t}:send:{i}": 1 for t in "tw" for i in range(8)}
    # Intents in one commit, the outcomes (they arrive together) in one more: 2, or 3
    # when a straggler misses the first group (the bound for 8 calls is 3).
    assert counts.commits <= 3 and counts.trips <= 3, counts


@pytest.mark.parametrize("path", sorted(BUILDERS))
async def test_a_tool_task_does_not_read_back_a_checkpoint_this_process_saved(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, path: str
) -> None:
    """The durability barrier and the turn come from what our saver committed: a turn
    reads checkpoints exactly as often as the same agent without this package (under
    ``durability="sync"``; under ``"async"`` the save may still be in flight, and the
    task reads until it finds it)."""
    provider = Provider(tmp_path / "provider.sqlite", "dedup")

    @tool
    def plain_send(n: int) -> str:
        """Send notification ``n`` (not tracked)."""
        return provider.apply({"operation": f"plain:send:{n}"}, key=f"plain-{n}").effect_id

    plain_send.name = "send"
    async with AsyncEffectSqliteSaver.from_conn_string(str(tmp_path / "agent.sqlite")) as saver:
        await saver.setup()
        reads: list[Any] = []
        real = saver.aget_tuple

        async def counted(config: Any) -> Any:
            reads.append(config)
            return await real(config)

        monkeypatch.setattr(saver, "aget_tuple", counted)
        model = ScriptedChatModel(script=call_each_then_finish([("send", {"n": 0})]))
        plain = (
            create_agent(model, tools=[plain_send], checkpointer=saver)
            if path == "middleware"
            else _node_graph(plain_send, Effect.read_only(), 1, saver)
        )
        ours = BUILDERS[path](_send_tool(provider, keyed=True), KEYED, 1, saver)
        counts = []
        for thread, graph in (("plain", plain), ("t", ours)):
            reads.clear()
            config: Any = {"configurable": {"thread_id": thread}}
            result = await graph.ainvoke({"messages": [HumanMessage("go")]}, config, durability="sync")
            assert result["messages"][-1].content == "done"
            counts.append(len(reads))
    assert counts[0] == counts[1]
    assert provider.count_effects() == {"plain:send:0": 1, "t:send:0": 1}
