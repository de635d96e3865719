"""One agent turn with our tool calls against the same turn without them (scenario ``turn``).

Configurations compared, each against its own baseline:

* ``node``: a ``StateGraph`` agent loop (model node, tool node, ``tools_condition``)
  with ``EffectToolNode``, against the same loop with LangGraph's ``ToolNode``;
* ``middleware``: ``langchain.agents.create_agent`` with ``EffectMiddleware``, against
  plain ``create_agent`` (no middleware);
* ``floor``: ``create_agent`` with a no-op middleware that has ``EffectMiddleware``'s
  hooks, against plain ``create_agent``, both on our saver: what LangChain charges any
  such middleware (the middleware's issue-32 target is stated over this row);
* on SQLite (same file) and Postgres (a database each), a 0 ms and a 5 ms tool, fan-out
  1 and 8;
* ``bare pair``: the floor of what the protocol needs per call, measured in the same
  run on the same server or disk: two commits each in its own transaction (an insert,
  then a compare-and-set update) through psycopg on Postgres, through ``sqlite3`` in
  WAL with ``synchronous=FULL`` (each commit ``fdatasync``s the WAL) on SQLite.

A scripted chat model (the same for baseline and candidate) asks for ``fanout``
parallel calls of one tool in one AIMessage, the tools run, the model answers, the run
ends: one turn, on a fresh thread, ``durability="sync"``. Ours declares the tool
``Effect(dedup_window=3600)``.

Timing: batches of ``runs`` turns, baseline and candidate interleaved with the order
swapped every repeat (AB BA AB ...), so drift on a noisy machine hits both. Each side is
a pyperf benchmark; the figure is the ratio of the medians with a paired bootstrap 95%
interval (``stats.py``), the CPU ratio beside it, and the milliseconds added per call
(also as a multiple of the bare pair, which the issue-32 targets are stated in).
"""

from __future__ import annotations

import asyncio
import cProfile
import gc
import itertools
import pstats
import sqlite3
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, TypedDict

import pyperf
import stats
from bench_common import fresh_pg_database
from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.tools import BaseTool, tool
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver
from langgraph.graph import START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode, tools_condition

from langgraph_effects import AsyncEffectSqliteSaver, Effect
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
    return tool_loop(agent, node, saver)


def tool_loop(agent: Any, node: Any, saver: Any) -> Any:
    """The StateGraph agent loop: ``agent``, then ``node`` while the model calls tools."""
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


async def calls_per_turn(graph: Any, runs: int) -> float:
    """Python function calls per turn on this thread (the event loop's), over ``runs``
    untimed turns: a count the machine's load does not move."""
    profile = cProfile.Profile()
    profile.enable()
    try:
        for _ in range(runs):
            await run_once(graph, "calls")
    finally:
        profile.disable()
    return pstats.Stats(profile).total_calls / runs  # type: ignore[attr-defined,no-any-return]


async def compare(
    plain: Any,
    effect: Any,
    *,
    name: str,
    fanout: int,
    runs: int,
    repeats: int,
    warmup: int = 1,
    progress: Callable[[int], None] | None = None,
    between: Callable[[], Awaitable[None]] | None = None,
) -> tuple[dict[str, Any], list[pyperf.Benchmark]]:
    """Interleaved batches (AB BA ...): ratio of medians with its interval, CPU beside,
    and the four pyperf benchmarks (wall and CPU of each side)."""
    for _ in range(warmup):
        await run_batch(plain, "warm-plain", runs)
        await run_batch(effect, "warm-effect", runs)
    samples: dict[str, list[float]] = {"baseline_ms": [], "effect_ms": [], "cpu_baseline_ms": [],
                                       "cpu_effect_ms": []}
    for rep in range(repeats):
        order = (("baseline", plain), ("effect", effect))
        for side, graph in order if rep % 2 == 0 else order[::-1]:
            wall, cpu = await run_batch(graph, side, runs)
            samples[f"{side}_ms"].append(wall)
            samples[f"cpu_{side}_ms"].append(cpu)
        if between is not None:  # the bare pair's batch, between the rows' batches
            await between()
        if progress is not None:
            progress(rep + 1)
    bench = {key: stats.benchmark(f"{name}/{key}", values, runs_per_batch=runs)
             for key, values in samples.items()}
    b_med, c_med = stats.median_ms(bench["baseline_ms"]), stats.median_ms(bench["effect_ms"])
    cb_med, cc_med = stats.median_ms(bench["cpu_baseline_ms"]), stats.median_ms(bench["cpu_effect_ms"])
    wall = stats.compare(bench["effect_ms"], bench["baseline_ms"])
    cpu = stats.compare(bench["cpu_effect_ms"], bench["cpu_baseline_ms"])
    row = {
        "runs_per_batch": runs,
        "repeats": repeats,
        "baseline_ms": b_med,
        "effect_ms": c_med,
        "baseline_iqr_ms": list(stats.quartiles_ms(bench["baseline_ms"])),
        "effect_iqr_ms": list(stats.quartiles_ms(bench["effect_ms"])),
        **wall,
        "added_ms_per_run": c_med - b_med,
        "added_ms_per_call": (c_med - b_med) / fanout,
        "cpu_baseline_ms": cb_med,
        "cpu_effect_ms": cc_med,
        "cpu_ratio": cpu["ratio"],
        "cpu_ratio_ci95": cpu["ratio_ci95"],
        "cpu_added_ms_per_call": (cc_med - cb_med) / fanout,
        "samples": samples,
    }
    return row, list(bench.values())


