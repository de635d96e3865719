"""A worker process for the budget and circuit-breaker races (``tests/test_controls_workers.py``).

``python -m tests.helpers.controls_worker SPEC_JSON``: one process that runs its
threads one after the other, each a graph with one ``pay`` call, on the shared
ledger of ``db`` (a SQLite path, or a Postgres DSN). Every ``pay`` call counts
against one budget (``budget``: max sends, per tenant) and/or one circuit breaker
(``circuit``: failures before it opens); the provider keeps its own records in its
own SQLite file. ``reject``: every payment is refused by the provider (a definite
failure). The worker prints ``{"ready": ...}``, waits for a line on stdin (so that
all workers start together), then prints one JSON line: what the model was told.
"""

from __future__ import annotations

import asyncio
import json
import sys
from dataclasses import asdict, dataclass, field
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages

from langgraph_effects import AsyncEffectSqliteSaver, Budget, CircuitBreaker, Effect, EffectToolNode
from langgraph_effects._runtime.context import current_operation
from langgraph_effects.lab.providers import Provider, ProviderRejected


@dataclass
class Spec:
    db: str
    provider: str
    name: str
    threads: list[str] = field(default_factory=list)
    budget: int | None = None
    circuit: int | None = None
    reject: bool = False
    on_exceed: str = "refuse"
    wait_for_go: bool = True


class State(TypedDict):
    messages: Annotated[list[BaseMessage], add_messages]


def build(spec: Spec, saver: Any, thread: str, provider: Provider) -> Any:
    def model(state: State) -> dict[str, Any]:
        if any(isinstance(m, ToolMessage) for m in state["messages"]):
            return {"messages": [AIMessage("done", id=f"final-{thread}")]}
        args = {"operation": thread, "amount": 1, "reject": spec.reject}
        call = {"name": "pay", "args": args, "id": "call-0", "type": "tool_call"}
        return {"messages": [AIMessage("", tool_calls=[call], id=f"ai-{thread}")]}

    @tool
    def pay(operation: str, amount: int, reject: bool = False) -> str:
        """Pay ``amount`` for ``operation``."""
        key = current_operation().provider_key
        receipt = provider.apply({"operation": operation, "amount": amount, "reject": reject}, key=key)
        return f"paid {receipt.effect_id}"

    effect = Effect(
        dedup_window=3600,
        definite_errors=[ProviderRejected],
        budgets=[Budget("payments", max_sends=spec.budget, on_exceed=spec.on_exceed)]  # type: ignore[arg-type]
        if spec.budget is not None
        else [],
        circuit=CircuitBreaker("bank", failures=spec.circuit, cooldown=600)
        if spec.circuit is not None
        else None,
    )
    builder = StateGraph(State)
    builder.add_node("model", model)
    builder.add_node("tools", EffectToolNode([pay], effects={"pay": effect}, handle_tool_errors=True))
    builder.add_edge(START, "model")
    builder.add_conditional_edges(
        "model", lambda s: "tools" if s["messages"][-1].tool_calls else END, ["tools", END]
    )
    builder.add_edge("tools", "model")
    return builder.compile(checkpointer=saver)


def _saver(db: str) -> Any:
    if "://" in db or "dbname=" in db:
        from langgraph_effects import AsyncEffectPostgresSaver

        return AsyncEffectPostgresSaver.from_conn_string(db, ledger_max_size=2)
    return AsyncEffectSqliteSaver.from_conn_string(db)


async def run(spec: Spec) -> dict[str, Any]:
    provider = Provider(spec.provider, "dedup")
    told: dict[str, str] = {}
    async with _saver(spec.db) as saver:
        if spec.wait_for_go:
            print(json.dumps({"ready": spec.name}), flush=True)
            await asyncio.to_thread(sys.stdin.readline)
        for thread in spec.threads:
            graph = build(spec, saver, thread, provider)
            config = {"configurable": {"thread_id": thread}}
            await graph.ainvoke({"messages": [HumanMessage("pay")]}, config, durability="sync")
            state = await graph.aget_state(config)
            answer = next(m for m in state.values["messages"] if isinstance(m, ToolMessage))
            artifact = answer.artifact if isinstance(answer.artifact, dict) else {}
            told[thread] = str(artifact.get("error") or answer.status)
    return {"told": told}


def main() -> None:
    spec = Spec(**json.loads(sys.argv[1]))
    print(json.dumps(asyncio.run(run(spec))))


def spec_json(spec: Spec) -> str:
    return json.dumps(asdict(spec))


if __name__ == "__main__":
    main()
