"""A compiled subgraph called with ``invoke`` from a plain ``def`` node of an async run.

LangGraph runs such a node on a worker thread, and its async savers run the
subgraph's sync checkpoint calls on their own event loop. The async Effect savers do
the same: the subgraph's checkpoints go through the saver's fence, and an effectful
tool inside it records its calls in the ledger on that loop, sent once. Called on the
event loop's own thread (an ``async def`` node calling ``invoke``), where LangGraph's
saver raises ``InvalidStateError``, ours raise ``SyncMismatchError`` naming the fix.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import HumanMessage, ToolMessage
from langgraph.graph import END, START, StateGraph

from langgraph_effects import (
    AsyncEffectPostgresSaver,
    AsyncEffectSqliteSaver,
    OperationQuery,
    SyncMismatchError,
)
from langgraph_effects.testing import Provider
from tests.helpers.agent import Spec, State, build
from tests.ledger import conftest as ledger_fixtures

CONFIG: Any = {"configurable": {"thread_id": "t1"}}


@asynccontextmanager
async def opened(backend: str, tmp_path: Path) -> AsyncIterator[Any]:
    """A set-up async saver of ``backend`` (Postgres: a schema of its own)."""
    if backend == "sqlite":
        async with AsyncEffectSqliteSaver.from_conn_string(str(tmp_path / "agent.sqlite")) as saver:
            await saver.setup()
            yield saver
        return
    with ledger_fixtures.created_schema("lge_syncsub") as (_, dsn):
        async with AsyncEffectPostgresSaver.from_conn_string(dsn) as saver:
            await saver.setup()
            yield saver


BACKENDS = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


def parent_graph(
    saver: Any, provider: Provider, calls: int, node: Callable[[Any], Any] | None = None, kind: str = "graph"
) -> Any:
    """A parent whose one node calls the agent subgraph (an ``EffectToolNode``, or
    ``create_agent`` with ``EffectMiddleware``, with ``calls`` effectful calls) with its
    sync ``invoke``."""
    spec = Spec(db="unused", provider=str(provider.path), calls=calls, kind=kind)
    inner = build(spec, None, provider)  # compiled without a checkpointer: the parent's

    def agent(state: State) -> Any:
        return inner.invoke(state)

    parent = StateGraph(State)
    parent.add_node("agent", node or agent)
    parent.add_edge(START, "agent")
    parent.add_edge("agent", END)
    return parent.compile(checkpointer=saver)


async def states(saver: Any) -> list[str]:
    return sorted(o.state.value for o in await saver.ledger.list_operations(OperationQuery()))


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("durability", "kind"), [("sync", "graph"), ("async", "graph"), ("sync", "create_agent")]
)
def test_a_sync_subgraph_in_an_async_run_sends_each_call_once_through_the_fence(
    backend: str, durability: str, kind: str, tmp_path: Path
) -> None:
    provider = Provider(tmp_path / "provider.sqlite", "dedup")

    async def main() -> None:
        async with opened(backend, tmp_path) as saver:
            graph = parent_graph(saver, provider, calls=2, kind=kind)
            out = await graph.ainvoke({"messages": [HumanMessage("go")]}, CONFIG, durability=durability)
            tools = [m for m in out["messages"] if isinstance(m, ToolMessage)]
            assert [m.artifact["state"] for m in tools] == ["confirmed", "confirmed"]
            assert out["messages"][-1].content == "done"
            assert await states(saver) == ["confirmed", "confirmed"]
            # Its calls were recorded on the saver's own loop, where the async run drives
            # the same ledger (a Postgres pool belongs to its loop), not on the portal's.
            assert saver.ledger._group._loop is asyncio.get_running_loop()
            # The subgraph's checkpoints were saved through the fenced saver (it remembers them).
            sub = [t async for t in saver.alist(None) if t.config["configurable"]["checkpoint_ns"]]
            assert sub and all(t.config["configurable"]["checkpoint_id"] in saver._written for t in sub)

            # Streamed on a second thread, and the first one run again from its end: each
            # call sent once, the finished thread answers from its checkpoint.
            again = {"configurable": {"thread_id": "t2"}}
            chunks = [c async for c in graph.astream({"messages": [HumanMessage("go")]}, again)]
            assert [next(iter(c)) for c in chunks] == ["agent"]
            await graph.ainvoke(None, CONFIG, durability=durability)
            assert await states(saver) == ["confirmed"] * 4

    asyncio.run(main())
    assert provider.count_requests("apply") == 4  # two calls on each thread, none re-sent
    assert provider.count_effects() == {"t1:0": 2, "t1:1": 2}  # the model's payloads, once per thread


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_sync_subgraph_on_the_event_loop_thread_is_refused_naming_ainvoke(
    backend: str, tmp_path: Path
) -> None:
    provider = Provider(tmp_path / "provider.sqlite", "dedup")
    spec = Spec(db="unused", provider=str(provider.path))
    inner = build(spec, None, provider)

    async def on_the_loop(state: State) -> Any:  # blocks the loop it would wait for
        return inner.invoke(state)

    async def main() -> None:
        async with opened(backend, tmp_path) as saver:
            graph = parent_graph(saver, provider, calls=1, node=on_the_loop)
            with pytest.raises(SyncMismatchError) as raised:
                await graph.ainvoke({"messages": [HumanMessage("go")]}, CONFIG, durability="sync")
            name = type(saver).__name__
            assert raised.value.used == name and raised.value.use == "ainvoke/astream"
            assert "await subgraph.ainvoke(...)" in str(raised.value)
            assert "nothing was read, saved or sent" in str(raised.value)
            assert await states(saver) == []

    asyncio.run(main())
    assert provider.count_requests("apply") == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_top_level_sync_run_from_a_worker_thread_is_still_refused(backend: str, tmp_path: Path) -> None:
    """Only what an async run starts crosses over: a sync run of its own on the async
    saver is refused naming the sync twin, as before."""
    provider = Provider(tmp_path / "provider.sqlite", "dedup")

    async def main() -> None:
        async with opened(backend, tmp_path) as saver:
            graph = build(Spec(db="unused", provider=str(provider.path)), saver, provider)
            with pytest.raises(SyncMismatchError) as raised:
                await asyncio.to_thread(graph.invoke, {"messages": [HumanMessage("go")]}, CONFIG)
            assert raised.value.use == type(saver).__name__.removeprefix("Async")
            assert await states(saver) == []

    asyncio.run(main())
    assert provider.count_requests("apply") == 0
