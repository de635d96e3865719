"""A read-only tool calls ``interrupt()`` while its effectful siblings are in flight.

One AIMessage asks for ``open_ticket(a)``, ``ask_human(...)`` and ``open_ticket(b)``.
The provider has Idempotency-Key semantics and takes 0.3 s per request, answering a
concurrent request under the same key with 409. The interrupt surfaces while both
tickets are still being opened; the thread is resumed at once. Each ticket must be
opened exactly once: the resume waits for the calls still running (they keep their
lease) and replays their recorded outcomes, with no second request and no 409.
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.types import Command, interrupt

from langgraph_effects import (
    AsyncEffectSqliteSaver,
    Effect,
    InMemoryLedger,
    OperationQuery,
    attach_ledger,
)
from langgraph_effects._integrations.middleware import EffectMiddleware
from langgraph_effects._integrations.node import EffectToolNode
from langgraph_effects._runtime import lease
from langgraph_effects._runtime import portal as _portal
from langgraph_effects._runtime.context import current_operation
from langgraph_effects.core.operation import Operation
from langgraph_effects.core.operation import State as OpState
from langgraph_effects.lab.providers import Provider
from langgraph_effects.testing import ScriptedChatModel
from tests.helpers.agent import State, tool_loop
from tests.helpers.lease_leaks import released_leases

CONFIG: Any = {"configurable": {"thread_id": "t1"}}
CALLS = [
    {"name": "open_ticket", "args": {"title": "a"}, "id": "call-a", "type": "tool_call"},
    {"name": "ask_human", "args": {"question": "which queue?"}, "id": "call-q", "type": "tool_call"},
    {"name": "open_ticket", "args": {"title": "b"}, "id": "call-b", "type": "tool_call"},
]


def build(saver: Any, provider: Provider, *, sync: bool, middleware: bool = False) -> Any:
    def model(state: State) -> dict[str, Any]:
        if any(isinstance(m, ToolMessage) for m in state["messages"]):
            return {"messages": [AIMessage("done", id="final")]}
        return {"messages": [AIMessage("", tool_calls=CALLS, id="ai-1")]}

    def apply(title: str) -> str:
        receipt = provider.apply({"operation": title}, key=current_operation().provider_key)
        return f"ticket {receipt.effect_id}"

    if sync:

        @tool
        def open_ticket(title: str) -> str:
            """Open a ticket."""
            return apply(title)
    else:

        @tool
        async def open_ticket(title: str) -> str:
            """Open a ticket."""
            return await asyncio.to_thread(apply, title)

    asked: list[str] = []

    @tool
    def ask_human(question: str) -> str:
        """Ask the user."""
        if not asked:
            # The first time, interrupt only once both tickets are on the wire (the
            # provider holds both keys as in flight).
            asked.append(question)
            deadline = time.monotonic() + 60
            while in_flight(provider) < 2 and time.monotonic() < deadline:
                time.sleep(0.005)
        return str(interrupt({"question": question}))

    effects = {"open_ticket": Effect(dedup_window=3600), "ask_human": Effect.read_only()}
    if middleware:  # create_agent: one task per call, LangGraph runs them side by side
        return create_agent(
            ScriptedChatModel(script=lambda messages: model({"messages": list(messages)})["messages"][0]),
            tools=[open_ticket, ask_human],
            middleware=[EffectMiddleware(effects)],
            checkpointer=saver,
        )
    node = EffectToolNode([open_ticket, ask_human], effects=effects)
    return tool_loop(model, node, saver)


def in_flight(provider: Provider) -> int:
    """Requests the provider is still processing (their keys are claimed, not done)."""
    if not provider.path.exists():
        return 0
    with sqlite3.connect(provider.path) as conn:
        try:
            row = conn.execute("SELECT COUNT(*) FROM idempotency_keys WHERE state = 'in_flight'")
        except sqlite3.OperationalError:  # tables not created yet
            return 0
        return int(row.fetchone()[0])


def check(ops: list[Operation], provider: Provider, final: dict[str, Any]) -> None:
    assert provider.count_effects() == {"a": 1, "b": 1}
    assert provider.count_requests("apply") == 2  # never re-sent, so never a 409 either
    with sqlite3.connect(provider.path) as conn:
        outcomes = [r[0] for r in conn.execute("SELECT outcome FROM requests WHERE kind = 'apply'")]
    assert "in_flight" not in outcomes
    assert sorted((o.tool_call_id, o.state.value, o.attempts) for o in ops) == [
        ("call-a", "confirmed", 1),
        ("call-b", "confirmed", 1),
    ]
    messages = {m.tool_call_id: m for m in final["messages"] if isinstance(m, ToolMessage)}
    assert messages["call-q"].content == "queue 7"
    for call_id in ("call-a", "call-b"):
        message = messages[call_id]
        assert message.status == "success" and message.content.startswith("ticket eff_")
        assert message.artifact["state"] == "confirmed"


def in_flight_at_interrupt(ops: list[Operation]) -> None:
    """Right after the interrupt surfaced: both tickets are still dispatched and held."""
    assert [o.state for o in ops] == [OpState.DISPATCHED] * 2
    for o in ops:
        assert o.owner is not None and lease.owner_alive(o.owner) is True


async def test_siblings_of_an_interrupting_call_under_create_agent(tmp_path: Path) -> None:
    """The same AIMessage through ``create_agent`` + ``EffectMiddleware``."""
    provider = Provider(tmp_path / "provider.sqlite", "dedup", processing_time=0.3)
    async with AsyncEffectSqliteSaver.from_conn_string(str(tmp_path / "agent.sqlite")) as saver:
        await saver.setup()
        graph = build(saver, provider, sync=False, middleware=True)
        first = await graph.ainvoke({"messages": [HumanMessage("go")]}, CONFIG, durability="sync")
        assert first["__interrupt__"][0].value == {"question": "which queue?"}
        final = await graph.ainvoke(Command(resume="queue 7"), CONFIG, durability="sync")
        check(await saver.ledger.list_operations(OperationQuery()), provider, final)


async def test_siblings_in_flight_keep_their_lease_async(tmp_path: Path) -> None:
    db = tmp_path / "agent.sqlite"
    provider = Provider(tmp_path / "provider.sqlite", "dedup", processing_time=0.3)
    async with AsyncEffectSqliteSaver.from_conn_string(str(db)) as saver:
        await saver.setup()
        graph = build(saver, provider, sync=False)
        first = await graph.ainvoke({"messages": [HumanMessage("go")]}, CONFIG, durability="sync")
        assert first["__interrupt__"][0].value == {"question": "which queue?"}
        assert in_flight(provider) == 2
        in_flight_at_interrupt(await saver.ledger.list_operations(OperationQuery()))
        final = await graph.ainvoke(Command(resume="queue 7"), CONFIG, durability="sync")
        check(await saver.ledger.list_operations(OperationQuery()), provider, final)


def test_siblings_in_flight_keep_their_lease_sync(tmp_path: Path) -> None:
    provider = Provider(tmp_path / "provider.sqlite", "dedup", processing_time=0.3)
    ledger = InMemoryLedger()
    graph = build(attach_ledger(InMemorySaver(), ledger), provider, sync=True)
    first = graph.invoke({"messages": [HumanMessage("go")]}, CONFIG, durability="sync")
    assert first["__interrupt__"][0].value == {"question": "which queue?"}
    final = graph.invoke(Command(resume="queue 7"), CONFIG, durability="sync")
    check(_portal.run(ledger.list_operations(OperationQuery())), provider, final)


@pytest.fixture(autouse=True)
def _no_leftover_locks() -> Iterator[None]:
    with released_leases():
        yield