# -- backends ------------------------------------------------------------------------------


@asynccontextmanager
async def sqlite_savers(path: Path) -> AsyncIterator[tuple[Any, Any]]:
    """``AsyncSqliteSaver`` and ``AsyncEffectSqliteSaver`` on the same file."""
    async with (
        AsyncSqliteSaver.from_conn_string(str(path)) as plain,
        AsyncEffectSqliteSaver.from_conn_string(path) as effect,
    ):
        await effect.setup()
        await plain.setup()
        yield plain, effect


@asynccontextmanager
async def postgres_savers(dsn: str, ours_dsn: str | None = None) -> AsyncIterator[tuple[Any, Any]]:
    """``AsyncPostgresSaver`` on ``dsn`` and ``AsyncEffectPostgresSaver`` on ``ours_dsn`` (the
    same server; by default the same database). Give them a database each when timing:
    our fence's triggers act on every insert into the tables they guard, the plain
    saver's too."""
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver

    from langgraph_effects.checkpoint.postgres import AsyncEffectPostgresSaver

    async with (
        AsyncPostgresSaver.from_conn_string(dsn) as plain,
        AsyncEffectPostgresSaver.from_conn_string(ours_dsn or dsn) as effect,
    ):
        await effect.setup()
        await plain.setup()
        yield plain, effect




# -- the bare pair: two commits, nothing else ---------------------------------------------------


def _sqlite_pairs(db: sqlite3.Connection, prefix: str, pairs: int) -> tuple[float, float]:
    cpu, start = time.process_time(), time.perf_counter()
    for i in range(pairs):
        key = f"{prefix}-{i}"
        db.execute("INSERT INTO bare_pair (id, version, body) VALUES (?, 1, ?)", (key, "intent"))
        db.commit()
        db.execute("UPDATE bare_pair SET version = 2, body = ? WHERE id = ? AND version = 1", ("done", key))
        db.commit()
    return (time.perf_counter() - start) * 1e3 / pairs, (time.process_time() - cpu) * 1e3 / pairs


async def _pg_pairs(conn: Any, prefix: str, pairs: int) -> tuple[float, float]:
    cpu, start = time.process_time(), time.perf_counter()
    for i in range(pairs):
        key = f"{prefix}-{i}"
        await conn.execute("INSERT INTO bare_pair (id, version, body) VALUES (%s, 1, %s)", (key, "intent"))
        await conn.execute(
            "UPDATE bare_pair SET version = 2, body = %s WHERE id = %s AND version = 1", ("done", key)
        )
    return (time.perf_counter() - start) * 1e3 / pairs, (time.process_time() - cpu) * 1e3 / pairs


_TABLE = "CREATE TABLE IF NOT EXISTS bare_pair (id TEXT PRIMARY KEY, version INTEGER, body TEXT)"


class BarePair:
    """The bare pair of ``backend`` (insert, then compare-and-set update, each its own
    durable commit), measured in batches of ``pairs`` between the rows' batches, so it
    sees the same machine as they do. ``where``: the SQLite file (WAL,
    ``synchronous=FULL``, as the ledger) or the Postgres DSN."""

    def __init__(self, backend: str, where: Any, *, pairs: int) -> None:
        self.backend, self.where, self.pairs = backend, where, pairs
        self.walls: list[float] = []
        self.cpus: list[float] = []
        self._db: Any = None
        self._run = uuid.uuid4().hex[:8]

    async def __aenter__(self) -> BarePair:
        if self.backend == "sqlite":
            self._db = sqlite3.connect(str(self.where), isolation_level=None)
            self._db.execute("PRAGMA journal_mode = WAL")
            self._db.execute("PRAGMA synchronous = FULL")
            self._db.execute(_TABLE)
            self._db.isolation_level = "DEFERRED"
        else:
            import psycopg

            self._db = await psycopg.AsyncConnection.connect(self.where, autocommit=True)
            await self._db.execute(_TABLE)
        await self.batch(keep=False)  # warm-up
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self.backend == "sqlite":
            self._db.close()
        else:
            await self._db.close()

    async def batch(self, *, keep: bool = True) -> None:
        prefix = f"{self._run}-{len(self.walls)}-{keep}"
        if self.backend == "sqlite":
            wall, cpu = _sqlite_pairs(self._db, prefix, self.pairs)
        else:
            wall, cpu = await _pg_pairs(self._db, prefix, self.pairs)
        if keep:
            self.walls.append(wall)
            self.cpus.append(cpu)

    def summary(self) -> tuple[dict[str, Any], list[Any]]:
        wall_b = stats.benchmark(f"bare_pair/{self.backend}/wall", self.walls, pairs_per_batch=self.pairs)
        cpu_b = stats.benchmark(f"bare_pair/{self.backend}/cpu", self.cpus, pairs_per_batch=self.pairs)
        what = (
            "two commits through psycopg (autocommit insert, then compare-and-set update)"
            if self.backend == "postgres"
            else "two sqlite3 commits in WAL, synchronous=FULL (each fdatasyncs)"
        )
        row = {"backend": self.backend, "what": what, "pairs_per_batch": self.pairs,
               "repeats": len(self.walls), "wall_ms": stats.median_ms(wall_b),
               "cpu_ms": stats.median_ms(cpu_b),
               "wall_iqr_ms": list(stats.quartiles_ms(wall_b))}
        return row, [wall_b, cpu_b]


