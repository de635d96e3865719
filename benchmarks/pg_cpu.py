"""CPU per turn on Postgres, ours against LangGraph's, client and server apart.

    python benchmarks/pg_cpu.py [--path node|middleware] [--fanout 1] [--batches 30] [--turns 10]

Rows, interleaved in shuffled batches (0 ms tool): ``plain`` (the baseline agent on
LangGraph's ``AsyncPostgresSaver``, a database of its own), ``saver`` (the baseline
agent on ``AsyncEffectPostgresSaver``: the fence), ``ours`` (our agent on ours), and ``bare``
(the bare two-commit pair, per pair, on its own connection). For each row: this
process's CPU (``time.process_time``), and the CPU of the Postgres backends serving
the row's database, read from ``/proc/<pid>/stat`` (pids from ``pg_stat_activity``;
``ours``: the checkpoint connection's backend and the ledger pool's apart). Totals over
all batches divided by the turns, so the kernel's 10 ms ticks average out. A shared
machine's load moves wall time, not these.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import random
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import psycopg
from bench_common import DEFAULT_PG_DSN, fresh_pg_database
from proc_cpu import stat_cpu
from scenarios import turn


def backend_cpu(pids: list[int]) -> float:
    """CPU seconds used so far by the server processes ``pids`` (gone ones count 0)."""
    return sum(stat_cpu(f"/proc/{pid}/stat") for pid in pids)


async def pids_of(admin: psycopg.AsyncConnection[Any], dbname: str) -> list[int]:
    cur = await admin.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = %s AND pid <> pg_backend_pid()", (dbname,)
    )
    return [int(r[0]) for r in await cur.fetchall()]


async def bare_pairs(conn: psycopg.AsyncConnection[Any], n: int, tag: list[int]) -> None:
    body = '{"to": "customer@example.com", "subject": "Your invoice", "body": "' + "x" * 200 + '"}'
    for _ in range(n):
        tag[0] += 1
        key = f"b-{os.getpid()}-{tag[0]}"
        await conn.execute("INSERT INTO bare (id, state, version, body) VALUES (%s, %s, 1, %s)",
                           [key, "dispatched", body])
        await conn.execute(
            "UPDATE bare SET state = %s, version = 2, result = %s WHERE id = %s AND version = 1",
            ["confirmed", b'{"id": "m"}', key],
        )


async def main(args: argparse.Namespace) -> None:
    from psycopg.conninfo import conninfo_to_dict

    async with (
        fresh_pg_database(args.dsn) as plain_db,
        fresh_pg_database(args.dsn) as ours_db,
        turn.postgres_savers(plain_db, ours_db) as (plain_saver, ours_saver),
        await psycopg.AsyncConnection.connect(args.dsn, autocommit=True) as admin,
        await psycopg.AsyncConnection.connect(plain_db, autocommit=True) as bare,
    ):
        await bare.execute("CREATE TABLE bare (id text PRIMARY KEY, state text NOT NULL, "
                           "version integer NOT NULL, body text, result bytea)")
        names = {"plain": conninfo_to_dict(plain_db)["dbname"], "ours": conninfo_to_dict(ours_db)["dbname"]}
        base_path = "floor" if args.path == "middleware" else args.path
        graphs = {
            "plain": turn.build_graph(path=base_path, effect=args.path == "middleware", fanout=args.fanout,
                                      latency_ms=0, saver=plain_saver),
            "saver": turn.build_graph(path=base_path, effect=args.path == "middleware", fanout=args.fanout,
                                      latency_ms=0, saver=ours_saver),
            "ours": turn.build_graph(path=args.path, effect=True, fanout=args.fanout, latency_ms=0,
                                     saver=ours_saver),
        }
        if args.path == "node":  # the plain row: no middleware at all
            pass
        tag = [0]
        for _ in range(5):
            for g in graphs.values():
                await turn.run_once(g, "warm")
        await bare_pairs(bare, 20, tag)
        ckpt_pid = ours_saver.conn.info.backend_pid
        bare_pid = bare.info.backend_pid
        totals: dict[str, list[float]] = {k: [0.0, 0.0, 0.0] for k in (*graphs, "bare")}
        for _ in range(args.batches):
            for name in random.sample([*graphs, "bare"], len(graphs) + 1):
                if name == "bare":
                    pids = [bare_pid]
                else:
                    pids = await pids_of(admin, names["plain" if name == "plain" else "ours"])
                    pids = [p for p in pids if p != bare_pid]
                ledger_pids = [p for p in pids if p != ckpt_pid] if name not in ("plain", "bare") else []
                gc.collect()
                s0, l0, c0 = backend_cpu(pids), backend_cpu(ledger_pids), time.process_time()
                if name == "bare":
                    await bare_pairs(bare, args.turns * args.fanout, tag)
                else:
                    for _ in range(args.turns):
                        await turn.run_once(graphs[name], "cpu")
                c1, s1, l1 = time.process_time(), backend_cpu(pids), backend_cpu(ledger_pids)
                t = totals[name]
                t[0] += c1 - c0
                t[1] += s1 - s0
                t[2] += l1 - l0
        n = args.batches * args.turns
        print(f"load average {os.getloadavg()}; path {args.path}, fan-out {args.fanout}, "
              f"{args.batches} batches of {args.turns} turns; CPU ms per turn "
              f"(bare: per {args.fanout} pairs)")
        print(f"{'':8}{'process':>9}{'server':>9}{'(ledger)':>9}{'total':>9}")
        for name, (c, s, led) in totals.items():
            cols = (c, s, led, c + s)
            print(f"{name:<8}" + "".join(f"{x * 1e3 / n:>9.2f}" for x in cols))
        p, o = totals["plain"], totals["ours"]
        f = args.fanout
        print(f"ours - plain per call: process {(o[0] - p[0]) * 1e3 / n / f:.2f}, "
              f"server {(o[1] - p[1]) * 1e3 / n / f:.2f} ms; bare pair: process "
              f"{totals['bare'][0] * 1e3 / n / f:.2f}, server {totals['bare'][1] * 1e3 / n / f:.2f} ms")
        if args.profile:
            await profile_diff(graphs, args.profile)


async def profile_diff(graphs: dict[str, Any], turns: int) -> None:
    """cProfile (process CPU) of ``turns`` turns of each row; the functions whose own
    time grows most from one row to the next, per turn (profiled: inflated)."""
    import cProfile
    import pstats

    own: dict[str, dict[Any, tuple[int, float]]] = {}
    for name, graph in graphs.items():
        prof = cProfile.Profile(time.process_time)
        prof.enable()
        for _ in range(turns):
            await turn.run_once(graph, "prof")
        prof.disable()
        st = pstats.Stats(prof).stats  # type: ignore[attr-defined]
        own[name] = {k: (v[1], v[2]) for k, v in st.items()}
        total = sum(t for _, t in own[name].values())
        print(f"profiled {name}: {total * 1e3 / turns:.2f} ms per turn")
    for a, b in (("plain", "saver"), ("saver", "ours")):
        keys = set(own[a]) | set(own[b])
        diff = sorted(
            ((own[b].get(k, (0, 0.0))[1] - own[a].get(k, (0, 0.0))[1],
              own[b].get(k, (0, 0.0))[0] - own[a].get(k, (0, 0.0))[0], k) for k in keys),
            key=lambda x: -x[0],
        )
        print(f"\n{b} - {a}: own time ms per turn, calls per turn, function")
        for dt, dn, k in diff[:40]:
            where = f"{k[0].split('site-packages/')[-1].split('pgperf/')[-1]}:{k[1]}({k[2]})"
            print(f"{dt * 1e3 / turns:8.3f} {dn / turns:8.1f}  {where}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--dsn", default=os.environ.get("LANGGRAPH_EFFECTS_TEST_PG_DSN", DEFAULT_PG_DSN))
    parser.add_argument("--path", choices=["node", "middleware"], default="node")
    parser.add_argument("--fanout", type=int, default=1)
    parser.add_argument("--batches", type=int, default=30)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--profile", type=int, default=0, help="then profile this many turns of each row")
    asyncio.run(main(parser.parse_args()))
