"""End to end: an agent loop with ``EffectToolNode`` against the same loop with ``ToolNode``.

The loop is the smallest real one: a scripted chat model asks for ``fanout`` parallel
calls of one tool in one AIMessage, the tool node runs them, the model answers, the
run ends. Each run is a fresh thread with ``durability="sync"``. The baseline is
LangGraph's own saver (``AsyncSqliteSaver`` / ``AsyncPostgresSaver``) with a plain
``ToolNode``; the candidate is ``EffectSqliteSaver`` / ``EffectPostgresSaver`` (the
same saver plus the ledger on its own connection) with ``EffectToolNode`` and the
tool declared ``Effect(dedup_window=3600)``. On SQLite both use the very same file.

Timing: batches of ``runs`` agent runs, baseline and candidate interleaved with the
order swapped every repeat (AB BA AB ...), so drift on a noisy machine hits both.
The overhead is the median over repeats of the paired ratio candidate / baseline.

Commits are counted, not inferred: a SQLite trace callback on the ledger's own
connection (and, for reference, on each saver's connection), and libpq's protocol
trace on every Postgres connection (see ``bench_common.LibpqTraceCounter``).
"""

from __future__ import annotations

import asyncio
import cProfile
import gc
import itertools
import pstats
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypedDict

from bench_common import (
    LibpqTraceCounter,
    SqlCounter,
    bootstrap_ci,
    median,
    spread,
    trace_pg_connection,
)
from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode, tools_condition

from langgraph_effects import Effect, EffectSqliteSaver
from langgraph_effects.ledger.base import Ledger
from langgraph_effects.ledger.sqlite import run_in_connection_thread
from langgraph_effects.node import EffectToolNode
from langgraph_effects.testing import ScriptedChatModel, call_each_then_finish

EFFECTS = {"send": Effect(dedup_window=3600)}


class AgentState(TypedDict):
    messages: Annotated[list[BaseMessage], add_messages]


@dataclass(frozen=True)
class Scenario:
    backend: str  # "sqlite" | "postgres"
    latency_ms: float  # what one tool call takes (asyncio.sleep)
    fanout: int  # parallel calls in the one AIMessage
    path: str = "node"  # "node": EffectToolNode vs ToolNode; "middleware": create_agent +/- EffectMiddleware

    @property
    def key(self) -> str:
        return f"{self.path}/{self.backend}/tool={self.latency_ms:g}ms/fanout={self.fanout}"


#: What each path is compared against, for tables.
BASELINE = {"node": "ToolNode", "middleware": "create_agent"}
CANDIDATE = {"node": "EffectToolNode", "middleware": "EffectMiddleware"}


def make_tool(latency_ms: float) -> BaseTool:
    delay = latency_ms / 1000.0

    @tool
    async def send(n: int) -> str:
        """Send notification number ``n``."""
        if delay:
            await asyncio.sleep(delay)
        return f"sent {n}"

    return send


def build_graph(*, effect: bool, fanout: int, latency_ms: float, saver: Any, path: str = "node") -> Any:
    model = ScriptedChatModel(
        script=call_each_then_finish([("send", {"n": i}) for i in range(fanout)])
    )
    if path == "middleware":
        from langchain.agents import create_agent

        from langgraph_effects import EffectMiddleware

        middleware = [EffectMiddleware(EFFECTS)] if effect else []
        return create_agent(
            model, tools=[make_tool(latency_ms)], middleware=middleware, checkpointer=saver
        )

    async def agent(state: AgentState) -> dict[str, Any]:
        return {"messages": [await model.ainvoke(state["messages"])]}

    tools = [make_tool(latency_ms)]
    node = EffectToolNode(tools, effects=EFFECTS) if effect else ToolNode(tools)
    builder = StateGraph(AgentState)
    builder.add_node("agent", agent)
    builder.add_node("tools", node)
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", tools_condition)
    builder.add_edge("tools", "agent")
    return builder.compile(checkpointer=saver)


_threads = itertools.count()
_RUN_ID = uuid.uuid4().hex[:6]


async def run_once(graph: Any, label: str) -> None:
    config = {"configurable": {"thread_id": f"bench-{_RUN_ID}-{label}-{next(_threads)}"}}
    result = await graph.ainvoke({"messages": [HumanMessage("go")]}, config, durability="sync")
    if result["messages"][-1].content != "done":  # pragma: no cover - a broken loop
        raise RuntimeError(f"the agent loop did not finish: {result['messages'][-1]!r}")


