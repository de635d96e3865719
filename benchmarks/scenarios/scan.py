"""Ledger at scale: finding unresolved operations among 1,000,000 (scenario ``scan``), and
the memory and disk an operation takes (scenario ``memory``, ``scenarios/memory.py``).

Scan: the ledger file is created with ``SqliteLedger.setup()`` (the real schema and
its partial indexes), then bulk-loaded in one transaction with ``executemany``: rows
made by the package's own state machine and row codec, all but ``unresolved`` of them
``confirmed``, the rest ``dispatched``/``unknown``/``review``/``pending``, spread over
many threads. Then ``ledger.unresolved()`` and ``ledger.unresolved(thread_id=...)``
are timed through the public API, on a freshly opened ledger. The same on Postgres
(``COPY`` into a fresh database) when a server is reachable.

Memory: ``tracemalloc`` around an ``InMemoryLedger`` recording operations the way a
tool call does (intent+dispatch, then the outcome), and the growth of a SQLite ledger
file (after a WAL checkpoint) for the same operations.
"""

from __future__ import annotations

import cProfile
import gc
import pstats
import sqlite3
import time
import tracemalloc
from collections.abc import Callable, Iterator
from pathlib import Path
from statistics import median
from typing import Any

from bench_common import (
    confirmed,
    dispatch_change,
    dispatched,
    fresh_pg_database,
    make_op,
    succeed_change,
)

from langgraph_effects.core.operation import Change, Event, State, advance, create
from langgraph_effects.ledger.base import COLUMNS, Ledger, OperationQuery, from_row, to_row
from langgraph_effects.ledger.memory import InMemoryLedger
from langgraph_effects.ledger.sqlite import SqliteLedger, run_in_connection_thread

BASE_TIME = 1_780_000_000.0
OPS_PER_THREAD = 100


# -- rows -----------------------------------------------------------------------------------


def _templates() -> dict[str, dict[str, Any]]:
    """One row per state, each reached through the real state machine."""
    op = make_op("op-template", n=1)
    done = confirmed(op, at=BASE_TIME)
    sent = dispatched(op, at=BASE_TIME)
    lost = advance(
        sent, Change(Event.LOSE, evidence={"kind": "lease"}), expected_version=sent.version, now=BASE_TIME
    )
    assert lost is not None
    asked = advance(
        lost,
        Change(Event.ESCALATE, evidence={"kind": "dedup", "reason": "window passed"}),
        expected_version=lost.version,
        now=BASE_TIME,
    )
    assert asked is not None
    pending = create(op, now=BASE_TIME)
    return {
        "confirmed": to_row(done),
        "dispatched": to_row(sent),
        "unknown": to_row(lost),
        "review": to_row(asked),
        "pending": to_row(pending),
    }


_UNRESOLVED_CYCLE = ("dispatched", "unknown", "review", "pending")


def _thread_of(i: int, threads: int) -> str:
    """A thread for row ``i``: a fixed pseudo-random spread (unresolved rows land on
    many different threads, as they would in a real ledger)."""
    mixed = (i * 0x9E3779B97F4A7C15 + 0x632BE59BD9B4E019) & 0xFFFFFFFFFFFFFFFF
    mixed ^= mixed >> 29
    return f"thread-{mixed % threads:06d}"


