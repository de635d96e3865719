"""Where a Postgres turn's extra time goes: our saver, or our node's ledger work.

    python benchmarks/postgres_split.py [--path node|middleware] [--fanout 1] [--batches 40]

Three agents on one fresh database, in shuffled batches of 4 turns: the baseline on
LangGraph's ``AsyncPostgresSaver``; the same baseline agent on ``EffectPostgresSaver``
(what the one-runner fence adds); and ours on ``EffectPostgresSaver`` (what the
ledger adds on top). Prints the median wall and process CPU time per turn of each,
and each one's ratio to the one before it.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import time
from typing import Any

import bench_e2e
from bench_common import DEFAULT_PG_DSN, fresh_pg_database, pg_problem


async def main(path: str, fanout: int, batches: int, dsn: str) -> None:
    async with (
        fresh_pg_database(dsn) as plain_db,
        fresh_pg_database(dsn) as ours_db,
        bench_e2e.postgres_savers(plain_db, ours_db) as (plain_saver, ours_saver),
    ):
        def agent(effect: bool, saver: Any) -> Any:
            return bench_e2e.build_graph(path=path, effect=effect, fanout=fanout, latency_ms=0, saver=saver)

        agents = {
            "baseline": agent(False, plain_saver),
            "baseline on our saver": agent(False, ours_saver),
            "ours": agent(True, ours_saver),
        }
        for _ in range(20):  # warm: pools, prepared statements, spare lease owners
            for agent in agents.values():
                await bench_e2e.run_once(agent, "warm")
        wall: dict[str, list[float]] = {name: [] for name in agents}
        cpu: dict[str, list[float]] = {name: [] for name in agents}
        for done in range(batches):
            for name in random.sample(list(agents), len(agents)):
                start, used = time.perf_counter(), time.process_time()
                for _ in range(4):
                    await bench_e2e.run_once(agents[name], "split")
                wall[name].append((time.perf_counter() - start) / 4 * 1000)
                cpu[name].append((time.process_time() - used) / 4 * 1000)
            if (done + 1) % 10 == 0:
                print(f"  {done + 1}/{batches} batches", flush=True)
    print(f"{path}, fan-out {fanout}, 0 ms tool: ms per turn (median of {batches} batches of 4 turns)")
    before: tuple[float, float] | None = None
    for name in agents:
        w, c = statistics.median(wall[name]), statistics.median(cpu[name])
        step = f"  x{w / before[0]:.3f} wall, x{c / before[1]:.3f} CPU vs the row above" if before else ""
        print(f"  {name:22s} wall {w:6.2f}  CPU {c:6.2f}{step}")
        before = (w, c)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--path", choices=["node", "middleware"], default="node")
    parser.add_argument("--fanout", type=int, default=1)
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--postgres-dsn", default=DEFAULT_PG_DSN)
    args = parser.parse_args()
    problem = pg_problem(args.postgres_dsn)
    if problem is not None:
        raise SystemExit(f"skipped: {problem}")
    asyncio.run(main(args.path, args.fanout, args.batches, args.postgres_dsn))
