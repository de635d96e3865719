"""What one effectful call costs on Postgres, against two bare commits on the same server.

    python benchmarks/pg_profile.py pairs [--pairs 400] [--batches 10] [--profile]
    python benchmarks/pg_profile.py turns [--path node|middleware] [--fanout 1] [--turns 40] [--profile]

``pairs``: the ledger's intent+outcome pair (``record_intents([op], change=dispatch)``
then ``transition(succeed, before=stored)``, as the engine calls them) on a one-connection
pool, interleaved batch by batch with the bare pair through psycopg (an autocommit
``INSERT``, then an autocommit compare-and-set ``UPDATE``: two commits, one round trip
each). Per pair: median wall, this process's CPU (``time.process_time``), the local
``postgres`` processes' CPU (from /proc, other clients' work included), and, from
libpq's protocol trace, statements, round trips (``Sync``/``Query`` sent) and durable
commits. ``--profile``: cProfile of the ledger's pairs, top functions.

``turns``: turns of the benchmark agent (0 ms tool, ``fanout`` calls) on
``AsyncEffectPostgresSaver``, ours against the same agent without us on the same saver,
interleaved; per call: wall and CPU added, the ledger's and the checkpoint
connection's statements and round trips. ``--profile``: cProfile of our turns.

CPU time barely moves with the machine's load; wall time does (read it with the load
average printed).
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import gc
import io
import os
import pstats
import statistics
import sys
import time
import uuid
from typing import Any

import psycopg
from bench_common import (
    DEFAULT_PG_DSN,
    LibpqTraceCounter,
    PoolTracer,
    fresh_pg_database,
    make_op,
    trace_pg_connection,
    untrace_pg_connection,
)
from scenarios.ledger_throughput import server_cpu

from langgraph_effects.core.operation import Change, Event, Owner
from langgraph_effects.ledger.postgres import PostgresLedger

OWNER = Owner(host="bench", pid=os.getpid(), started=0.0, token="bench")
RESULT = b'{"id": "msg_123"}'


def _statements(counter: LibpqTraceCounter) -> int:
    n = 0
    for name in counter.files:
        with open(name, encoding="utf-8", errors="replace") as fh:
            for line in fh:
                parts = line.split("\t")
                if len(parts) >= 3 and parts[0] == "F" and parts[2].strip() in ("Bind", "Query"):
                    n += 1
    return n


class Pairs:
    def __init__(self, ledger: PostgresLedger, raw: psycopg.AsyncConnection[Any], schema: str) -> None:
        self.ledger, self.raw, self.schema = ledger, raw, schema
        self.tag = uuid.uuid4().hex[:6]
        self.n = 0

    async def ours(self, n: int) -> None:
        for _ in range(n):
            self.n += 1
            op = make_op(f"p-{self.tag}-{self.n}")
            dispatch = Change(Event.DISPATCH, owner=OWNER, lease_expires_at=time.time() + 30)
            [stored] = await self.ledger.record_intents([op], change=dispatch)
            succeed = Change(Event.SUCCEED, result=RESULT, result_type="json", evidence={"kind": "result"})
            await self.ledger.transition(op.op_id, succeed, expected_version=stored.version, before=stored)

    async def bare(self, n: int) -> None:
        body = '{"to": "customer@example.com", "subject": "Your invoice", "body": "' + "x" * 200 + '"}'
        insert = f'INSERT INTO "{self.schema}".bare (id, state, version, body) VALUES (%s, %s, 1, %s)'
        update = (
            f'UPDATE "{self.schema}".bare SET state = %s, version = 2, result = %s '
            "WHERE id = %s AND version = 1"
        )
        for _ in range(n):
            self.n += 1
            key = f"b-{self.tag}-{self.n}"
            await self.raw.execute(insert, [key, "dispatched", body])
            cur = await self.raw.execute(update, ["confirmed", RESULT, key])
            if cur.rowcount != 1:
                raise RuntimeError("the bare compare-and-set missed")


async def _timed(run: Any, n: int) -> tuple[float, float, float]:
    gc.collect()
    s0, c0, w0 = server_cpu() or 0.0, time.process_time(), time.perf_counter()
    await run(n)
    w1, c1, s1 = time.perf_counter(), time.process_time(), server_cpu() or 0.0
    return (w1 - w0) * 1e3 / n, (c1 - c0) * 1e3 / n, (s1 - s0) * 1e3 / n


async def pairs_main(args: argparse.Namespace) -> None:
    async with fresh_pg_database(args.dsn) as dsn:
        await _pairs_in(dsn, args)


async def _pairs_in(dsn: str, args: argparse.Namespace) -> None:
    async with (
        PostgresLedger.from_conn_string(dsn, schema="lge", min_size=1, max_size=1) as ledger,
        await psycopg.AsyncConnection.connect(dsn, autocommit=True) as raw,
    ):
        await ledger.setup()
        await raw.execute(
            'CREATE TABLE "lge".bare (id text PRIMARY KEY, state text NOT NULL, '
            "version integer NOT NULL, body text, result bytea)"
        )
        p = Pairs(ledger, raw, "lge")
        await p.ours(50)
        await p.bare(50)
        rows: dict[str, list[tuple[float, float, float]]] = {"bare": [], "ours": []}
        for _ in range(args.batches):
            rows["bare"].append(await _timed(p.bare, args.pairs))
            rows["ours"].append(await _timed(p.ours, args.pairs))
        counts = {}
        for name, run, conns in (("bare", p.bare, [raw]), ("ours", p.ours, None)):
            counter = LibpqTraceCounter()
            if conns is None:
                async with PoolTracer(ledger.pool) as tracer:
                    await tracer.prime(1)
                    tracer.start(counter)
                    await run(20)
                    tracer.stop()
            else:
                trace_pg_connection(raw, counter)
                await run(20)
                untrace_pg_connection(raw)
            c = counter.count()
            counts[name] = (_statements(counter) / 20, c["round_trips"] / 20, c["durable"] / 20)
            counter.cleanup()
        print(f"load average {os.getloadavg()}; {args.batches} batches of {args.pairs} pairs, medians")
        print(f"{'':6}{'wall ms':>9}{'cpu ms':>8}{'server cpu ms':>15}{'stmts':>7}{'trips':>7}"
              f"{'commits':>8}")
        for name, got in rows.items():
            wall, cpu, server = (statistics.median(x[i] for x in got) for i in range(3))
            s, t, d = counts[name]
            print(f"{name:<6}{wall:>9.3f}{cpu:>8.3f}{server:>15.3f}{s:>7.1f}{t:>7.1f}{d:>8.1f}")
        if args.profile:
            prof = cProfile.Profile(time.process_time)
            prof.enable()
            await p.ours(args.pairs)
            prof.disable()
            _print_profile(prof, args.pairs, "pair")


def _print_profile(prof: cProfile.Profile, per: int, unit: str) -> None:
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out)
    stats.sort_stats("tottime").print_stats(35)
    stats.sort_stats("cumulative").print_stats(60)
    stats.sort_stats("cumulative").print_stats("langgraph_effects", 45)
    print(f"cProfile over {per} {unit}s (divide by {per}):")
    print(out.getvalue())


async def turns_main(args: argparse.Namespace) -> None:
    from scenarios import turn as bench_e2e

    async with fresh_pg_database(args.dsn) as dsn, bench_e2e.postgres_savers(dsn) as (_, saver):
        # node: ToolNode; middleware: the floor, a no-op middleware with the same hooks
        floor = args.path == "middleware"
        plain = bench_e2e.build_graph(
            path="floor" if floor else "node", effect=floor, fanout=args.fanout, latency_ms=0.0,
            saver=saver,
        )
        ours = bench_e2e.build_graph(
            path=args.path, effect=True, fanout=args.fanout, latency_ms=0.0, saver=saver
        )
        for _ in range(10):
            await bench_e2e.run_once(plain, "warm")
            await bench_e2e.run_once(ours, "warm")
        rows: dict[str, list[tuple[float, float]]] = {"floor": [], "ours": []}
        for _ in range(args.batches):
            rows["floor"].append(await bench_e2e.run_batch(plain, "t", args.turns))
            rows["ours"].append(await bench_e2e.run_batch(ours, "t", args.turns))
        counts = {}
        for name, graph in (("floor", plain), ("ours", ours)):
            ledger_c, ckpt_c = LibpqTraceCounter(), LibpqTraceCounter()
            async with PoolTracer(saver.ledger.pool) as tracer:
                await tracer.prime(args.fanout + 2)
                tracer.start(ledger_c)
                trace_pg_connection(saver.conn, ckpt_c)
                for _ in range(10):
                    await bench_e2e.run_once(graph, "count")
                untrace_pg_connection(saver.conn)
                tracer.stop()
            lc, cc = ledger_c.count(), ckpt_c.count()
            counts[name] = (
                _statements(ledger_c) / 10, lc["round_trips"] / 10, _statements(ckpt_c) / 10,
                cc["round_trips"] / 10,
            )
            ledger_c.cleanup()
            ckpt_c.cleanup()
        print(
            f"load average {os.getloadavg()}; {args.path}, fan-out {args.fanout}, "
            f"{args.batches} batches of {args.turns} turns, medians per turn"
        )
        print(f"{'':6}{'wall ms':>9}{'cpu ms':>8}{'ledger stmts':>14}{'trips':>7}{'ckpt stmts':>12}"
              f"{'trips':>7}")
        med = {}
        for name, got in rows.items():
            wall, cpu = (statistics.median(x[i] for x in got) for i in range(2))
            med[name] = (wall, cpu)
            s, t, cs, ct = counts[name]
            print(f"{name:<6}{wall:>9.2f}{cpu:>8.2f}{s:>14.1f}{t:>7.1f}{cs:>12.1f}{ct:>7.1f}")
        added = [
            statistics.median(o[i] - f[i] for o, f in zip(rows["ours"], rows["floor"], strict=True))
            for i in range(2)
        ]
        print(
            f"added per call: wall {added[0] / args.fanout:.2f} ms, CPU {added[1] / args.fanout:.2f} ms "
            "(median of per-batch differences)"
        )
        if args.profile:
            prof = cProfile.Profile(time.process_time)
            prof.enable()
            for _ in range(args.turns):
                await bench_e2e.run_once(ours, "prof")
            prof.disable()
            _print_profile(prof, args.turns, "turn")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("what", choices=["pairs", "turns"])
    parser.add_argument("--dsn", default=os.environ.get("LANGGRAPH_EFFECTS_TEST_PG_DSN", DEFAULT_PG_DSN))
    parser.add_argument("--pairs", type=int, default=400)
    parser.add_argument("--turns", type=int, default=20)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--path", choices=["node", "middleware"], default="node")
    parser.add_argument("--fanout", type=int, default=1)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    asyncio.run(pairs_main(args) if args.what == "pairs" else turns_main(args))


if __name__ == "__main__":
    sys.exit(main())