# -- the scenario -----------------------------------------------------------------------------

CONFIGURATIONS = (
    *(f"{p}/{b}/tool={ms}ms/fanout={f}" for p in PATHS for b in BACKENDS for ms in (0, 5) for f in (1, 8)),
    "bare_pair/sqlite",
    "bare_pair/postgres",
)


async def time_scenarios(
    scenarios: list[Scenario], savers: tuple[Any, Any], *, runs: int, repeats: int, ctx: Any,
    bare: BarePair | None = None,
) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for i, sc in enumerate(scenarios, 1):
        plain, effect = build_pair(sc.path, sc.fanout, sc.latency_ms, savers)
        started = last = time.perf_counter()
        ctx.log(f"  [{i}/{len(scenarios)}] {sc.key}: {repeats} x ({runs} + {runs}) turns")

        def progress(done: int, sc: Scenario = sc, started: float = started) -> None:
            nonlocal last
            now = time.perf_counter()
            if now - last >= 15 and done < repeats:
                last = now
                ctx.log(f"      {sc.key}: {done}/{repeats} repeats ({now - started:.0f}s)")

        row, benches = await compare(
            plain, effect, name=sc.key, fanout=sc.fanout, runs=runs, repeats=repeats, progress=progress,
            between=None if bare is None else bare.batch,
        )
        ctx.benchmarks.extend(benches)
        row.update(path=sc.path, backend=sc.backend, tool_ms=sc.latency_ms, fanout=sc.fanout)
        out[sc.key] = row
        lo, hi = row["ratio_ci95"]
        ctx.log(
            f"      {BASELINE[sc.path]} {row['baseline_ms']:.2f} ms, "
            f"{OURS[sc.path]} {row['effect_ms']:.2f} ms: "
            f"{row['ratio']:.3f}x (CI {lo:.2f}-{hi:.2f}x), CPU {row['cpu_ratio']:.2f}x, "
            f"{row['added_ms_per_call']:+.2f} ms/call ({time.perf_counter() - started:.0f}s)"
        )
    return out


async def _backend(backend: str, savers: tuple[Any, Any], where: Any, args: Any, ctx: Any) -> dict[str, Any]:
    scenarios = ctx.only.scenarios(backend)
    async with BarePair(backend, where, pairs=5 if ctx.quick else 10) as pair:
        rows = await time_scenarios(
            scenarios, savers, runs=args.runs, repeats=args.repeats, ctx=ctx, bare=pair
        )
        if not pair.walls:  # no row ran: the pair alone
            for _ in range(args.repeats):
                await pair.batch()
    bare, benches = pair.summary()
    ctx.benchmarks.extend(benches)
    ctx.log(f"  bare pair on {backend}: {bare['wall_ms']:.3f} ms wall, {bare['cpu_ms']:.3f} ms CPU "
            f"(median of {bare['repeats']} batches of {bare['pairs_per_batch']}, between the rows' batches)")
    return {"e2e": rows, "bare": {backend: bare}}


async def run(args: Any, ctx: Any) -> dict[str, Any]:
    """Every selected row on SQLite, then on Postgres (skipped, with why, without a server)."""
    report: dict[str, Any] = {"e2e": {}, "bare": {}}

    def merge(part: dict[str, Any]) -> None:
        for key, value in part.items():
            report[key].update(value)

    if "sqlite" in ctx.only.backends:
        ctx.log("agent turns on SQLite")
        db = ctx.workdir / "agent.sqlite"
        async with sqlite_savers(db) as savers:
            merge(await _backend("sqlite", savers, ctx.workdir / "bare.sqlite", args, ctx))
        for name in ("agent.sqlite", "bare.sqlite"):
            for suffix in ("", "-wal", "-shm"):
                Path(f"{ctx.workdir / name}{suffix}").unlink(missing_ok=True)
    if "postgres" in ctx.only.backends and ctx.pg_skip is None:
        ctx.log("agent turns on Postgres")
        async with (
            fresh_pg_database(ctx.dsn) as plain_db,
            fresh_pg_database(ctx.dsn) as ours_db,
            postgres_savers(plain_db, ours_db) as savers,
        ):
            merge(await _backend("postgres", savers, ours_db, args, ctx))
    return report
