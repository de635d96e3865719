"""Where a turn's added time goes: the saver, the protocol's Python, or the ledger's commits
(scenario ``turn_split``).

    python benchmarks/run.py turn_split [--backend sqlite|postgres] [--path node|middleware]
                                        [--fanout 1] [--batches 40]

Four agents (five on Postgres), run in shuffled batches of 4 turns (each turn on a
fresh thread; a full garbage collection, not timed, before each batch, as in
``scenarios.turn.run_batch``), a 0 ms tool:

* ``baseline``: ``ToolNode`` or plain ``create_agent`` on LangGraph's own saver
  (``AsyncSqliteSaver`` / ``AsyncPostgresSaver``, on a file or database of its own);
* ``our saver, triggers off`` (Postgres only): the same agent on
  ``AsyncEffectPostgresSaver`` with the fence's triggers disabled around its batches, a
  what-if that splits the saver's cost into the triggers' work in the server (the
  next row against this one) and the rest (this row against the baseline);
* ``baseline, our saver``: the same agent on ``AsyncEffectSqliteSaver`` /
  ``AsyncEffectPostgresSaver``: what the one-runner fence costs (or saves);
* ``ours, ledger in memory``: ``EffectToolNode`` / ``EffectMiddleware`` on our saver,
  recording in an ``InMemoryLedger``: the protocol's Python without a database (no
  round trip, no commit; the memory ledger's own bookkeeping, which stores each row
  through the codec as the SQL ledgers do, is in it);
* ``ours``: the same with the ledger beside the checkpoints, as shipped: what the
  ledger's durable commits (two per call) add.

Prints each row's median wall and process CPU time per turn, and its ratio to the row
above, with a paired bootstrap 95% interval (a batch of each row runs next to the
others). The machine's load moves wall time; CPU time leaves out waiting (for fsync,
for the database server), which wall time includes. Beside them, each row's Python
function calls per turn on the event loop's thread (``cProfile``, one untimed batch
after the timed ones) and the calls it adds to the row above: a count the load does
not move (the ledger's and aiosqlite's own threads are not in it).
"""

from __future__ import annotations

import contextlib
import random
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import stats
from bench_common import fence_triggers_off, fresh_pg_database
from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

from langgraph_effects import AsyncEffectSqliteSaver
from langgraph_effects.ledger.memory import InMemoryLedger
from scenarios import batched_options, check_batched, opt, section
from scenarios import turn as bench_e2e

ROWS = ("baseline", "baseline, our saver", "ours, ledger in memory", "ours")
#: Postgres only: our saver with the fence's triggers disabled around its batches.
TRIGGERS_OFF = "our saver, triggers off"
TURNS_PER_BATCH = 4


@asynccontextmanager
async def savers(backend: str, dsn: str) -> AsyncIterator[tuple[Any, Any, str | None]]:
    """(LangGraph's saver, ours, our database's DSN on Postgres), each on storage of
    its own."""
    if backend == "sqlite":
        with tempfile.TemporaryDirectory(prefix="turn-split-") as tmp:
            async with (
                AsyncSqliteSaver.from_conn_string(str(Path(tmp) / "plain.db")) as plain,
                AsyncEffectSqliteSaver.from_conn_string(Path(tmp) / "ours.db") as ours,
            ):
                await plain.setup()
                await ours.setup()
                yield plain, ours, None
        return
    async with (
        fresh_pg_database(dsn) as plain_db,
        fresh_pg_database(dsn) as ours_db,
        bench_e2e.postgres_savers(plain_db, ours_db) as (plain, ours),
    ):
        yield plain, ours, ours_db


def rows_for(backend: str) -> tuple[str, ...]:
    """The rows, in the order each is compared with the one above."""
    return ROWS if backend == "sqlite" else (ROWS[0], TRIGGERS_OFF, *ROWS[1:])


def agents(path: str, fanout: int, plain: Any, ours: Any, names: tuple[str, ...]) -> dict[str, Any]:
    """The agent of each row in ``names`` (the in-memory row keeps one ledger for the
    whole run: it finds a thread's rows by thread, so it does not slow down as it fills)."""

    def build(effect: bool, saver: Any, ledger: Any = None) -> Any:
        return bench_e2e.build_graph(
            path=path, effect=effect, fanout=fanout, latency_ms=0, saver=saver, ledger=ledger
        )

    made = {
        "baseline": lambda: build(False, plain),
        "baseline, our saver": lambda: build(False, ours),
        TRIGGERS_OFF: lambda: build(False, ours),
        "ours, ledger in memory": lambda: build(True, ours, InMemoryLedger()),
        "ours": lambda: build(True, ours),
    }
    return {name: made[name]() for name in names}


