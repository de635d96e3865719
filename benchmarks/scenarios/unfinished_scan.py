"""What recovery's checkpoint scan costs: ``unfinished_threads()`` over many threads
(scenario ``unfinished_scan``).

    python benchmarks/run.py unfinished_scan [--threads 20000] [--checkpoints 5] [--repeat 3]

Fills LangGraph's ``checkpoints`` table of a fresh ``AsyncEffectSqliteSaver`` file and of
a fresh Postgres schema (the runner's ``--postgres-dsn``; skipped without a server)
with ``threads`` x ``checkpoints`` rows (1 % of the threads end on an
``input`` checkpoint, as a worker that died before its first step leaves them), then
prints the median time of the scan that ``recover()`` runs once per call.
"""

from __future__ import annotations

import json
import os
import sqlite3
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg

from langgraph_effects import AsyncEffectSqliteSaver
from langgraph_effects.checkpoint.postgres import AsyncEffectPostgresSaver
from scenarios import opt, section

CONFIGURATIONS = ("sqlite", "postgres")
QUICK = ["--threads", "200", "--repeat", "1"]


def rows(threads: int, checkpoints: int) -> Iterator[tuple[str, str, str]]:
    for t in range(threads):
        for k in range(checkpoints):
            source = "input" if k == checkpoints - 1 and t % 100 == 0 else "loop"
            yield f"thread-{t}", f"{k:08d}-{uuid.uuid4()}", json.dumps({"source": source, "step": k})


async def timed(saver: AsyncEffectSqliteSaver | AsyncEffectPostgresSaver, repeat: int) -> tuple[int, float]:
    times, found = [], []
    for _ in range(repeat):
        started = time.perf_counter()
        found = await saver.unfinished_threads()
        times.append(time.perf_counter() - started)
    return len(found), statistics.median(times)


async def sqlite_case(threads: int, checkpoints: int, repeat: int) -> tuple[int, float]:
    path = os.path.join(tempfile.mkdtemp(), "agent.sqlite")
    async with AsyncEffectSqliteSaver.from_conn_string(path) as saver:
        await saver.setup()
    with sqlite3.connect(path) as db:
        db.executemany(
            "INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, type, checkpoint, metadata) "
            "VALUES (?, '', ?, 'msgpack', x'00', CAST(? AS BLOB))",
            rows(threads, checkpoints),
        )
    async with AsyncEffectSqliteSaver.from_conn_string(path) as saver:
        await saver.setup()
        return await timed(saver, repeat)


async def postgres_case(threads: int, checkpoints: int, repeat: int, pg_dsn: str) -> tuple[int, float]:
    schema = f"lge_scan_bench_{os.getpid()}"
    with psycopg.connect(pg_dsn, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    dsn = pg_dsn + ("&" if "?" in pg_dsn else "?") + f"options=-csearch_path%3D{schema}"
    try:
        async with AsyncEffectPostgresSaver.from_conn_string(dsn) as saver:
            await saver.setup()
        with psycopg.connect(dsn, autocommit=True) as conn:
            copy = "COPY checkpoints (thread_id, checkpoint_id, checkpoint, metadata) FROM STDIN"
            with conn.cursor().copy(copy) as pipe:
                for thread, checkpoint, meta in rows(threads, checkpoints):
                    pipe.write_row((thread, checkpoint, "{}", meta))
            conn.execute("ANALYZE checkpoints")
        async with AsyncEffectPostgresSaver.from_conn_string(dsn) as saver:
            return await timed(saver, repeat)
    finally:
        with psycopg.connect(pg_dsn, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def options(group: Any) -> None:
    group.add_argument("--threads", type=int, default=20_000)
    group.add_argument("--checkpoints", type=int, default=5)
    group.add_argument("--repeat", type=int, default=3)


async def run(args: Any, ctx: Any) -> dict[str, Any]:
    threads, checkpoints = opt(args, "threads", 20_000), opt(args, "checkpoints", 5)
    repeat = opt(args, "repeat", 3)
    lines: list[str] = []
    rows: dict[str, Any] = {}
    for name in ("sqlite", "postgres"):
        if name == "postgres" and ctx.pg_skip is not None:
            lines.append(f"postgres: skipped ({ctx.pg_skip})")
            continue
        if name == "sqlite":
            listed, seconds = await sqlite_case(threads, checkpoints, repeat)
        else:
            listed, seconds = await postgres_case(threads, checkpoints, repeat, ctx.dsn)
        rows[name] = {"listed": listed, "median_ms": seconds * 1000}
        lines.append(f"{name}: {threads} threads x {checkpoints} checkpoints: {listed} listed, "
                     f"median {seconds * 1000:.0f} ms")
    return section("unfinished_scan", lines, rows=rows)
