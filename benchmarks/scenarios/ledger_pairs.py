"""What one effectful call costs the SQLite ledger: an intent+outcome pair (scenario
``ledger_pairs``).

    python benchmarks/run.py ledger_pairs [--pairs 2000] [--repeats 5] [--json out.json]

For each pair the ledger runs ``record_intents([op], change=dispatch)`` (intent and
dispatch marker in one commit) and ``transition(op, succeed)`` (the outcome), on a
real SQLite file (WAL, ``synchronous=FULL``); the outcome passes the row the intent
returned (``before=``, as the engine does) when the ledger accepts it. It also times a
batch intent of 8 operations (one commit for all of them, as for parallel tool
calls) and then their 8 outcomes started together (group-committed).

Durable commits are counted, not inferred: a ``set_trace_callback`` on the
ledger's own ``sqlite3`` connection sees every statement, and the script counts
``COMMIT`` statements (plus any write run outside ``BEGIN ... COMMIT``, which
would be an implicit commit of its own).

The physical floor is two bare ``BEGIN IMMEDIATE; INSERT; COMMIT`` transactions on
the same file with the same pragmas, through plain ``sqlite3`` on the calling
thread; the ratio says how much the ledger adds on top of the fsyncs it needs.
"""

from __future__ import annotations

import argparse
import asyncio
import inspect
import json
import os
import platform
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiosqlite

from langgraph_effects.core.operation import Change, Event, Operation, Owner
from langgraph_effects.ledger.sqlite import SqliteLedger, run_in_connection_thread
from scenarios import opt, section

BATCH = 8
OWNER = Owner(host=platform.node(), pid=os.getpid(), started=0.0, token="bench")


def make_op(op_id: str) -> Operation:
    """An operation with a realistic row: a few arguments, keys, hashes."""
    return Operation(
        op_id=op_id,
        thread_id="thread-bench",
        tool="send_email",
        tool_call_id=f"call_{op_id}",
        args={"to": "customer@example.com", "subject": "Your invoice", "body": "x" * 200},
        args_hash="h1:" + "ab" * 32,
        provider_key=f"lge:{op_id}",
        contract="dedup",
        tenant="tenant-7",
        policy_version="v1",
        message_id="msg-1",
    )


@dataclass
class CommitCounter:
    """Counts what the ledger's connection really executes (on its worker thread)."""

    commits: int = 0
    autocommit_writes: int = 0
    statements: int = 0
    _open: bool = False

    def __call__(self, sql: str) -> None:
        self.statements += 1
        head = sql.lstrip().split(None, 1)[0].upper() if sql.strip() else ""
        if head == "BEGIN":
            self._open = True
        elif head in ("COMMIT", "END"):
            self.commits += 1
            self._open = False
        elif head == "ROLLBACK":
            self._open = False
        elif head in ("INSERT", "UPDATE", "DELETE", "REPLACE") and not self._open:
            self.autocommit_writes += 1

    @property
    def durable(self) -> int:
        return self.commits + self.autocommit_writes

    def snapshot(self) -> tuple[int, int]:
        return self.durable, self.statements


@dataclass
class Series:
    """Latencies (seconds) of one kind of step, with the commits and statements it took."""

    latencies: list[float] = field(default_factory=list)
    commits: int = 0
    statements: int = 0
    count: int = 0
    throughput: list[float] = field(default_factory=list)
    """Steps per second of each repeat (wall clock over the whole repeat)."""

    def add(self, seconds: float, commits: int, statements: int) -> None:
        self.latencies.append(seconds)
        self.commits += commits
        self.statements += statements
        self.count += 1

    def summary(self) -> dict[str, float]:
        ordered = sorted(self.latencies)
        return {
            "n": self.count,
            "median_ms": statistics.median(ordered) * 1e3,
            "p95_ms": ordered[int(0.95 * (len(ordered) - 1))] * 1e3,
            "per_second": statistics.median(self.throughput) if self.throughput else 0.0,
            "commits_each": self.commits / self.count if self.count else 0.0,
            "statements_each": self.statements / self.count if self.count else 0.0,
        }


