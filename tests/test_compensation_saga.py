"""Sagas: when a later step fails definitively (and the model is answered with the
failure), the earlier confirmed effects of the same saga are undone, newest first, each
exactly once; an effect without an undo is reported, one in doubt is not undone. The
provider keeps its own records."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph

from langgraph_effects import (
    AsyncEffectSqliteSaver,
    DefiniteFailure,
    Effect,
    EffectToolNode,
    OperationQuery,
    State,
    Undo,
    current_operation,
)
from langgraph_effects.core.compensation import undo_operation_id
from langgraph_effects.lab.providers import Provider
from tests.helpers.agent import State as AgentState

CONFIG: Any = {"configurable": {"thread_id": "trip-1"}}


def trip_graph(
    saver: Any,
    provider: Provider,
    plan: list[tuple[str, dict[str, Any]]],
    *,
    handle_tool_errors: bool = True,
) -> Any:
    """The model asks for one call per turn, in ``plan`` order, then stops."""

    def model(state: AgentState) -> dict[str, Any]:
        done = sum(isinstance(m, ToolMessage) for m in state["messages"])
        if done >= len(plan):
            return {"messages": [AIMessage("done", id=f"ai-{done}")]}
        name, args = plan[done]
        call = {"name": name, "args": args, "id": f"call-{done}", "type": "tool_call"}
        return {"messages": [AIMessage("", tool_calls=[call], id=f"ai-{done}")]}

    def apply(label: str) -> str:
        return provider.apply({"operation": label}, key=current_operation().provider_key).effect_id

    @tool
    def hotel(trip: str) -> str:
        """Book the hotel."""
        return apply(f"hotel:{trip}")

    @tool
    def car(trip: str) -> str:
        """Rent the car."""
        return apply(f"car:{trip}")

    @tool
    def mail(trip: str) -> str:
        """Mail the itinerary (cannot be unsent)."""
        return apply(f"mail:{trip}")

    @tool
    def pay(trip: str) -> str:
        """Charge the card: declined."""
        raise DefiniteFailure("card declined")

    def cancel(what: str) -> Any:
        def undo(provider_key: str) -> str:
            return apply(f"cancel-{what}:{provider_key}")

        undo.__name__ = f"cancel_{what}"
        return Undo(undo, effect=Effect(dedup_window=3600))

    saga = lambda args, config: f"trip:{args['trip']}"  # noqa: E731
    effects = {
        "hotel": Effect(dedup_window=3600, saga=saga, compensate=cancel("hotel")),
        "car": Effect(dedup_window=3600, saga=saga, compensate=cancel("car")),
        "mail": Effect(dedup_window=3600, saga=saga),
        "pay": Effect(dedup_window=3600, saga=saga),
    }
    builder = StateGraph(AgentState)
    builder.add_node("model", model)
    builder.add_node(
        "tools",
        EffectToolNode([hotel, car, mail, pay], effects=effects, handle_tool_errors=handle_tool_errors),
    )
    builder.add_edge(START, "model")
    builder.add_conditional_edges("model", lambda s: "tools" if s["messages"][-1].tool_calls else END)
    builder.add_edge("tools", "model")
    return builder.compile(checkpointer=saver)


async def test_a_declined_payment_cancels_the_earlier_bookings_once(tmp_path: Path) -> None:
    provider = Provider(tmp_path / "provider.sqlite", mode="dedup")
    plan = [
        ("hotel", {"trip": "rome"}),
        ("hotel", {"trip": "oslo"}),  # another saga instance: left alone
        ("car", {"trip": "rome"}),
        ("mail", {"trip": "rome"}),
        ("pay", {"trip": "rome"}),
    ]
    async with AsyncEffectSqliteSaver.from_conn_string(str(tmp_path / "agent.sqlite")) as saver:
        await saver.setup()
        graph = trip_graph(saver, provider, plan)
        await graph.ainvoke({"messages": [HumanMessage("book rome")]}, CONFIG)
        # Run again (a resume replays the failure): nothing is undone twice.
        await graph.ainvoke(None, CONFIG)
        rows = await saver.ledger.list_operations(OperationQuery(states=frozenset(State), limit=100))
    ops = {(op.tool, op.args.get("trip")): op for op in rows}
    counts = provider.count_effects()
    cancelled = {label.split(":")[0] for label in counts if label.startswith("cancel-")}
    assert cancelled == {"cancel-hotel", "cancel-car"}
    assert all(n == 1 for label, n in counts.items())
    assert counts["hotel:rome"] == counts["hotel:oslo"] == counts["mail:rome"] == 1
    assert sum(n for label, n in counts.items() if label.startswith("cancel-")) == 2
    rome, oslo = ops[("hotel", "rome")], ops[("hotel", "oslo")]
    car, mail = ops[("car", "rome")], ops[("mail", "rome")]
    assert rome.compensated_by == undo_operation_id(rome.op_id)
    assert car.compensated_by == undo_operation_id(car.op_id)
    assert oslo.compensated_by is None and mail.compensated_by is None  # other saga; no undo
    assert ops[("pay", "rome")].state is State.FAILED
    undo_car, undo_rome = ops[("cancel_car", None)], ops[("cancel_hotel", None)]
    assert undo_car.state is undo_rome.state is State.CONFIRMED
    assert undo_car.created_at <= undo_rome.created_at  # newest effect undone first


async def test_a_failure_raised_to_the_caller_undoes_nothing(tmp_path: Path) -> None:
    """Raised, a definite failure is not final (a RetryPolicy may retry it and succeed)."""
    provider = Provider(tmp_path / "provider.sqlite", mode="dedup")
    plan = [("hotel", {"trip": "rome"}), ("pay", {"trip": "rome"})]
    async with AsyncEffectSqliteSaver.from_conn_string(str(tmp_path / "agent.sqlite")) as saver:
        await saver.setup()
        graph = trip_graph(saver, provider, plan, handle_tool_errors=False)
        with pytest.raises(DefiniteFailure):  # raised: the caller may retry it
            await graph.ainvoke({"messages": [HumanMessage("book rome")]}, CONFIG)
        rows = await saver.ledger.list_operations(OperationQuery(states=frozenset(State), limit=100))
    assert provider.count_effects() == {"hotel:rome": 1}
    assert {op.tool: op.state for op in rows} == {"hotel": State.CONFIRMED, "pay": State.FAILED}
    assert all(op.compensated_by is None for op in rows)


def test_effects_of_finds_the_contracts_of_a_node_and_of_a_middleware(tmp_path: Path) -> None:
    from langchain.agents import create_agent
    from langchain_core.language_models.fake_chat_models import FakeListChatModel

    from langgraph_effects import EffectMiddleware
    from langgraph_effects._runtime.compensation import effects_of

    class Model(FakeListChatModel):
        def bind_tools(self, *args: Any, **kwargs: Any) -> Any:
            return self

    provider = Provider(tmp_path / "provider.sqlite", mode="dedup")
    graph = trip_graph(None, provider, [])
    assert set(effects_of(graph)) == {"hotel", "car", "mail", "pay"}

    @tool
    def book(room: str) -> str:
        """Book a room."""
        return room

    effect = Effect(compensate=lambda provider_key: provider_key)
    agent = create_agent(
        Model(responses=["ok"]), tools=[book], middleware=[EffectMiddleware(effects={"book": effect})]
    )
    assert effects_of(agent) == {"book": effect}