def ledger_rows(total: int, unresolved: int) -> Iterator[tuple[Any, ...]]:
    """``total`` rows: every ``total // unresolved``-th one unresolved, the rest confirmed."""
    templates = _templates()
    threads = max(1, total // OPS_PER_THREAD)
    step = max(1, total // max(1, unresolved))
    made = 0
    for i in range(total):
        if made < unresolved and i % step == step // 2:
            kind = _UNRESOLVED_CYCLE[made % len(_UNRESOLVED_CYCLE)]
            made += 1
        else:
            kind = "confirmed"
        row = dict(templates[kind])
        op_id = f"op:{i:09d}"
        at = BASE_TIME + i * 0.01
        row.update(
            op_id=op_id,
            thread_id=_thread_of(i, threads),
            tool_call_id=f"call_{i:09d}",
            provider_key=f"lge:{op_id}",
            args_hash=f"h1:{i * 40503 % 2**32:08x}{i:056x}",
            created_at=at,
            updated_at=at,
        )
        yield tuple(row[c] for c in COLUMNS)


def first_unresolved_thread(total: int, unresolved: int) -> str:
    step = max(1, total // max(1, unresolved))
    return _thread_of(step // 2, max(1, total // OPS_PER_THREAD))


# -- scan: SQLite ----------------------------------------------------------------------------


async def _timed(fn: Callable[[], Any], repeats: int) -> tuple[float, list[float], Any]:
    """(first call ms, later calls ms, result of the last call)."""
    times: list[float] = []
    result: Any = None
    for _ in range(repeats + 1):
        start = time.perf_counter()
        result = await fn()
        times.append((time.perf_counter() - start) * 1e3)
    return times[0], times[1:], result


async def load_sqlite(path: Path, *, total: int, unresolved: int) -> dict[str, Any]:
    """A ledger file with the real schema and ``total`` rows, loaded in one transaction."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    async with SqliteLedger.from_conn_string(path) as ledger:
        await ledger.setup()

    start = time.perf_counter()
    db = sqlite3.connect(path, isolation_level=None)
    try:
        db.execute("PRAGMA synchronous = OFF")  # loading only; the ledger reopens with FULL
        db.execute("PRAGMA cache_size = -400000")
        db.execute("BEGIN IMMEDIATE")
        db.executemany(
            f"INSERT INTO effect_operations ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})",
            ledger_rows(total, unresolved),
        )
        db.execute("COMMIT")
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        counts = dict(db.execute("SELECT state, COUNT(*) FROM effect_operations GROUP BY state").fetchall())
    finally:
        db.close()
    seconds = time.perf_counter() - start
    return {"states": counts, "load_seconds": seconds, "file_mb": path.stat().st_size / 1e6}


_UNRESOLVED_WHERE = "state IN ('dispatched', 'pending', 'review', 'unknown')"


async def scan_sqlite(
    path: Path, *, total: int, unresolved: int, repeats: int, load: bool = True, keep: bool = False
) -> dict[str, Any]:
    """Time ``unresolved()`` on a ledger of ``total`` rows, and take it apart.

    Besides the public calls: the index alone (``count(*)`` of unresolved rows, answered
    from the partial index), the statement ``unresolved()`` runs with rows fetched but
    not decoded, and the decoding of those rows into ``Operation`` objects (``from_row``),
    each timed on the ledger's own connection thread.
    """
    loaded = await load_sqlite(path, total=total, unresolved=unresolved) if load else {}
    thread = first_unresolved_thread(total, unresolved)
    sql = (
        f"SELECT * FROM effect_operations WHERE {_UNRESOLVED_WHERE} "
        f"ORDER BY updated_at, op_id LIMIT {unresolved}"
    )

    def fetch(c: sqlite3.Connection) -> tuple[float, float, int]:
        start = time.perf_counter()
        rows = c.execute(sql).fetchall()
        fetched = time.perf_counter()
        ops = [from_row(r) for r in rows]
        return (fetched - start) * 1e3, (time.perf_counter() - fetched) * 1e3, len(ops)

    def decode_profile(c: sqlite3.Connection) -> list[dict[str, Any]]:
        """Where decoding goes: cProfile of ``from_row`` over the fetched rows."""
        rows = c.execute(sql).fetchall()
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(3):
            [from_row(r) for r in rows]
        prof.disable()
        raw: dict[Any, Any] = pstats.Stats(prof).stats  # type: ignore[attr-defined]
        total = sum(tt for (_cc, _nc, tt, _ct, _callers) in raw.values()) or 1.0
        top = sorted(raw.items(), key=lambda kv: -kv[1][2])[:6]
        return [
            {
                "function": key[2] if key[0] == "~" else f"{Path(key[0]).name}:{key[1]}({key[2]})",
                "self_share": tt / total,
                "calls_per_row": nc / (3 * max(1, len(rows))),
            }
            for key, (_cc, nc, tt, _ct, _callers) in top
        ]

    def index_only(c: sqlite3.Connection) -> tuple[float, int]:
        start = time.perf_counter()
        n = c.execute(f"SELECT count(*) FROM effect_operations WHERE {_UNRESOLVED_WHERE}").fetchone()[0]
        return (time.perf_counter() - start) * 1e3, int(n)

    async with SqliteLedger.from_conn_string(path) as ledger:
        all_first, all_ms, found = await _timed(lambda: ledger.unresolved(), repeats)
        th_first, th_ms, found_thread = await _timed(lambda: ledger.unresolved(thread_id=thread), repeats)
        hundred_first, hundred_ms, _ = await _timed(lambda: ledger.unresolved(limit=100), repeats)
        parts = [await run_in_connection_thread(ledger.conn, fetch) for _ in range(repeats)]
        counts = [await run_in_connection_thread(ledger.conn, index_only) for _ in range(repeats)]
        decode_top = await run_in_connection_thread(ledger.conn, decode_profile)
        plan = await run_in_connection_thread(
            ledger.conn, lambda c: [r[-1] for r in c.execute("EXPLAIN QUERY PLAN " + sql).fetchall()]
        )
    if not keep:
        for suffix in ("", "-wal", "-shm"):
            Path(f"{path}{suffix}").unlink(missing_ok=True)
    return {
        "backend": "sqlite",
        "rows": total,
        "unresolved_rows": unresolved,
        "threads": max(1, total // OPS_PER_THREAD),
        **loaded,
        "unresolved_all_ms": median(all_ms),
        "unresolved_all_first_ms": all_first,
        "unresolved_all_found": len(found),
        "unresolved_limit100_ms": median(hundred_ms),
        "unresolved_limit100_first_ms": hundred_first,
        "unresolved_thread_ms": median(th_ms),
        "unresolved_thread_first_ms": th_first,
        "unresolved_thread_found": len(found_thread),
        "index_only_count_ms": median([ms for ms, _ in counts]),
        "index_only_count": counts[0][1] if counts else 0,
        "sql_only_all_ms": median([f for f, _, _ in parts]),
        "decode_all_ms": median([d for _, d, _ in parts]),
        "decode_profile": decode_top,
        "query_plan": plan,
        "repeats": repeats,
    }


# -- scan: Postgres --------------------------------------------------------------------------


async def scan_postgres(dsn: str, *, total: int, unresolved: int, repeats: int) -> dict[str, Any]:
    import psycopg

    from langgraph_effects.ledger.postgres import PostgresLedger

    async with PostgresLedger.from_conn_string(dsn) as ledger:
        await ledger.setup()
        start = time.perf_counter()
        async with await psycopg.AsyncConnection.connect(dsn) as conn:
            async with conn.cursor() as cur, cur.copy(
                f"COPY effect_operations ({', '.join(COLUMNS)}) FROM STDIN"
            ) as copy:
                for row in ledger_rows(total, unresolved):
                    await copy.write_row(row)
            await conn.commit()
            await conn.set_autocommit(True)
            await conn.execute("VACUUM ANALYZE effect_operations")
        load_s = time.perf_counter() - start
        thread = first_unresolved_thread(total, unresolved)
        all_first, all_ms, found = await _timed(lambda: ledger.unresolved(), repeats)
        th_first, th_ms, found_thread = await _timed(lambda: ledger.unresolved(thread_id=thread), repeats)
        hundred_first, hundred_ms, _ = await _timed(lambda: ledger.unresolved(limit=100), repeats)
    return {
        "backend": "postgres",
        "rows": total,
        "unresolved_rows": unresolved,
        "load_seconds": load_s,
        "unresolved_all_ms": median(all_ms),
        "unresolved_all_first_ms": all_first,
        "unresolved_all_found": len(found),
        "unresolved_limit100_ms": median(hundred_ms),
        "unresolved_limit100_first_ms": hundred_first,
        "unresolved_thread_ms": median(th_ms),
        "unresolved_thread_first_ms": th_first,
        "unresolved_thread_found": len(found_thread),
        "repeats": repeats,
        "note": "after VACUUM ANALYZE (the state autovacuum reaches after a bulk load)",
    }


# -- memory and disk per operation ------------------------------------------------------------


async def record_calls(ledger: Ledger, n: int, prefix: str) -> None:
    """``n`` operations as ``n`` single tool calls record them: intent+dispatch, outcome."""
    for i in range(n):
        op = make_op(f"{prefix}:{i:08d}", thread_id=f"thread-{i // 10}", n=i)
        [stored] = await ledger.record_intents([op], change=dispatch_change())
        await ledger.transition(op.op_id, succeed_change(op.tool_call_id), expected_version=stored.version)


async def memory_inmemory(n: int) -> dict[str, Any]:
    gc.collect()
    tracemalloc.start()
    try:
        gc.collect()
        before = tracemalloc.get_traced_memory()[0]
        ledger = InMemoryLedger()
        await record_calls(ledger, n, "mem")
        gc.collect()
        after = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    ops = await ledger.list_operations(OperationQuery(limit=n + 1))
    assert len(ops) == n and all(o.state is State.CONFIRMED for o in ops)
    per_op = (after - before) / n
    return {
        "operations": n,
        "bytes_per_operation": per_op,
        "mb_per_10000": per_op * 10_000 / 1e6,
        "method": "tracemalloc: live Python heap of an InMemoryLedger after n intent+dispatch "
        "and succeed transitions (with their audit entries), after gc",
    }


async def disk_sqlite(path: Path, n: int) -> dict[str, Any]:
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)

    def size(db: sqlite3.Connection) -> int:
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        pages = db.execute("PRAGMA page_count").fetchone()[0]
        free = db.execute("PRAGMA freelist_count").fetchone()[0]
        page = db.execute("PRAGMA page_size").fetchone()[0]
        return int((pages - free) * page)

    async with SqliteLedger.from_conn_string(path) as ledger:
        await ledger.setup()
        # Only to make the measurement quick: sizes do not depend on fsync.
        await run_in_connection_thread(ledger.conn, lambda db: db.execute("PRAGMA synchronous = OFF"))
        await record_calls(ledger, 200, "warm")  # past the empty schema's first pages
        before = await run_in_connection_thread(ledger.conn, size)
        await record_calls(ledger, n, "disk")
        after = await run_in_connection_thread(ledger.conn, size)
        audit_rows = await run_in_connection_thread(
            ledger.conn, lambda db: db.execute("SELECT COUNT(*) FROM effect_audit").fetchone()[0]
        )
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    per_op = (after - before) / n
    return {
        "operations": n,
        "bytes_per_operation": per_op,
        "mb_per_10000": per_op * 10_000 / 1e6,
        "audit_rows_per_operation": audit_rows / (n + 200),
        "method": "used pages (page_count - freelist_count) x page_size of the SQLite file after "
        "a WAL checkpoint, before and after n calls (operation row, 2 audit rows, indexes)",
    }


CONFIGURATIONS = ("unresolved/sqlite/1000000", "unresolved/sqlite/20000", "unresolved/postgres/1000000")
TARGET_ROWS = 1_000_000


async def run(args: Any, ctx: Any) -> dict[str, Any]:
    """1,000 unresolved among ``--rows`` (1,000,000; quick 20,000), and on SQLite the same
    1,000 among 20,000 for reference (the scan is O(result), not O(history))."""
    rows = args.rows or (20_000 if ctx.quick else TARGET_ROWS)
    repeats = 5 if ctx.quick else 25
    out: dict[str, Any] = {}
    if "sqlite" in ctx.only.backends:
        for total in [rows, *([] if ctx.quick else [20_000])]:
            ctx.log(f"unresolved scan, {total:,} rows (SQLite)")
            out[f"sqlite/{total}"] = await scan_sqlite(
                ctx.workdir / "scan.sqlite", total=total, unresolved=1_000, repeats=repeats
            )
    if ctx.pg_skip is None and "postgres" in ctx.only.backends:
        ctx.log(f"unresolved scan, {rows:,} rows (Postgres)")
        async with fresh_pg_database(ctx.dsn) as fresh:
            out[f"postgres/{rows}"] = await scan_postgres(
                fresh, total=rows, unresolved=1_000, repeats=repeats
            )
    return {"scan": out}


__all__ = ["disk_sqlite", "ledger_rows", "memory_inmemory", "run", "scan_postgres", "scan_sqlite"]
