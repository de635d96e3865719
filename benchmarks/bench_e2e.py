"""End to end: one agent turn with our tool calls against the same turn without them.

Two paths, each against its own baseline:

* ``node``: a ``StateGraph`` agent loop (model node, tool node, ``tools_condition``)
  with ``EffectToolNode``, against the same loop with LangGraph's ``ToolNode``;
* ``middleware``: ``langchain.agents.create_agent`` with ``EffectMiddleware``, against
  plain ``create_agent`` (no middleware).

In both, a scripted chat model (``ScriptedChatModel``, the same for baseline and
candidate) asks for ``fanout`` parallel calls of one tool in one AIMessage, the tools
run, the model answers, the run ends: one turn. Each run is a fresh thread with
``durability="sync"``. The baseline uses LangGraph's own saver (``AsyncSqliteSaver`` /
``AsyncPostgresSaver``); the candidate ``EffectSqliteSaver`` / ``EffectPostgresSaver``
(the same saver plus the ledger on its own connection or pool) with the tool declared
``Effect(dedup_window=3600)``. On SQLite both use the very same file, on Postgres the
very same database.

Timing: batches of ``runs`` turns, baseline and candidate interleaved with the order
swapped every repeat (AB BA AB ...), so drift on a noisy machine hits both. The figure
is the ratio of the medians (candidate / baseline) with a paired bootstrap 95%
confidence interval, and beside it the same ratio for process CPU time.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
import time
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypedDict

from bench_common import bootstrap_ratio_ci, median, ratio_of_medians, spread
from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode, tools_condition

from langgraph_effects import Effect, EffectSqliteSaver
from langgraph_effects._integrations.node import EffectToolNode
from langgraph_effects.testing import ScriptedChatModel, call_each_then_finish

EFFECTS = {"send": Effect(dedup_window=3600)}
#: "floor": create_agent with a middleware that does nothing but has EffectMiddleware's
#: hooks, against plain create_agent: what LangChain charges any such middleware (it
#: wraps every hook call in langsmith's tracing shim), for reading the middleware rows.
PATHS = ("node", "middleware", "floor")
BACKENDS = ("sqlite", "postgres")
BASELINE = {"node": "ToolNode", "middleware": "create_agent", "floor": "create_agent"}
OURS = {"node": "EffectToolNode", "middleware": "EffectMiddleware", "floor": "no-op middleware"}
LEDGER_PATHS = ("node", "middleware")  # the paths that use a ledger (counted)


def noop_middleware(hooks: tuple[str, ...] = ("model", "tool")) -> Any:
    """A middleware whose ``hooks`` (``"model"``: ``wrap_model_call``, ``"tool"``:
    ``wrap_tool_call``, each sync and ``async def``) pass straight through; by default
    the hooks EffectMiddleware has (the ``floor`` rows)."""
    from langchain.agents.middleware import AgentMiddleware

    def wrap(self: Any, request: Any, handler: Any) -> Any:
        return handler(request)

    async def awrap(self: Any, request: Any, handler: Any) -> Any:
        return await handler(request)

    methods: dict[str, Any] = {}
    for hook in hooks:
        methods[f"wrap_{hook}_call"], methods[f"awrap_{hook}_call"] = wrap, awrap
    return type("NoOpMiddleware", (AgentMiddleware,), methods)()


class AgentState(TypedDict):
    messages: Annotated[list[BaseMessage], add_messages]


@dataclass(frozen=True)
class Scenario:
    path: str  # "node" | "middleware"
    backend: str  # "sqlite" | "postgres"
    latency_ms: float  # what one tool call takes (asyncio.sleep)
    fanout: int  # parallel calls in the one AIMessage

    @property
    def key(self) -> str:
        return f"{self.path}/{self.backend}/tool={self.latency_ms:g}ms/fanout={self.fanout}"


def make_tool(latency_ms: float) -> BaseTool:
    delay = latency_ms / 1000.0

    @tool
    async def send(n: int) -> str:
        """Send notification number ``n``."""
        if delay:
            await asyncio.sleep(delay)
        return f"sent {n}"

    return send


def build_graph(
    *, path: str, effect: bool, fanout: int, latency_ms: float, saver: Any, ledger: Any = None
) -> Any:
    """The agent of ``path``, ours (``effect``) or the baseline, on ``saver``; ours records
    in ``ledger`` when one is given (else in the saver's own)."""
    model = ScriptedChatModel(
        script=call_each_then_finish([("send", {"n": i}) for i in range(fanout)])
    )
    tools = [make_tool(latency_ms)]
    if path in ("middleware", "floor"):
        from langchain.agents import create_agent

        from langgraph_effects import EffectMiddleware

        chosen = EffectMiddleware(EFFECTS, ledger=ledger) if path == "middleware" else noop_middleware()
        middleware = [chosen] if effect else []
        return create_agent(model, tools=tools, middleware=middleware, checkpointer=saver)
    if path != "node":
        raise ValueError(f"unknown path {path!r}")

    async def agent(state: AgentState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    node = EffectToolNode(tools, effects=EFFECTS, ledger=ledger) if effect else ToolNode(tools)
    builder = StateGraph(AgentState)
    builder.add_node("agent", agent)
    builder.add_node("tools", node)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=saver)


def build_pair(path: str, fanout: int, latency_ms: float, savers: tuple[Any, Any]) -> tuple[Any, Any]:
    """(baseline, ours) for one scenario, each on its own saver (the floor: both on
    ours, so the row shows the middleware hooks alone)."""
    plain_saver, effect_saver = savers
    if path == "floor":
        plain_saver = effect_saver
    plain = build_graph(path=path, effect=False, fanout=fanout, latency_ms=latency_ms, saver=plain_saver)
    ours = build_graph(path=path, effect=True, fanout=fanout, latency_ms=latency_ms, saver=effect_saver)
    return plain, ours


_threads = itertools.count()
_RUN_ID = uuid.uuid4().hex[:6]


async def run_once(graph: Any, label: str) -> dict[str, Any]:
    """One turn on a fresh thread; returns its config."""
    config = {"configurable": {"thread_id": f"bench-{_RUN_ID}-{label}-{next(_threads)}"}}
    result = await graph.ainvoke({"messages": [HumanMessage("go")]}, config, durability="sync")
    if result["messages"][-1].content != "done":  # pragma: no cover - a broken loop
        raise RuntimeError(f"the agent loop did not finish: {result['messages'][-1]!r}")
    return config


async def run_batch(graph: Any, label: str, runs: int) -> tuple[float, float]:
    """Wall and process CPU milliseconds per turn, over ``runs`` sequential turns.

    CPU time (all threads of this process, including the ledger's) barely moves with the
    machine's load; it leaves out waiting for fsync, which wall time includes.
    """
    gc.collect()
    cpu = time.process_time()
    start = time.perf_counter()
    for _ in range(runs):
        await run_once(graph, label)
    wall = (time.perf_counter() - start) * 1e3 / runs
    return wall, (time.process_time() - cpu) * 1e3 / runs


async def compare(
    plain: Any,
    effect: Any,
    *,
    fanout: int,
    runs: int,
    repeats: int,
    warmup: int = 1,
    progress: Callable[[int], None] | None = None,
) -> dict[str, Any]:
    """Interleaved batches (AB BA ...): ratio of medians, its bootstrap CI, CPU beside."""
    for _ in range(warmup):
        await run_batch(plain, "warm-plain", runs)
        await run_batch(effect, "warm-effect", runs)
    base: list[float] = []
    cand: list[float] = []
    cpu_base: list[float] = []
    cpu_cand: list[float] = []
    for rep in range(repeats):
        if rep % 2 == 0:
            b, bc = await run_batch(plain, "plain", runs)
            c, cc = await run_batch(effect, "effect", runs)
        else:
            c, cc = await run_batch(effect, "effect", runs)
            b, bc = await run_batch(plain, "plain", runs)
        base.append(b)
        cand.append(c)
        cpu_base.append(bc)
        cpu_cand.append(cc)
        if progress is not None:
            progress(rep + 1)
    b_med, c_med = median(base), median(cand)
    paired = [c / b for c, b in zip(cand, base, strict=True) if b > 0]
    cpu_ok = all(v > 0 for v in cpu_base)
    return {
        "runs_per_batch": runs,
        "repeats": repeats,
        "baseline_ms": b_med,
        "effect_ms": c_med,
        "ratio": ratio_of_medians(cand, base),
        "ratio_ci95": list(bootstrap_ratio_ci(cand, base)),
        "paired_ratio_median": median(paired),
        "paired_ratio_iqr": list(spread(paired)),
        "added_ms_per_run": c_med - b_med,
        "added_ms_per_call": (c_med - b_med) / fanout,
        "cpu_baseline_ms": median(cpu_base),
        "cpu_effect_ms": median(cpu_cand),
        "cpu_ratio": ratio_of_medians(cpu_cand, cpu_base),
        "cpu_ratio_ci95": list(bootstrap_ratio_ci(cpu_cand, cpu_base)) if cpu_ok else None,
        "samples": {
            "baseline_ms": base,
            "effect_ms": cand,
            "cpu_baseline_ms": cpu_base,
            "cpu_effect_ms": cpu_cand,
        },
    }


# -- backends ------------------------------------------------------------------------------


@asynccontextmanager
async def sqlite_savers(path: Path) -> AsyncIterator[tuple[Any, Any]]:
    """``AsyncSqliteSaver`` and ``EffectSqliteSaver`` on the same file."""
    async with (
        AsyncSqliteSaver.from_conn_string(str(path)) as plain,
        EffectSqliteSaver.from_conn_string(path) as effect,
    ):
        await effect.setup()
        await plain.setup()
        yield plain, effect


@asynccontextmanager
async def postgres_savers(dsn: str, ours_dsn: str | None = None) -> AsyncIterator[tuple[Any, Any]]:
    """``AsyncPostgresSaver`` on ``dsn`` and ``EffectPostgresSaver`` on ``ours_dsn`` (the
    same server; by default the same database). Give them a database each when timing:
    our fence's triggers act on every insert into the tables they guard, the plain
    saver's too."""
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    from langgraph_effects.checkpoint.postgres import EffectPostgresSaver

    async with (
        AsyncPostgresSaver.from_conn_string(dsn) as plain,
        EffectPostgresSaver.from_conn_string(ours_dsn or dsn) as effect,
    ):
        await effect.setup()
        await plain.setup()
        yield plain, effect


async def time_scenarios(
    scenarios: list[Scenario],
    savers: tuple[Any, Any],
    *,
    runs: int,
    repeats: int,
    log: Callable[[str], None],
) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for i, sc in enumerate(scenarios, 1):
        plain, effect = build_pair(sc.path, sc.fanout, sc.latency_ms, savers)
        started = last = time.perf_counter()
        log(f"  [{i}/{len(scenarios)}] {sc.key}: {repeats} x ({runs} + {runs}) turns")

        def progress(done: int, sc: Scenario = sc, started: float = started) -> None:
            nonlocal last
            now = time.perf_counter()
            if now - last >= 15 and done < repeats:
                last = now
                log(f"      {sc.key}: {done}/{repeats} repeats ({now - started:.0f}s)")

        row = await compare(plain, effect, fanout=sc.fanout, runs=runs, repeats=repeats, progress=progress)
        row.update(path=sc.path, backend=sc.backend, tool_ms=sc.latency_ms, fanout=sc.fanout)
        out[sc.key] = row
        lo, hi = row["ratio_ci95"]
        log(
            f"      {BASELINE[sc.path]} {row['baseline_ms']:.2f} ms, "
            f"{OURS[sc.path]} {row['effect_ms']:.2f} ms: "
            f"{row['ratio']:.3f}x (CI {lo:.2f}-{hi:.2f}x), CPU {row['cpu_ratio']:.2f}x "
            f"({time.perf_counter() - started:.0f}s)"
        )
    return out
