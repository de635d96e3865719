"""One agent turn through synchronous code (``graph.invoke``): ``EffectToolNode`` on a
synchronous saver against ``ToolNode`` on LangGraph's ``SqliteSaver`` (scenario ``sync``).

Ours runs on ``EffectSqliteSaver`` (the synchronous twin of ``AsyncEffectSqliteSaver``),
the baseline on LangGraph's ``SqliteSaver``; both sides are timed interleaved like
``turn`` and reported in the same columns.
"""

from __future__ import annotations

import contextlib
import gc
import itertools
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import stats
from langchain_core.messages import HumanMessage
from langchain_core.tools import tool
from langgraph.prebuilt import ToolNode

from langgraph_effects._integrations.node import EffectToolNode
from langgraph_effects.testing import ScriptedChatModel, call_each_then_finish
from scenarios import section
from scenarios.turn import EFFECTS, AgentState, tool_loop

CONFIGURATIONS = ("node/sqlite/sync/fanout=1", "node/sqlite/sync/fanout=8")


@contextlib.contextmanager
def effect_saver(path: Path) -> Iterator[Any]:
    """``EffectSqliteSaver`` on ``path``, set up."""
    from langgraph_effects import EffectSqliteSaver

    with EffectSqliteSaver.from_conn_string(str(path)) as saver:
        saver.setup()
        yield saver


@contextlib.contextmanager
def plain_saver(path: Path) -> Iterator[Any]:
    from langgraph.checkpoint.sqlite import SqliteSaver

    with SqliteSaver.from_conn_string(str(path)) as saver:
        saver.setup()
        yield saver


def build(*, effect: bool, fanout: int, saver: Any) -> Any:
    model = ScriptedChatModel(script=call_each_then_finish([("send", {"n": i}) for i in range(fanout)]))

    @tool
    def send(n: int) -> str:
        """Send notification number ``n``."""
        return f"sent {n}"

    def agent(state: AgentState) -> dict[str, Any]:
        return {"messages": [model.invoke(state["messages"])]}

    node = EffectToolNode([send], effects=EFFECTS) if effect else ToolNode([send])
    return tool_loop(agent, node, saver)


_threads = itertools.count()


def run_batch(graph: Any, runs: int) -> tuple[float, float]:
    gc.collect()
    cpu, start = time.process_time(), time.perf_counter()
    for _ in range(runs):
        config = {"configurable": {"thread_id": f"sync-{next(_threads)}"}}
        result = graph.invoke({"messages": [HumanMessage("go")]}, config, durability="sync")
        if result["messages"][-1].content != "done":  # pragma: no cover - a broken loop
            raise RuntimeError(f"the agent loop did not finish: {result['messages'][-1]!r}")
    return (time.perf_counter() - start) * 1e3 / runs, (time.process_time() - cpu) * 1e3 / runs


def _interleaved(graphs: dict[str, Any], runs: int, repeats: int) -> dict[str, list[float]]:
    """Batches of each graph, the order reversed every repeat (AB BA ...)."""
    walls: dict[str, list[float]] = {name: [] for name in graphs}
    for graph in graphs.values():
        run_batch(graph, runs)  # warm-up
    for rep in range(repeats):
        order = list(graphs.items())
        for name, graph in order if rep % 2 == 0 else order[::-1]:
            walls[name].append(run_batch(graph, runs)[0])
    return walls


async def run(args: Any, ctx: Any) -> dict[str, Any]:
    lines: list[str] = []
    rows: dict[str, Any] = {}
    for fanout in ctx.only.fanouts:
        name = f"node/sqlite/sync/fanout={fanout}"
        with plain_saver(ctx.workdir / "sync-plain.sqlite") as plain, \
                effect_saver(ctx.workdir / "sync-ours.sqlite") as ours:
            graphs = {"baseline": build(effect=False, fanout=fanout, saver=plain),
                      "effect": build(effect=True, fanout=fanout, saver=ours)}
            walls = _interleaved(graphs, args.runs, args.repeats)
        benches = {side: stats.benchmark(f"{name}/{side}_ms", values) for side, values in walls.items()}
        ctx.benchmarks.extend(benches.values())
        base = stats.median_ms(benches["baseline"])
        row: dict[str, Any] = {"baseline_ms": base, "effect_ms": None}
        line = f"{name}: ToolNode on SqliteSaver {base:.2f} ms per turn"
        ours_ms = stats.median_ms(benches["effect"])
        row.update(effect_ms=ours_ms, **stats.compare(benches["effect"], benches["baseline"]),
                   added_ms_per_call=(ours_ms - base) / fanout)
        lo, hi = row["ratio_ci95"]
        line += (f", EffectToolNode {ours_ms:.2f} ms: x{row['ratio']:.3f} ({lo:.3f}-{hi:.3f}), "
                 f"{row['added_ms_per_call']:+.2f} ms per call")
        rows[name] = row
        lines.append(line)
    for suffix in ("", "-wal", "-shm"):
        for stem in ("sync-plain", "sync-ours"):
            Path(f"{ctx.workdir / stem}.sqlite{suffix}").unlink(missing_ok=True)
    return section("sync", lines, rows=rows)
