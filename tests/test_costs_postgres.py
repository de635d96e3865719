"""On Postgres, a turn mixing a keyed call (its intent created ``dispatched``) and a
blind one (created ``pending``) opens with one write, through the node and the
middleware: each is sent once and settled, in a fresh schema of the test server. A
call the thread already made in an earlier turn (same tool and arguments, asked from
another state) still opens in one statement."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import BaseTool, tool
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import tools_condition

from langgraph_effects import (
    AsyncEffectPostgresSaver,
    Effect,
    EffectMiddleware,
    EffectToolNode,
    current_operation,
)
from langgraph_effects.lab.providers import Provider
from langgraph_effects.ledger import postgres
from langgraph_effects.ledger.base import OperationQuery
from langgraph_effects.testing import ScriptedChatModel, call_each_then_finish
from tests.ledger.conftest import created_schema

pytestmark = pytest.mark.postgres

EFFECTS = {"send_keyed": Effect(dedup_window=3600)}  # send_blind: undeclared, so blind
CONFIG: Any = {"configurable": {"thread_id": "t"}}


class _State(TypedDict):
    messages: Annotated[list[BaseMessage], add_messages]


@pytest.fixture
def dsn() -> Iterator[str]:
    """The test database, with a fresh schema first on the search_path."""
    with created_schema("lge_mixed") as (_, scoped):
        yield scoped


def _graph(path: str, tools: list[BaseTool], saver: Any, script: Any = None) -> Any:
    calls = [("send_keyed", {"n": 0}), ("send_blind", {"n": 1})]
    model = ScriptedChatModel(script=script or call_each_then_finish(calls))
    if path == "middleware":
        return create_agent(model, tools=tools, middleware=[EffectMiddleware(EFFECTS)], checkpointer=saver)

    async def agent(state: _State) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    builder = StateGraph(_State)
    builder.add_node("agent", agent)
    builder.add_node("tools", EffectToolNode(tools, effects=EFFECTS))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=saver)


@pytest.mark.parametrize("path", ["node", "middleware"])
async def test_a_keyed_and_a_blind_call_open_together(tmp_path: Path, dsn: str, path: str) -> None:
    keyed = Provider(tmp_path / "keyed.sqlite", "dedup")
    blind = Provider(tmp_path / "blind.sqlite", "blind")

    @tool
    def send_keyed(n: int) -> str:
        """Send notification ``n`` through a provider that dedups by key."""
        return keyed.apply({"operation": f"keyed:{n}"}, key=current_operation().provider_key).effect_id

    @tool
    def send_blind(n: int) -> str:
        """Send notification ``n`` through a provider that keeps no keys."""
        return blind.apply({"operation": f"blind:{n}"}).effect_id

    async with AsyncEffectPostgresSaver.from_conn_string(dsn) as saver:
        await saver.setup()
        graph = _graph(path, [send_keyed, send_blind], saver)
        result = await graph.ainvoke(
            {"messages": [HumanMessage("go")]}, {"configurable": {"thread_id": "t"}}, durability="sync"
        )
        ops = {op.tool: op for op in await saver.ledger.list_operations(OperationQuery())}
        trails = {tool: [e.event for e in await saver.ledger.audit(op.op_id)] for tool, op in ops.items()}
    assert result["messages"][-1].content == "done"
    assert keyed.count_effects() == {"keyed:0": 1} and blind.count_effects() == {"blind:1": 1}
    assert trails == {
        "send_keyed": ["intent", "succeed"],  # created dispatched: intent and marker in one row
        "send_blind": ["intent", "dispatch", "succeed"],  # created pending, dispatched later
    }


def _keyed_sender(tmp_path: Path) -> tuple[Provider, BaseTool]:
    """A provider that dedups by key and keeps its own records, and a tool sending to it."""
    keyed = Provider(tmp_path / "keyed.sqlite", "dedup")

    @tool
    def send_keyed(n: int) -> str:
        """Send notification ``n`` through a provider that dedups by key."""
        return keyed.apply({"operation": f"keyed:{n}"}, key=current_operation().provider_key).effect_id

    return keyed, send_keyed


def _spy_ledger_steps(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the steps the Postgres ledger answers from now on, in order."""
    steps: list[str] = []
    answer = postgres.answer  # what PostgresLedger answers each step with

    def spy(runner: Any, step: Any) -> Any:
        steps.append(type(step).__name__)
        return answer(runner, step)

    monkeypatch.setattr(postgres, "answer", spy)
    return steps


def _same_call_each_turn(messages: list[BaseMessage]) -> AIMessage:
    """Each new human message asks for the very same call (same id, same arguments)."""
    if isinstance(messages[-1], ToolMessage):
        return AIMessage(content="done")
    call = {"name": "send_keyed", "args": {"n": 0}, "id": "call-0", "type": "tool_call"}
    return AIMessage(content="", tool_calls=[call])


@pytest.mark.parametrize("path", ["node", "middleware"])
async def test_the_same_call_in_a_later_turn_opens_in_one_statement(
    tmp_path: Path, dsn: str, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    keyed, send_keyed = _keyed_sender(tmp_path)
    steps = _spy_ledger_steps(monkeypatch)
    async with AsyncEffectPostgresSaver.from_conn_string(dsn) as saver:
        await saver.setup()
        graph = _graph(path, [send_keyed], saver, _same_call_each_turn)
        turns: list[list[str]] = []
        for text in ("go", "again"):
            steps.clear()
            await graph.ainvoke({"messages": [HumanMessage(text)]}, CONFIG, durability="sync")
            turns.append(list(steps))
        [first, second] = await saver.ledger.list_operations(OperationQuery())
    assert keyed.count_effects() == {"keyed:0": 2}  # two turns, two sends: no re-plan
    assert first.args_hash == second.args_hash and first.op_id != second.op_id
    # Open (read and insert in one statement), then the outcome: in both turns.
    assert turns == [["FindOrInsert", "CasWithAudit"]] * 2, turns


@pytest.mark.parametrize("path", ["node", "middleware"])
async def test_eight_parallel_calls_open_and_settle_in_a_few_statements(
    tmp_path: Path, dsn: str, path: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Eight calls in one AIMessage: the node opens them in one plan, one statement;
    the middleware runs a task per call, each opened by its own statement (group
    commit puts them in one transaction). Either way every call is sent once and
    nothing is read apart from its open. (These tools write to a provider that
    fsyncs, so they end one by one and so do their outcomes.)"""
    keyed, send_keyed = _keyed_sender(tmp_path)
    steps = _spy_ledger_steps(monkeypatch)
    script = call_each_then_finish([("send_keyed", {"n": n}) for n in range(8)])
    async with AsyncEffectPostgresSaver.from_conn_string(dsn) as saver:
        await saver.setup()
        graph = _graph(path, [send_keyed], saver, script)
        steps.clear()  # setup's own
        result = await graph.ainvoke({"messages": [HumanMessage("go")]}, CONFIG, durability="sync")
        stored = await saver.ledger.list_operations(OperationQuery())
    assert result["messages"][-1].content == "done"
    assert keyed.count_effects() == {f"keyed:{n}": 1 for n in range(8)}
    assert len(stored) == 8 and all(op.state.value == "confirmed" for op in stored)
    opens = steps.count("FindOrInsert")
    # The node's one plan (a task a loop turn late would make a second), or a task's each.
    assert opens <= 2 if path == "node" else opens == 8, steps
    assert "Find" not in steps, steps
    assert len(steps) <= opens + 8, steps  # the opens, then at most one statement per outcome
