"""What the turn read costs: one ``aget_tuple`` of the checkpoint holding the calls
(scenario ``turn_read``).

    python benchmarks/run.py turn_read [--reads 50]

Every tool task reads the checkpoint it was prepared from once (the durability
barrier and the turn of its operation ids, README "Operation identity"). This
times that read on a real ``AsyncEffectSqliteSaver`` file for histories of 10, 100 and
500 messages of ~200 characters each.
"""

from __future__ import annotations

import os
import tempfile
import time
from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import END, START, MessagesState, StateGraph

from langgraph_effects import AsyncEffectSqliteSaver
from scenarios import opt, section

CONFIGURATIONS = ("10 messages", "100 messages", "500 messages")
QUICK = ["--reads", "3"]


def options(group: Any) -> None:
    group.add_argument("--reads", type=int, default=50)


async def run(args: Any, ctx: Any) -> dict[str, Any]:
    reads = opt(args, "reads", 50)
    lines, rows = [], {}
    with tempfile.TemporaryDirectory(dir=ctx.workdir) as tmp:
        async with AsyncEffectSqliteSaver.from_conn_string(os.path.join(tmp, "turn.sqlite")) as saver:
            await saver.setup()
            builder = StateGraph(MessagesState)
            builder.add_node("model", lambda s: {"messages": [AIMessage("x" * 200)]})
            builder.add_edge(START, "model")
            builder.add_edge("model", END)
            graph = builder.compile(checkpointer=saver)
            for n in (10, 100, 500):
                config: Any = {"configurable": {"thread_id": f"t{n}"}}
                history = [HumanMessage("y" * 200) for _ in range(n)]
                await graph.ainvoke({"messages": history}, config, durability="sync")
                latest = await saver.aget_tuple(config)
                assert latest is not None
                target: Any = {"configurable": {**latest.config["configurable"], "thread_id": f"t{n}"}}
                started = time.perf_counter()
                for _ in range(reads):
                    await saver.aget_tuple(target)
                per_read = (time.perf_counter() - started) / reads * 1000
                rows[f"{n} messages"] = per_read
                lines.append(f"{n:4d} messages: {per_read:.2f} ms per read")
    return section("turn_read", lines, ms_per_read=rows)