async def run_batch(graph: Any, label: str, runs: int) -> tuple[float, float]:
    """Wall and process CPU milliseconds per agent run, over ``runs`` sequential runs.

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
    plain: Any, effect: Any, *, fanout: int, runs: int, repeats: int, warmup: int = 1
) -> dict[str, Any]:
    """Interleaved batches (AB BA ...); the overhead is the median paired ratio."""
    for _ in range(warmup):
        await run_batch(plain, "warm-plain", runs)
        await run_batch(effect, "warm-effect", runs)
    base: list[float] = []
    cand: list[float] = []
    ratios: list[float] = []
    cpu_base: list[float] = []
    cpu_cand: list[float] = []
    cpu_ratios: list[float] = []
    for rep in range(repeats):
        if rep % 2 == 0:
            b, bc = await run_batch(plain, "plain", runs)
            c, cc = await run_batch(effect, "effect", runs)
        else:
            c, cc = await run_batch(effect, "effect", runs)
            b, bc = await run_batch(plain, "plain", runs)
        base.append(b)
        cand.append(c)
        ratios.append(c / b)
        cpu_base.append(bc)
        cpu_cand.append(cc)
        if bc > 0:
            cpu_ratios.append(cc / bc)
    b_med, c_med = median(base), median(cand)
    lo, hi = spread(ratios)
    ci_lo, ci_hi = bootstrap_ci(base, cand)
    cpu_lo, cpu_hi = bootstrap_ci(cpu_base, cpu_cand)
    return {
        "runs_per_batch": runs,
        "repeats": repeats,
        "toolnode_ms": b_med,
        "effect_ms": c_med,
        "overhead": median(ratios),
        "overhead_iqr": [lo, hi],
        "ratio_of_medians": c_med / b_med,
        "ratio_ci95": [ci_lo, ci_hi],
        "cpu_ratio_of_medians": median(cpu_cand) / median(cpu_base) if cpu_base else float("nan"),
        "cpu_ratio_ci95": [cpu_lo, cpu_hi],
        "added_ms_per_run": c_med - b_med,
        "added_ms_per_call": (c_med - b_med) / fanout,
        "cpu_toolnode_ms": median(cpu_base),
        "cpu_effect_ms": median(cpu_cand),
        "cpu_overhead": median(cpu_ratios),
        "samples": {
            "toolnode_ms": base,
            "effect_ms": cand,
            "cpu_toolnode_ms": cpu_base,
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
async def postgres_savers(dsn: str) -> AsyncIterator[tuple[Any, Any]]:
    """``AsyncPostgresSaver`` and ``EffectPostgresSaver`` on the same database."""
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    from langgraph_effects.checkpoint.postgres import EffectPostgresSaver

    async with (
        AsyncPostgresSaver.from_conn_string(dsn) as plain,
        EffectPostgresSaver.from_conn_string(dsn) as effect,
    ):
        await effect.setup()
        await plain.setup()
        yield plain, effect


async def time_scenarios(
    scenarios: list[Scenario],
    savers: tuple[Any, Any],
    *,
    runs: Callable[[Scenario], int],
    repeats: int,
    log: Callable[[str], None],
) -> dict[str, dict[str, Any]]:
    plain_saver, effect_saver = savers
    out: dict[str, dict[str, Any]] = {}
    for sc in scenarios:
        kw = {"fanout": sc.fanout, "latency_ms": sc.latency_ms, "path": sc.path}
        plain = build_graph(effect=False, saver=plain_saver, **kw)  # type: ignore[arg-type]
        effect = build_graph(effect=True, saver=effect_saver, **kw)  # type: ignore[arg-type]
        started = time.perf_counter()
        row = await compare(plain, effect, fanout=sc.fanout, runs=runs(sc), repeats=repeats)
        row.update(backend=sc.backend, tool_ms=sc.latency_ms, fanout=sc.fanout, path=sc.path)
        out[sc.key] = row
        log(
            f"  {sc.key}: {BASELINE[sc.path]} {row['toolnode_ms']:.2f} ms, {CANDIDATE[sc.path]} "
            f"{row['effect_ms']:.2f} ms, ratio of medians {row['ratio_of_medians']:.3f}x "
            f"({time.perf_counter() - started:.0f}s)"
        )
    return out


# -- counting commits ------------------------------------------------------------------------


async def graph_steps(graph: Any) -> int:
    """Supersteps one agent run takes (LangGraph's debug stream: one checkpoint event each)."""
    config = {"configurable": {"thread_id": f"bench-{_RUN_ID}-steps-{next(_threads)}"}}
    steps = 0
    async for event in graph.astream(
        {"messages": [HumanMessage("go")]}, config, stream_mode="debug", durability="sync"
    ):
        steps += event.get("type") == "checkpoint"
    return steps


async def _traced(conn: Any, counter: SqlCounter | None) -> None:
    await run_in_connection_thread(conn, lambda db: db.set_trace_callback(counter))


async def count_sqlite(
    savers: tuple[Any, Any], fanout: int, runs: int, path: str = "node"
) -> dict[str, Any]:
    """Durable commits and round trips per effectful call on the ledger's connection,
    counted; checkpoint commits and graph steps per run, ours against the baseline."""
    from langgraph_effects.ledger import sqlite as sqlite_ledger

    plain_saver, effect_saver = savers
    plain = build_graph(effect=False, fanout=fanout, latency_ms=0, saver=plain_saver, path=path)
    effect = build_graph(effect=True, fanout=fanout, latency_ms=0, saver=effect_saver, path=path)
    await run_once(effect, "count-warm")
    await run_once(plain, "count-warm")
    steps_effect = await graph_steps(effect)
    steps_plain = await graph_steps(plain)

    ledger, ckpt, ckpt_plain = SqlCounter(), SqlCounter(), SqlCounter()
    trips = 0
    real = sqlite_ledger.run_in_connection_thread
    ledger_conn = effect_saver.ledger.conn

    async def counted(conn: Any, fn: Any) -> Any:
        nonlocal trips
        trips += conn is ledger_conn
        return await real(conn, fn)

    await _traced(effect_saver.ledger.conn, ledger)
    await _traced(effect_saver.conn, ckpt)
    sqlite_ledger.run_in_connection_thread = counted  # type: ignore[assignment]
    try:
        for _ in range(runs):
            await run_once(effect, "count")
    finally:
        sqlite_ledger.run_in_connection_thread = real  # type: ignore[assignment]
        await _traced(effect_saver.ledger.conn, None)
        await _traced(effect_saver.conn, None)
    await _traced(plain_saver.conn, ckpt_plain)
    try:
        for _ in range(runs):
            await run_once(plain, "count")
    finally:
        await _traced(plain_saver.conn, None)
    calls = runs * fanout
    return {
        "backend": "sqlite",
        "path": path,
        "fanout": fanout,
        "runs": runs,
        "calls": calls,
        "ledger_round_trips_per_call": trips / calls,
        "graph_steps_per_run_effect": steps_effect,
        "graph_steps_per_run_baseline": steps_plain,
        "method": "sqlite3 set_trace_callback on the ledger's connection: COMMITs of "
        "transactions that wrote, plus writes outside BEGIN",
        "ledger_commits": ledger.durable,
        "ledger_commits_per_call": ledger.durable / calls,
        "ledger_commit_statements_per_call": ledger.commits / calls,
        "ledger_empty_transactions_per_run": ledger.empty_commits / runs,
        "ledger_statements_per_call": ledger.statements / calls,
        "checkpoint_commits_per_run_effect": ckpt.durable / runs,
        "checkpoint_commits_per_run_toolnode": ckpt_plain.durable / runs,
    }


async def count_postgres(dsn: str, fanout: int, runs: int) -> dict[str, Any]:
    """The same on Postgres, from libpq's protocol trace of every connection used."""
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from psycopg import AsyncConnection
    from psycopg.rows import dict_row
    from psycopg_pool import AsyncConnectionPool

    from langgraph_effects.checkpoint.postgres import EffectPostgresSaver
    from langgraph_effects.ledger.postgres import PostgresLedger

    ledger_trace, ckpt_trace, plain_trace = LibpqTraceCounter(), LibpqTraceCounter(), LibpqTraceCounter()

    async def configure(conn: Any) -> None:
        trace_pg_connection(conn, ledger_trace)

    # The pool settings PostgresLedger makes for itself, plus the trace hook on every
    # connection it opens.
    pool: AsyncConnectionPool[Any] = AsyncConnectionPool(
        dsn,
        min_size=1,
        max_size=10,
        open=False,
        kwargs={"autocommit": True},
        check=AsyncConnectionPool.check_connection,
        configure=configure,
    )
    try:
        await pool.open(wait=True)
        ledger = PostgresLedger(pool)

        async def saver_conn(counter: LibpqTraceCounter) -> Any:
            # The connection settings AsyncPostgresSaver.from_conn_string uses.
            conn = await AsyncConnection.connect(
                dsn, autocommit=True, prepare_threshold=0, row_factory=dict_row
            )
            trace_pg_connection(conn, counter)
            return conn

        conn = await saver_conn(ckpt_trace)
        saver = EffectPostgresSaver(conn, ledger)
        effect = build_graph(effect=True, fanout=fanout, latency_ms=0, saver=saver)
        for _ in range(runs):
            await run_once(effect, "count")
        await conn.close()
        await pool.close()

        conn = await saver_conn(plain_trace)
        plain = build_graph(effect=False, fanout=fanout, latency_ms=0, saver=AsyncPostgresSaver(conn))
        for _ in range(runs):
            await run_once(plain, "count")
        await conn.close()

        calls = runs * fanout
        counted = ledger_trace.count()
        return {
            "backend": "postgres",
            "fanout": fanout,
            "runs": runs,
            "calls": calls,
            "method": "libpq PQtrace on every ledger pool connection: COMMITs of transactions "
            "that wrote, plus autocommit writes",
            "ledger_commits": counted["durable"],
            "ledger_commits_per_call": counted["durable"] / calls,
            "ledger_commit_statements_per_call": (counted["write_commits"] + counted["read_only_commits"])
            / calls,
            "ledger_empty_transactions_per_run": counted["read_only_commits"] / runs,
            "checkpoint_commits_per_run_effect": ckpt_trace.count()["durable"] / runs,
            "checkpoint_commits_per_run_toolnode": plain_trace.count()["durable"] / runs,
        }
    finally:
        await pool.close()
        for t in (ledger_trace, ckpt_trace, plain_trace):
            t.cleanup()


# -- profile ---------------------------------------------------------------------------------


async def what_if_setup_once(
    plain: Any, effect: Any, effect_saver: Any, *, runs: int, repeats: int
) -> dict[str, Any]:
    """Three variants interleaved in one window (order rotating through all 6
    permutations): ToolNode, EffectToolNode as shipped, and EffectToolNode whose saver
    checks the ledger's schema once instead of at the start of every checkpointer call
    (``AsyncSqliteSaver`` calls ``self.setup()`` in each method; the patch is an instance
    attribute on this saver, removed after each batch)."""
    patched = AsyncSqliteSaver.setup.__get__(effect_saver)
    orders = list(itertools.permutations(("plain", "effect", "once")))
    times: dict[str, list[float]] = {"plain": [], "effect": [], "once": []}
    cpu: dict[str, list[float]] = {"plain": [], "effect": [], "once": []}
    await run_batch(plain, "whatif-warm", runs)
    await run_batch(effect, "whatif-warm", runs)
    for rep in range(repeats):
        for name in orders[rep % len(orders)]:
            if name == "once":
                effect_saver.setup = patched
            try:
                wall, used = await run_batch(plain if name == "plain" else effect, f"whatif-{name}", runs)
            finally:
                if name == "once":
                    del effect_saver.setup
            times[name].append(wall)
            cpu[name].append(used)
    def ratios(top: list[float], bottom: list[float]) -> list[float]:
        return [t / b for t, b in zip(top, bottom, strict=True) if b > 0]

    return {
        "repeats": repeats,
        "runs_per_batch": runs,
        "toolnode_ms": median(times["plain"]),
        "effect_ms": median(times["effect"]),
        "effect_setup_once_ms": median(times["once"]),
        "overhead": median(ratios(times["effect"], times["plain"])),
        "overhead_setup_once": median(ratios(times["once"], times["plain"])),
        "cpu_overhead": median(ratios(cpu["effect"], cpu["plain"])),
        "cpu_overhead_setup_once": median(ratios(cpu["once"], cpu["plain"])),
    }

_LEDGER_METHODS = (
    "setup",
    "record_intents",
    "transition",
    "get_many",
    "find_by_payload",
    "list_operations",
    "renew_lease",
)


@dataclass
class _Timed:
    calls: int = 0
    seconds: float = 0.0


@dataclass
class _Busy:
    """Wall time during which at least one ledger call was pending (overlaps counted once)."""

    active: int = 0
    since: float = 0.0
    seconds: float = 0.0

    def enter(self) -> None:
        if self.active == 0:
            self.since = time.perf_counter()
        self.active += 1

    def leave(self) -> None:
        self.active -= 1
        if self.active == 0:
            self.seconds += time.perf_counter() - self.since


def _instrument(ledger: Ledger, busy: _Busy) -> dict[str, _Timed]:
    """Wall time spent awaiting each ledger method (instance attributes, removed after)."""
    timings: dict[str, _Timed] = {}
    for name in _LEDGER_METHODS:
        original = getattr(ledger, name)
        slot = timings.setdefault(name, _Timed())

        def wrap(
            fn: Callable[..., Awaitable[Any]], slot: _Timed = slot
        ) -> Callable[..., Awaitable[Any]]:
            async def timed(*args: Any, **kwargs: Any) -> Any:
                start = time.perf_counter()
                busy.enter()
                try:
                    return await fn(*args, **kwargs)
                finally:
                    busy.leave()
                    slot.calls += 1
                    slot.seconds += time.perf_counter() - start

            return timed

        setattr(ledger, name, wrap(original))
    return timings


def _uninstrument(ledger: Ledger) -> None:
    for name in _LEDGER_METHODS:
        ledger.__dict__.pop(name, None)


def _group(key: tuple[str, int, str]) -> str:
    filename, _line, func = key
    if filename == "~" and ("poll" in func or "select" in func):
        return "event loop idle (waiting for I/O or a thread)"
    for marker, name in (
        ("langgraph_effects", "langgraph_effects"),
        ("langgraph/checkpoint", "langgraph checkpointer"),
        ("langgraph", "langgraph"),
        ("langchain_core", "langchain_core"),
        ("pydantic", "pydantic"),
        ("aiosqlite", "aiosqlite"),
        ("asyncio", "asyncio"),
        ("json", "json"),
        ("uuid", "uuid"),
        ("~", "builtins"),
    ):
        if marker in filename:
            return name
    return "other"


def _per_run(stats: pstats.Stats, runs: int) -> dict[tuple[str, int, str], tuple[float, float, int]]:
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    return {key: (tt / runs, ct / runs, nc) for key, (_cc, nc, tt, ct, _callers) in raw.items()}


def _label(key: tuple[str, int, str]) -> str:
    filename, line, func = key
    if filename == "~":
        return func
    short = filename.split("site-packages/")[-1].split("/work/main/")[-1]
    return f"{short}:{line}({func})"


async def profile_sqlite(
    savers: tuple[Any, Any],
    fanout: int,
    runs: int,
    unprofiled: dict[str, Any] | None,
    *,
    what_if_runs: int,
    what_if_repeats: int,
) -> dict[str, Any]:
    """Where the time an ``EffectToolNode`` run adds goes (zero-latency tool, SQLite).

    Three views: wall time awaiting each ledger method; cProfile of the event-loop
    thread (candidate minus baseline self time, per run, by function and by package);
    cProfile of the ledger's own aiosqlite thread (SQLite statements, commits, codec).
    Then a what-if, measured like the main table: the same run with the ledger's
    schema check done once instead of on every checkpointer call (the saver calls
    ``self.setup()`` at the start of each method; the patch is local to this run).
    """
    plain_saver, effect_saver = savers
    plain = build_graph(effect=False, fanout=fanout, latency_ms=0, saver=plain_saver)
    effect = build_graph(effect=True, fanout=fanout, latency_ms=0, saver=effect_saver)
    for _ in range(3):
        await run_once(plain, "prof-warm")
        await run_once(effect, "prof-warm")

    # 1. Wall time inside ledger calls (no profiler running), runs alternating one by one.
    busy = _Busy()
    timings = _instrument(effect_saver.ledger, busy)
    plain_runs: list[float] = []
    effect_runs: list[float] = []
    try:
        for i in range(runs):
            for name in ("plain", "effect") if i % 2 == 0 else ("effect", "plain"):
                start = time.perf_counter()
                await run_once(plain if name == "plain" else effect, "prof-ledger")
                (plain_runs if name == "plain" else effect_runs).append(time.perf_counter() - start)
    finally:
        _uninstrument(effect_saver.ledger)
    plain_wall, effect_wall = median(plain_runs) * 1e3, median(effect_runs) * 1e3
    added = effect_wall - plain_wall
    ledger_ms = {
        name: {"calls_per_run": t.calls / runs, "ms_per_run": t.seconds * 1e3 / runs}
        for name, t in timings.items()
        if t.calls
    }
    ledger_total = busy.seconds * 1e3 / runs

    # 2. cProfile of the event loop's thread, baseline and candidate.
    profiles: dict[str, pstats.Stats] = {}
    thread_prof = cProfile.Profile()
    for name, graph in (("toolnode", plain), ("effect", effect)):
        prof = cProfile.Profile()
        if name == "effect":
            await run_in_connection_thread(effect_saver.ledger.conn, lambda db: thread_prof.enable())
        prof.enable()
        try:
            for _ in range(runs):
                await run_once(graph, "prof-cpu")
        finally:
            prof.disable()
            if name == "effect":
                await run_in_connection_thread(effect_saver.ledger.conn, lambda db: thread_prof.disable())
        profiles[name] = pstats.Stats(prof)
    base = _per_run(profiles["toolnode"], runs)
    cand = _per_run(profiles["effect"], runs)
    base_total = sum(tt for tt, _, _ in base.values()) * 1e3
    cand_total = sum(tt for tt, _, _ in cand.values()) * 1e3

    diffs: list[tuple[float, tuple[str, int, str]]] = []
    for key in set(base) | set(cand):
        d = (cand.get(key, (0.0, 0.0, 0))[0] - base.get(key, (0.0, 0.0, 0))[0]) * 1e3
        diffs.append((d, key))
    diffs.sort(reverse=True)
    total_added = cand_total - base_total
    groups: dict[str, float] = {}
    for d, key in diffs:
        g = _group(key)
        groups[g] = groups.get(g, 0.0) + d
    top_self = [
        {
            "function": _label(key),
            "added_self_ms_per_run": d,
            "share": d / total_added if total_added else 0,
            "calls_per_run": [base.get(key, (0, 0, 0))[2] / runs, cand.get(key, (0, 0, 0))[2] / runs],
        }
        for d, key in diffs[:15]
    ]
    added_calls = sorted(
        (
            (cand.get(key, (0, 0, 0))[2] - base.get(key, (0, 0, 0))[2]) / runs,
            key,
        )
        for key in set(base) | set(cand)
    )[::-1][:15]
    ours = sorted(
        (
            (ct * 1e3, key)
            for key, (_tt, ct, _nc) in cand.items()
            if "langgraph_effects" in key[0] and "bench" not in key[0]
        ),
        reverse=True,
    )[:15]
    # 4. What if EffectSqliteSaver.setup() checked the ledger's schema only once?
    what_if: dict[str, Any] | None = None
    if ledger_ms.get("setup", {}).get("calls_per_run", 0) > 1:
        what_if = await what_if_setup_once(
            plain, effect, effect_saver, runs=what_if_runs, repeats=what_if_repeats
        )
    thread_stats = _per_run(pstats.Stats(thread_prof), runs)
    idle = ("SimpleQueue", "_queue")  # aiosqlite's worker waiting for the next request
    thread_top = sorted(
        (
            (tt * 1e3, key)
            for key, (tt, _ct, _nc) in thread_stats.items()
            if not any(marker in key[2] for marker in idle)
        ),
        reverse=True,
    )[:10]
    return {
        "backend": "sqlite",
        "fanout": fanout,
        "runs": runs,
        "added_ms_per_run_unprofiled": added,
        "added_ms_per_run_main_table": (unprofiled or {}).get("added_ms_per_run"),
        "wall_ms_per_run": {"toolnode": plain_wall, "effect_instrumented": effect_wall},
        "awaiting_ledger_ms_per_run": ledger_total,
        "awaiting_ledger_share_of_added": ledger_total / added if added > 0 else None,
        "ledger_methods": ledger_ms,
        "event_loop_thread": {
            "self_ms_per_run_toolnode": base_total,
            "self_ms_per_run_effect": cand_total,
            "added_self_ms_per_run": total_added,
            "added_by_package": dict(sorted(groups.items(), key=lambda kv: -kv[1])),
            "top_added_self": top_self,
            "most_added_calls": [
                {"function": _label(key), "added_calls_per_run": n} for n, key in added_calls
            ],
            "langgraph_effects_cumulative": [
                {"function": _label(key), "cumulative_ms_per_run": ms} for ms, key in ours
            ],
        },
        "what_if_ledger_setup_once": what_if,
        "ledger_thread_top_self": [
            {"function": _label(key), "self_ms_per_run": ms} for ms, key in thread_top
        ],
    }
