"""A worker process for the crash tests of an undo an operator's verdict orders.

``python -m tests.helpers.verdict_undo_worker SPEC_JSON`` runs one step of a thread
whose only call books a room at a blind hotel that applies it and then times out, so
the call goes to review; ``book`` declares an undo (``cancel``, counted at a provider
that keeps its own records; see :mod:`tests.helpers.compensation_worker`):

* ``start``: run the thread until it asks for the review;
* ``answer``: resume it with ``answer`` (``{"type": "landed", "undo": true}``), with
  ``kill_at`` (``after_intent``/``before_outcome``) SIGKILLing this process inside the
  undo: before the cancel is sent, or after the provider applied it;
* ``resume``: a plain resume (``ainvoke(None)``), as a restarted worker does.

The ledger and checkpoints live in SQLite (``db`` a path) or Postgres (``db`` a DSN),
as ``backend`` says.
Prints one JSON line: the pending interrupts, the ToolMessages, and the undo's row.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import asdict, dataclass, field
from typing import Any

from langchain_core.messages import HumanMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.types import Command

from langgraph_effects import AsyncEffectPostgresSaver, AsyncEffectSqliteSaver
from langgraph_effects._runtime import faults
from langgraph_effects.core.compensation import undo_operation_id
from langgraph_effects.lab.providers import Provider
from tests.helpers.compensation_worker import _kill, effects
from tests.helpers.one_call import call, one_call_graph

CONFIG: Any = {"configurable": {"thread_id": "t1"}}


@dataclass
class VerdictSpec:
    db: str
    backend: str  # sqlite | postgres
    hotel: str
    cancels: str
    step: str = "start"  # start | answer | resume
    undo_dedup: bool = True
    kill_at: str = ""
    answer: dict[str, Any] = field(default_factory=dict)


def spec_json(spec: VerdictSpec) -> str:
    return json.dumps(asdict(spec))


@asynccontextmanager
async def saver_for(spec: VerdictSpec) -> AsyncIterator[Any]:
    if spec.backend == "postgres":
        async with AsyncEffectPostgresSaver.from_conn_string(spec.db, ledger_max_size=2) as saver:
            yield saver
    else:
        async with AsyncEffectSqliteSaver.from_conn_string(spec.db) as saver:
            yield saver


def graph_for(spec: VerdictSpec, saver: Any) -> Any:
    hotel = Provider(spec.hotel, mode="blind")

    @tool
    def book(room: str) -> str:
        """Book a room (the hotel applies it, then the gateway times out)."""
        hotel.apply({"operation": f"book:{room}"})
        raise TimeoutError("gateway timeout")

    contracts = effects(spec.cancels, book_dedup=False, undo_dedup=spec.undo_dedup)
    return one_call_graph([book], contracts, saver, [call("book", room="12")])


async def main(spec: VerdictSpec) -> dict[str, Any]:
    async with saver_for(spec) as saver:
        await saver.setup()
        graph = graph_for(spec, saver)
        if spec.step == "start":
            await graph.ainvoke({"messages": [HumanMessage("go")]}, CONFIG)
        elif spec.step == "answer":
            if spec.kill_at:
                faults.install(spec.kill_at, _kill)
            await graph.ainvoke(Command(resume=spec.answer), CONFIG)
        else:
            await graph.ainvoke(None, CONFIG)
        state = await graph.aget_state(CONFIG)
        interrupts = [{"id": i.id, "value": i.value} for i in state.interrupts]
        messages = [
            {"content": m.content, "artifact": m.artifact}
            for m in state.values.get("messages", [])
            if isinstance(m, ToolMessage)
        ]
        undo = None
        if messages and (messages[-1].get("artifact") or {}).get("operation_id"):
            found = await saver.ledger.get(undo_operation_id(messages[-1]["artifact"]["operation_id"]))
            undo = found.state.value if found is not None else None
    return {"interrupts": interrupts, "messages": messages, "undo": undo, "next": list(state.next)}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(VerdictSpec(**json.loads(sys.argv[1])))), default=str), flush=True)