Times = dict[str, tuple[list[float], list[float]]]
#: Python function calls per turn on the event loop's thread, for each row.
Calls = dict[str, float]


async def measure(
    path: str, fanout: int, batches: int, plain: Any, ours: Any, ours_dsn: str | None, log: Any = print
) -> tuple[Times, Calls]:
    """Wall and CPU milliseconds per turn, a value per batch, for each row; and each
    row's Python function calls per turn (counted after the timed batches)."""
    names = rows_for("sqlite" if ours_dsn is None else "postgres")
    rows = agents(path, fanout, plain, ours, names)
    # Warm: pools, prepared statements, spare lease owners; and our saver checks its
    # fence's triggers once, here, before a batch disables them (it refuses to save
    # while they are missing).
    for _ in range(10):
        for name in names:
            await bench_e2e.run_once(rows[name], "warm")
    times: Times = {name: ([], []) for name in names}
    for done in range(batches):
        for name in random.sample(names, len(names)):
            off = fence_triggers_off(ours_dsn) if name == TRIGGERS_OFF and ours_dsn else None
            async with off or contextlib.nullcontext():
                wall, cpu = await bench_e2e.run_batch(rows[name], "split", TURNS_PER_BATCH)
            times[name][0].append(wall)
            times[name][1].append(cpu)
        if (done + 1) % 10 == 0 or done + 1 == batches:
            log(f"  {done + 1}/{batches} batches")
    calls: Calls = {}
    for name in names:
        off = fence_triggers_off(ours_dsn) if name == TRIGGERS_OFF and ours_dsn else None
        async with off or contextlib.nullcontext():
            calls[name] = await bench_e2e.calls_per_turn(rows[name], TURNS_PER_BATCH)
    return times, calls


def report(title: str, times: Times, calls: Calls) -> tuple[list[str], dict[str, Any]]:
    """The table: each row's medians and calls per turn, and its ratio to the row above
    with its interval."""
    lines = [
        title,
        f"{'':24s} {'wall ms':>8s} {'CPU ms':>7s} {'calls':>7s}"
        "   vs the row above: wall (95% CI), CPU, calls",
    ]
    rows: dict[str, Any] = {}
    above: str | None = None
    for name, (wall, cpu) in times.items():
        rows[name] = {"wall_ms": stats.median_of(wall), "cpu_ms": stats.median_of(cpu)}
        line = f"{name:24s} {rows[name]['wall_ms']:8.2f} {rows[name]['cpu_ms']:7.2f} {calls[name]:7.0f}"
        if above is not None:
            rows[name] = stats.versus(name, wall, cpu, *times[above])
            line += f"   {stats.versus_text(rows[name])}, {calls[name] - calls[above]:+.0f}"
        rows[name]["calls_per_turn"] = calls[name]
        lines.append(line)
        above = name
    return lines, rows


CONFIGURATIONS = (*ROWS[:1], TRIGGERS_OFF, *ROWS[1:])
QUICK = ["--path", "middleware", "--fanout", "2", "--batches", "2"]


def options(group: Any) -> None:
    group.add_argument("--backend", choices=["sqlite", "postgres"], default="sqlite")
    group.add_argument("--path", choices=["node", "middleware"], default="node")
    batched_options(group, fanout=1, batches=40)


check = check_batched


async def run(args: Any, ctx: Any) -> dict[str, Any]:
    """Measure on fresh storage, then the table."""
    backend, path = opt(args, "backend", "sqlite"), opt(args, "path", "node")
    fanout, batches = opt(args, "fanout", 1), opt(args, "batches", 40)
    if backend == "postgres" and ctx.pg_skip is not None:
        return section("turn_split", [f"skipped: {ctx.pg_skip}"])
    async with savers(backend, ctx.dsn) as (plain, ours, ours_dsn):
        times, calls = await measure(path, fanout, batches, plain, ours, ours_dsn, ctx.log)
    title = (
        f"{path} on {backend}, fan-out {fanout}, 0 ms tool: per turn, median of {batches} "
        f"batches of {TURNS_PER_BATCH} turns"
    )
    lines, rows = report(title, times, calls)
    return section("turn_split", lines, rows=rows)
