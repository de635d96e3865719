"""Many threads of one process calling ``graph.invoke`` on one sync saver all finish.

A threaded server (Flask, gunicorn's gthread workers, Django) runs one request per
thread, each calling ``graph.invoke`` on the saver the process opened once. The sync
savers run their async twins on the portal's event loop; nothing they do may park a
thread of that loop's executor on work that needs the executor (LangGraph's async
Postgres saver serializes blobs there), or ``min(32, cpu + 4)`` concurrent runs
wedge the process for good. Each run here has a hard deadline, so a regression
fails instead of hanging.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.runnables import RunnableConfig

from langgraph_effects import DurabilityError, EffectPostgresSaver, EffectSqliteSaver
from langgraph_effects._integrations.node import EffectToolNode
from langgraph_effects.testing import Provider
from tests.helpers.agent import Spec, effect_for, send_tool, tool_loop
from tests.ledger import conftest as ledger_fixtures

#: The size of the default executor of an event loop on this machine.
DEFAULT_EXECUTOR = min(32, (os.cpu_count() or 1) + 4)
THREADS = 4 * DEFAULT_EXECUTOR
DEADLINE = 120.0  # seconds for all the runs together; a wedged process never finishes


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def saver(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    """A set-up sync saver of each backend (Postgres: a schema of its own)."""
    if request.param == "sqlite":
        with EffectSqliteSaver.from_conn_string(tmp_path / "agent.sqlite") as opened:
            opened.setup()
            yield opened
        return
    with (
        ledger_fixtures.created_schema("lge_syncthreads") as (_, dsn),
        EffectPostgresSaver.from_conn_string(dsn) as pg,
    ):
        pg.setup()
        yield pg


def model(state: dict[str, Any], config: RunnableConfig) -> dict[str, Any]:
    """Asks for two effectful calls named after the thread, then finishes."""
    if any(isinstance(m, ToolMessage) for m in state["messages"]):
        return {"messages": [AIMessage("done")]}
    thread = config["configurable"]["thread_id"]
    calls = [
        {"name": "send", "args": {"operation": f"{thread}:{i}"}, "id": f"call-{i}", "type": "tool_call"}
        for i in range(2)
    ]
    return {"messages": [AIMessage("", tool_calls=calls)]}


def invoke_all(graph: Any, threads: int, durability: str | None) -> dict[str, Any]:
    """``graph.invoke`` once per thread id, all at once, each on a thread of its own;
    what each returned or raised (a run still going at the deadline is missing)."""
    outcomes: dict[str, Any] = {}
    start = threading.Barrier(threads)
    kwargs = {} if durability is None else {"durability": durability}

    def one(thread_id: str) -> None:
        start.wait()
        config = {"configurable": {"thread_id": thread_id}}
        try:
            outcomes[thread_id] = graph.invoke({"messages": [HumanMessage("go")]}, config, **kwargs)
        except Exception as error:
            outcomes[thread_id] = error

    workers = [threading.Thread(target=one, args=(f"w{i}",), daemon=True) for i in range(threads)]
    for w in workers:
        w.start()
    deadline = time.monotonic() + DEADLINE
    for w in workers:
        w.join(timeout=max(0.0, deadline - time.monotonic()))
    stuck = [w.name for w in workers if w.is_alive()]
    assert not stuck, f"{len(stuck)} of {threads} runs still waiting after {DEADLINE:g}s: wedged"
    return outcomes


@pytest.mark.slow
@pytest.mark.parametrize("durability", [None, "async", "sync", "exit"])
def test_four_times_the_default_executor_of_threads_all_finish(
    saver: Any, tmp_path: Path, durability: str | None
) -> None:
    spec = Spec(db="unused", provider=str(tmp_path / "provider.sqlite"))
    provider = Provider(spec.provider, "dedup")
    node = EffectToolNode([send_tool(spec, provider)], effects=effect_for(spec, provider))
    graph = tool_loop(model, node, saver)

    outcomes = invoke_all(graph, THREADS, durability)

    assert len(outcomes) == THREADS
    if durability == "exit":  # refused before anything is sent, in every thread
        assert all(isinstance(o, DurabilityError) for o in outcomes.values()), outcomes
        assert provider.count_requests("apply") == 0
        return
    errors = {t: o for t, o in outcomes.items() if isinstance(o, BaseException)}
    assert not errors
    assert all(o["messages"][-1].content == "done" for o in outcomes.values())
    expected = {f"w{i}:{k}": 1 for i in range(THREADS) for k in range(2)}
    assert provider.count_effects() == expected  # each call sent once
    assert provider.count_requests("apply") == 2 * THREADS


def test_a_wait_for_the_portal_from_its_own_executor_is_refused_not_wedged() -> None:
    """The rule the fix keeps, checked where it would break: a thread of the portal
    loop's executor that waits for the portal raises at once; the same call on a
    thread of its own (``in_thread``) runs."""
    import asyncio

    from langgraph_effects._runtime import portal

    def wait_for_portal() -> str:
        return portal.run(asyncio.sleep(0, result="answered"))

    async def from_executor() -> str:
        return await asyncio.to_thread(wait_for_portal)

    async def from_own_thread() -> str:
        return await portal.in_thread(wait_for_portal)

    with pytest.raises(RuntimeError, match="thread of that loop's own executor"):
        portal.run(from_executor())
    assert portal.run(from_own_thread()) == "answered"