async def timed(counter: CommitCounter, series: Series, step: Callable[[], Awaitable[Any]]) -> float:
    commits0, statements0 = counter.snapshot()
    start = time.perf_counter()
    await step()
    elapsed = time.perf_counter() - start
    commits1, statements1 = counter.snapshot()
    series.add(elapsed, commits1 - commits0, statements1 - statements0)
    return elapsed


async def run_ledger(
    ledger: SqliteLedger, counter: CommitCounter, rep: int, pairs: int, out: dict[str, Series]
) -> None:
    # One intent+outcome pair per call, as a single tool call would do it.
    optimistic = "before" in inspect.signature(ledger.transition).parameters
    started = time.perf_counter()
    for i in range(pairs):
        op = make_op(f"op-{rep}-{i}")
        dispatch = Change(Event.DISPATCH, owner=OWNER, lease_expires_at=time.time() + 30)
        succeed = Change(
            Event.SUCCEED,
            result=b'{"id": "msg_123"}',
            result_type="json",
            evidence={"kind": "result"},
        )
        stored: list[Operation] = []

        async def intent(op: Operation = op, d: Change = dispatch, stored: list[Operation] = stored) -> None:
            stored[:] = await ledger.record_intents([op], change=d)

        t_intent = await timed(counter, out["intent"], intent)
        extra: dict[str, Any] = {"before": stored[0]} if optimistic else {}
        t_outcome = await timed(
            counter,
            out["outcome"],
            lambda op=op, s=succeed, e=extra: ledger.transition(op.op_id, s, expected_version=1, **e),
        )
        out["pair"].latencies.append(t_intent + t_outcome)
        out["pair"].count += 1
    elapsed = time.perf_counter() - started
    for name in ("intent", "outcome", "pair"):
        out[name].throughput.append(pairs / elapsed)

    # Parallel calls: 8 intents share one commit; their 8 outcomes, started together,
    # are group-committed.
    batches = max(pairs // BATCH, 50)
    elapsed = {"batch": 0.0, "parallel": 0.0}
    succeed = Change(Event.SUCCEED, result=b'{"id": "msg_123"}', result_type="json")
    for b in range(batches):
        ops = [make_op(f"batch-{rep}-{b}-{k}") for k in range(BATCH)]
        dispatch = Change(Event.DISPATCH, owner=OWNER, lease_expires_at=time.time() + 30)
        rows: list[Operation] = []

        async def intents(
            ops: list[Operation] = ops, d: Change = dispatch, rows: list[Operation] = rows
        ) -> None:
            rows[:] = await ledger.record_intents(ops, change=d)

        elapsed["batch"] += await timed(counter, out["batch"], intents)

        async def outcomes(rows: list[Operation] = rows) -> None:
            await asyncio.gather(
                *(
                    ledger.transition(
                        op.op_id, succeed, expected_version=1, **({"before": op} if optimistic else {})
                    )
                    for op in rows
                )
            )

        commits0, statements0 = counter.snapshot()
        start = time.perf_counter()
        await outcomes()
        elapsed["parallel"] += time.perf_counter() - start
        commits1, statements1 = counter.snapshot()
        out["parallel"].add(time.perf_counter() - start, commits1 - commits0, statements1 - statements0)
    for name in ("batch", "parallel"):
        out[name].throughput.append(batches * BATCH / elapsed[name])


def run_floor(path: Path, rep: int, pairs: int, series: Series) -> None:
    """Two bare write transactions per pair: what the fsyncs alone cost."""
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("PRAGMA busy_timeout = 30000")
        db.execute("PRAGMA journal_mode = WAL")
        db.execute("PRAGMA synchronous = FULL")
        db.execute("CREATE TABLE IF NOT EXISTS bench_floor (id TEXT PRIMARY KEY, step TEXT, body TEXT)")
        body = json.dumps(make_op("floor").args)
        started = time.perf_counter()
        for i in range(pairs):
            key = f"{rep}-{i}"
            start = time.perf_counter()
            for step in ("intent", "outcome"):
                db.execute("BEGIN IMMEDIATE")
                db.execute(
                    "INSERT INTO bench_floor (id, step, body) VALUES (?, ?, ?)",
                    (f"{key}-{step}", step, body),
                )
                db.execute("COMMIT")
            series.add(time.perf_counter() - start, 2, 6)
        series.throughput.append(pairs / (time.perf_counter() - started))
    finally:
        db.close()


async def run_floor_hop(conn: Any, rep: int, pairs: int, series: Series) -> None:
    """The same two bare transactions, each sent to aiosqlite's thread in one hop
    (as the ledger does): the floor plus the cost of the thread hand-off."""
    body = json.dumps(make_op("floor").args)

    def write(key: str, step: str) -> Callable[[sqlite3.Connection], None]:
        def tx(db: sqlite3.Connection) -> None:
            db.execute("BEGIN IMMEDIATE")
            db.execute(
                "INSERT INTO bench_floor (id, step, body) VALUES (?, ?, ?)",
                (f"{key}-{step}", step, body),
            )
            db.execute("COMMIT")

        return tx

    started = time.perf_counter()
    for i in range(pairs):
        key = f"hop-{rep}-{i}"
        start = time.perf_counter()
        await run_in_connection_thread(conn, write(key, "intent"))
        await run_in_connection_thread(conn, write(key, "outcome"))
        series.add(time.perf_counter() - start, 2, 6)
    series.throughput.append(pairs / (time.perf_counter() - started))


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    workdir = Path(args.dir or tempfile.mkdtemp(prefix="lge-bench-"))
    path = workdir / "ledger.db"
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)

    names = ("intent", "outcome", "pair", "batch", "parallel", "floor", "floor_hop")
    out = {name: Series() for name in names}
    counter = CommitCounter()
    async with SqliteLedger.from_conn_string(path) as ledger:
        await ledger.setup()
        await run_in_connection_thread(ledger.conn, lambda db: db.set_trace_callback(counter))
        # Warm up (page cache, WAL file growth) outside the measurement.
        await run_ledger(ledger, CommitCounter(), -1, min(args.pairs, 100), _scratch())
        run_floor(path, -1, min(args.pairs, 100), Series())
        hop = await aiosqlite.connect(str(path), isolation_level=None)
        try:
            await hop.execute("PRAGMA busy_timeout = 30000")
            await hop.execute("PRAGMA synchronous = FULL")
            for rep in range(args.repeats):
                # Interleave ledger and floors so drift (disk, page cache) hits all alike.
                await run_ledger(ledger, counter, rep, args.pairs, out)
                run_floor(path, rep, args.pairs, out["floor"])
                await run_floor_hop(hop, rep, args.pairs, out["floor_hop"])
        finally:
            await hop.close()
        await run_in_connection_thread(ledger.conn, lambda db: db.set_trace_callback(None))
        mode = await run_in_connection_thread(
            ledger.conn,
            lambda db: (
                db.execute("PRAGMA journal_mode").fetchone()[0],
                db.execute("PRAGMA synchronous").fetchone()[0],
            ),
        )

    report = {name: series.summary() for name, series in out.items()}
    report["pair"]["commits_each"] = report["intent"]["commits_each"] + report["outcome"]["commits_each"]
    report["pair"]["statements_each"] = (
        report["intent"]["statements_each"] + report["outcome"]["statements_each"]
    )
    report["ratio_pair_to_floor"] = report["pair"]["median_ms"] / report["floor"]["median_ms"]
    report["ratio_pair_to_floor_hop"] = report["pair"]["median_ms"] / report["floor_hop"]["median_ms"]
    report["autocommit_writes"] = counter.autocommit_writes
    report["setup"] = {
        "file": str(path),
        "pairs": args.pairs,
        "repeats": args.repeats,
        "batch": BATCH,
        "journal_mode": mode[0],
        "synchronous": {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}.get(mode[1], mode[1]),
        "sqlite": sqlite3.sqlite_version,
        "python": platform.python_version(),
        "platform": platform.platform(),
    }
    if not args.keep and not args.dir:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
        workdir.rmdir()
    return report


