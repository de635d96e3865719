"""What any middleware costs a ``create_agent`` turn, hook by hook, and what ours adds on top
(scenario ``floor_split``).

    python benchmarks/run.py floor_split [--fanout 1] [--batches 40]

Five agents on one ``AsyncEffectSqliteSaver`` file, a 0 ms tool, run in shuffled batches of
4 turns (each turn on a fresh thread, a full garbage collection before each batch, as
in ``scenarios.turn.run_batch``):

* ``create_agent``: no middleware;
* ``tool hook``: a middleware whose only hook is ``wrap_tool_call``, passing through;
* ``model hook``: one whose only hook is ``wrap_model_call``, passing through;
* ``both hooks``: the floor of ``benchmarks/run.py``, the hooks ``EffectMiddleware``
  has, each passing through;
* ``EffectMiddleware``: ours, recording in the saver's ledger.

Prints each row's median wall and process CPU time per turn and its ratio to
``create_agent``, with a paired bootstrap 95% interval; then ``EffectMiddleware``
against ``both hooks``, which is what the protocol adds over the price LangChain puts
on any middleware with those hooks. Beside each row, the Python function calls per
turn on the event loop's thread (cProfile over one untimed batch): a count that does
not move with the machine's load.
"""

from __future__ import annotations

import random
import tempfile
from pathlib import Path
from typing import Any

import stats

from langgraph_effects import AsyncEffectSqliteSaver
from langgraph_effects.testing import ScriptedChatModel, call_each_then_finish
from scenarios import batched_options, check_batched, opt, section
from scenarios import turn as bench_e2e

TURNS_PER_BATCH = 4
BASE, FLOOR, OURS = "create_agent", "both hooks", "EffectMiddleware"


def agents(fanout: int, saver: Any) -> dict[str, Any]:
    """Each row's agent, all on ``saver``."""
    from langchain.agents import create_agent

    from langgraph_effects import EffectMiddleware

    def agent(middleware: list[Any]) -> Any:
        model = ScriptedChatModel(script=call_each_then_finish([("send", {"n": i}) for i in range(fanout)]))
        return create_agent(model, tools=[bench_e2e.make_tool(0)], middleware=middleware, checkpointer=saver)

    return {
        BASE: agent([]),
        "tool hook": agent([bench_e2e.noop_middleware(("tool",))]),
        "model hook": agent([bench_e2e.noop_middleware(("model",))]),
        FLOOR: agent([bench_e2e.noop_middleware()]),
        OURS: agent([EffectMiddleware(bench_e2e.EFFECTS)]),
    }


def _ratio(rows: dict[str, tuple[list[float], list[float]]], top: str, bottom: str) -> dict[str, Any]:
    return stats.versus(f"{top} vs {bottom}", *rows[top], *rows[bottom])


CONFIGURATIONS = (BASE, "tool hook", "model hook", FLOOR, OURS)
QUICK = ["--fanout", "2", "--batches", "2"]
check = check_batched


def options(group: Any) -> None:
    batched_options(group, fanout=1, batches=40)


async def run(args: Any, ctx: Any) -> dict[str, Any]:
    fanout, batches = opt(args, "fanout", 1), opt(args, "batches", 40)
    with tempfile.TemporaryDirectory(prefix="floor-split-", dir=ctx.workdir) as tmp:
        async with AsyncEffectSqliteSaver.from_conn_string(Path(tmp) / "agents.db") as saver:
            await saver.setup()
            graphs = agents(fanout, saver)
            for _ in range(10):  # warm: the saver's statements, spare lease owners
                for graph in graphs.values():
                    await bench_e2e.run_once(graph, "warm")
            calls = {
                name: await bench_e2e.calls_per_turn(graph, TURNS_PER_BATCH) for name, graph in graphs.items()
            }
            rows: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in graphs}
            for done in range(batches):
                for name in random.sample(list(graphs), len(graphs)):
                    wall, cpu = await bench_e2e.run_batch(graphs[name], "split", TURNS_PER_BATCH)
                    rows[name][0].append(wall)
                    rows[name][1].append(cpu)
                if (done + 1) % 10 == 0 or done + 1 == batches:
                    ctx.log(f"  {done + 1}/{batches} batches")
    lines = [
        f"create_agent on SQLite, fan-out {fanout}, 0 ms tool: per turn, median of {batches} "
        f"batches of {TURNS_PER_BATCH} turns",
        f"{'':18s} {'wall ms':>8s} {'CPU ms':>7s} {'calls':>7s}   vs create_agent: wall (95% CI), CPU",
    ]
    figures: dict[str, Any] = {}
    for name, (walls, cpus) in rows.items():
        figures[name] = {"wall_ms": stats.median_of(walls), "cpu_ms": stats.median_of(cpus),
                         "calls_per_turn": calls[name]}
        line = f"{name:18s} {figures[name]['wall_ms']:8.2f} {figures[name]['cpu_ms']:7.2f} {calls[name]:7.0f}"
        if name != BASE:
            figures[name]["vs_base"] = _ratio(rows, name, BASE)
            line += f"   {stats.versus_text(figures[name]['vs_base'])}"
        lines.append(line)
    ours = _ratio(rows, OURS, FLOOR)
    added = calls[OURS] - calls[FLOOR]
    lines.append(f"{OURS} vs {FLOOR}: {stats.versus_text(ours)}, calls {added:+.0f} per turn")
    return section("floor_split", lines, rows=figures, ours_vs_floor=ours)
