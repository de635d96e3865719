"""What recovery's checkpoint scan costs: ``unfinished_threads()`` over many threads.

    python benchmarks/unfinished_scan.py [--threads 20000] [--checkpoints 5] [--repeat 3]

Fills LangGraph's ``checkpoints`` table of a fresh ``EffectSqliteSaver`` file and of
a fresh Postgres schema (``LANGGRAPH_EFFECTS_TEST_PG_DSN``, default the local test
database) with ``threads`` x ``checkpoints`` rows (1 % of the threads end on an
``input`` checkpoint, as a worker that died before its first step leaves them), then
prints the median time of the scan that ``recover()`` runs once per call.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import statistics
import tempfile
import time
import uuid
from collections.abc import Iterator

import psycopg

from langgraph_effects import EffectSqliteSaver
from langgraph_effects.checkpoint.postgres import EffectPostgresSaver

PG_DSN = os.environ.get("LANGGRAPH_EFFECTS_TEST_PG_DSN", "postgresql://postgres@127.0.0.1:5432/test")


def rows(threads: int, checkpoints: int) -> Iterator[tuple[str, str, str]]:
    for t in range(threads):
        for k in range(checkpoints):
            source = "input" if k == checkpoints - 1 and t % 100 == 0 else "loop"
            yield f"thread-{t}", f"{k:08d}-{uuid.uuid4()}", json.dumps({"source": source, "step": k})


async def timed(saver: EffectSqliteSaver | EffectPostgresSaver, repeat: int) -> tuple[int, float]:
    times, found = [], []
    for _ in range(repeat):
        started = time.perf_counter()
        found = await saver.unfinished_threads()
        times.append(time.perf_counter() - started)
    return len(found), statistics.median(times)


async def sqlite_case(threads: int, checkpoints: int, repeat: int) -> tuple[int, float]:
    path = os.path.join(tempfile.mkdtemp(), "agent.sqlite")
    async with EffectSqliteSaver.from_conn_string(path) as saver:
        await saver.setup()
    with sqlite3.connect(path) as db:
        db.executemany(
            "INSERT INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, type, checkpoint, metadata) "
            "VALUES (?, '', ?, 'msgpack', x'00', CAST(? AS BLOB))",
            rows(threads, checkpoints),
        )
    async with EffectSqliteSaver.from_conn_string(path) as saver:
        await saver.setup()
        return await timed(saver, repeat)


async def postgres_case(threads: int, checkpoints: int, repeat: int) -> tuple[int, float]:
    schema = f"lge_scan_bench_{os.getpid()}"
    with psycopg.connect(PG_DSN, autocommit=True) as conn:
        conn.execute(f'CREATE SCHEMA "{schema}"')
    dsn = PG_DSN + ("&" if "?" in PG_DSN else "?") + f"options=-csearch_path%3D{schema}"
    try:
        async with EffectPostgresSaver.from_conn_string(dsn) as saver:
            await saver.setup()
        with psycopg.connect(dsn, autocommit=True) as conn:
            copy = "COPY checkpoints (thread_id, checkpoint_id, checkpoint, metadata) FROM STDIN"
            with conn.cursor().copy(copy) as pipe:
                for thread, checkpoint, meta in rows(threads, checkpoints):
                    pipe.write_row((thread, checkpoint, "{}", meta))
            conn.execute("ANALYZE checkpoints")
        async with EffectPostgresSaver.from_conn_string(dsn) as saver:
            return await timed(saver, repeat)
    finally:
        with psycopg.connect(PG_DSN, autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--threads", type=int, default=20_000)
    parser.add_argument("--checkpoints", type=int, default=5)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    for name, case in (("sqlite", sqlite_case), ("postgres", postgres_case)):
        listed, seconds = asyncio.run(case(args.threads, args.checkpoints, args.repeat))
        print(
            f"{name}: {args.threads} threads x {args.checkpoints} checkpoints: "
            f"{listed} listed, median {seconds * 1000:.0f} ms"
        )


if __name__ == "__main__":
    main()