def _scratch() -> dict[str, Series]:
    return {name: Series() for name in ("intent", "outcome", "pair", "batch", "parallel")}


def report_lines(report: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    print = lines.append
    setup = report["setup"]
    print(
        f"SQLite ledger, {setup['pairs']} pairs x {setup['repeats']} repeats on {setup['file']}\n"
        f"SQLite {setup['sqlite']}, journal_mode={setup['journal_mode']}, "
        f"synchronous={setup['synchronous']}, Python {setup['python']}, {setup['platform']}"
    )
    rows = [
        ("intent+dispatch (1 op)", "intent"),
        ("outcome: succeed", "outcome"),
        ("pair: intent + outcome", "pair"),
        (f"batch intent ({BATCH} ops, 1 tx)", "batch"),
        (f"{BATCH} parallel outcomes", "parallel"),
        ("floor: 2 x bare INSERT tx", "floor"),
        ("  same, 1 aiosqlite hop per tx", "floor_hop"),
    ]
    header = f"{'step':<30}{'median ms':>11}{'p95 ms':>9}{'per second':>12}{'commits':>9}{'stmts':>7}"
    print(header)
    print("-" * len(header))
    for label, key in rows:
        s = report[key]
        unit = {"batch": "ops", "parallel": "ops", "intent": None, "outcome": None}.get(key, "pairs")
        per_second = f"{s['per_second']:.0f} {unit}" if unit else "-"
        print(
            f"{label:<30}{s['median_ms']:>11.3f}{s['p95_ms']:>9.3f}{per_second:>12}"
            f"{s['commits_each']:>9.2f}{s['statements_each']:>7.1f}"
        )
    batch = report["batch"]
    print(
        f"durable commits counted (trace callback, COMMIT statements): "
        f"{report['intent']['commits_each']:.2f} per intent, "
        f"{report['outcome']['commits_each']:.2f} per outcome, "
        f"{batch['commits_each']:.2f} per batch of {BATCH} intents "
        f"({batch['commits_each'] / BATCH:.3f} per op), "
        f"{report['parallel']['commits_each']:.2f} per {BATCH} parallel outcomes; "
        f"writes outside a transaction: {report['autocommit_writes']}"
    )
    print(
        f"batch intent: {batch['median_ms'] / BATCH:.3f} ms per op vs "
        f"{report['intent']['median_ms']:.3f} ms for a single intent"
    )
    print(
        f"ratio pair / physical floor (median): {report['ratio_pair_to_floor']:.2f}x "
        f"({report['pair']['median_ms']:.3f} ms vs {report['floor']['median_ms']:.3f} ms); "
        f"vs the floor with the same thread hops: {report['ratio_pair_to_floor_hop']:.2f}x"
    )
    return "\n".join(lines).splitlines()


CONFIGURATIONS = ("intent", "outcome", "pair", "batch", "parallel", "floor", "floor_hop")
QUICK = ["--pairs", "20", "--repeats", "1"]


def options(group: Any) -> None:
    group.add_argument("--pairs", type=int, default=2000, help="pairs per repeat (2000)")
    group.add_argument("--keep", action="store_true", help="keep the database file")
    # --repeats (5 here) and --dir are the runner's own options


async def run(args: Any, ctx: Any) -> dict[str, Any]:
    shim = argparse.Namespace(
        pairs=opt(args, "pairs", 2000), repeats=getattr(args, "repeats_given", None) or 5,
        dir=getattr(args, "dir", None), keep=opt(args, "keep", False),
    )
    report = await main_async(shim)
    return section("ledger_pairs", report_lines(report), **report)
