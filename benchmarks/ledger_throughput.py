"""Ledger throughput with concurrent worker processes, Postgres and SQLite in one run.

    python benchmarks/ledger_throughput.py [--pairs 300] [--workers 1,4,8]
        [--backends sqlite,postgres] [--repeats 3] [--json out.json] [--dsn DSN]

One *pair* is what one effectful tool call costs the ledger: ``record_intents([op],
change=dispatch)`` (intent and dispatch marker in one commit) then
``transition(op, succeed)`` (the outcome, one commit), the row built by
``ledger_pairs.make_op`` so both benchmarks write the same rows.

For each backend and each worker count W, W separate **processes** each open their
own ledger (SQLite: their own connection to one shared file, WAL,
``synchronous=FULL``; Postgres: their own pool to one shared schema, the server's
``synchronous_commit``), warm up, then meet at a barrier and each write ``--pairs``
pairs as fast as they can. A repeat's figure is all W workers' pairs divided by the
wall time from the barrier to the last worker's finish; the figure reported is the
median of ``--repeats`` repeats. "Scaling" is that figure over the same backend's
1-worker figure (the smallest worker count if 1 is not measured).

Postgres: ``--dsn``, else env ``LANGGRAPH_EFFECTS_TEST_PG_DSN``, else
``postgresql://postgres@127.0.0.1:5432/test``. The ledger goes in a fresh schema,
dropped afterwards. If the server cannot be reached, that is said in one line and
the SQLite figures are still measured.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import os
import platform
import socket
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import psycopg

from langgraph_effects.ledger.base import Ledger, OperationQuery
from langgraph_effects.ledger.postgres import PostgresLedger
from langgraph_effects.ledger.sqlite import SqliteLedger
from langgraph_effects.operation import Change, Event, Owner, State

try:  # run as a script: benchmarks/ is on sys.path
    from ledger_pairs import make_op
except ImportError:  # imported as benchmarks.ledger_throughput
    from benchmarks.ledger_pairs import make_op

DEFAULT_DSN = "postgresql://postgres@127.0.0.1:5432/test"
WARMUP = 20
RESULT = b'{"id": "msg_123"}'


# -- one worker process -------------------------------------------------------------------


def _open(target: dict[str, str]) -> Any:
    if target["backend"] == "sqlite":
        return SqliteLedger.from_conn_string(target["path"])
    # One connection: a worker writes one pair at a time.
    return PostgresLedger.from_conn_string(target["dsn"], schema=target["schema"], min_size=1, max_size=1)


async def _pairs(ledger: Ledger, owner: Owner, prefix: str, n: int) -> list[float]:
    latencies: list[float] = []
    for i in range(n):
        op = make_op(f"{prefix}-{i}")
        start = time.perf_counter()
        dispatch = Change(Event.DISPATCH, owner=owner, lease_expires_at=time.time() + 30)
        [stored] = await ledger.record_intents([op], change=dispatch)
        done = await ledger.transition(
            op.op_id,
            Change(Event.SUCCEED, result=RESULT, result_type="json", evidence={"kind": "result"}),
            expected_version=stored.version,
        )
        latencies.append(time.perf_counter() - start)
        if stored.owner != owner or done.state is not State.CONFIRMED:
            raise RuntimeError(f"pair {op.op_id} did not go intent -> confirmed: {done.state}")
    return latencies


async def _worker_async(
    target: dict[str, str], run_id: str, wid: int, pairs: int, repeats: int, barrier: Any, out: Any
) -> None:
    owner = Owner(host=socket.gethostname(), pid=os.getpid(), started=0.0, token=f"{run_id}-{wid}")
    async with _open(target) as ledger:
        await _pairs(ledger, owner, f"{run_id}-w{wid}-warm", WARMUP)
        for rep in range(repeats):
            await asyncio.to_thread(barrier.wait)
            started = time.time()
            latencies = await _pairs(ledger, owner, f"{run_id}-w{wid}-r{rep}", pairs)
            out.put({"wid": wid, "rep": rep, "started": started, "finished": time.time(),
                     "latencies": latencies})


def worker(
    target: dict[str, str], run_id: str, wid: int, pairs: int, repeats: int, barrier: Any, out: Any
) -> None:
    try:
        asyncio.run(_worker_async(target, run_id, wid, pairs, repeats, barrier, out))
    except BaseException as error:
        barrier.abort()  # the others must not wait for this one forever
        out.put({"wid": wid, "error": f"{type(error).__name__}: {error}"})
        raise


# -- the parent -----------------------------------------------------------------------------


def measure(target: dict[str, str], workers: int, pairs: int, repeats: int) -> dict[str, Any]:
    """W processes, ``repeats`` barrier-started rounds of ``pairs`` pairs each."""
    ctx = multiprocessing.get_context("spawn")  # fresh interpreters: no inherited loops or pools
    barrier = ctx.Barrier(workers)
    out = ctx.Queue()
    run_id = f"{target['backend']}-{workers}-{uuid.uuid4().hex[:8]}"
    procs = [
        ctx.Process(target=worker, args=(target, run_id, w, pairs, repeats, barrier, out), daemon=True)
        for w in range(workers)
    ]
    for proc in procs:
        proc.start()
    rounds: dict[int, list[dict[str, Any]]] = {rep: [] for rep in range(repeats)}
    try:
        for _ in range(workers * repeats):
            item = out.get(timeout=600)
            if "error" in item:
                raise RuntimeError(f"{target['backend']} worker {item['wid']} failed: {item['error']}")
            rounds[item["rep"]].append(item)
    finally:
        for proc in procs:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()
    per_second: list[float] = []
    latencies: list[float] = []
    for rep in range(repeats):
        items = rounds[rep]
        wall = max(i["finished"] for i in items) - min(i["started"] for i in items)
        per_second.append(workers * pairs / wall)
        for i in items:
            latencies.extend(i["latencies"])
    ordered = sorted(latencies)
    return {
        "workers": workers,
        "pairs_per_second": statistics.median(per_second),
        "repeats_pairs_per_second": per_second,
        "pair_median_ms": statistics.median(ordered) * 1e3,
        "pair_p95_ms": ordered[int(0.95 * (len(ordered) - 1))] * 1e3,
    }


def postgres_problem(dsn: str) -> str | None:
    try:
        with psycopg.connect(dsn, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as error:
        return " ".join(f"{type(error).__name__}: {error}".split())
    return None


async def _setup(target: dict[str, str]) -> None:
    async with _open(target) as ledger:
        await ledger.setup()


def _count_rows(target: dict[str, str]) -> int:
    async def count() -> int:
        async with _open(target) as ledger:
            ops = await ledger.list_operations(OperationQuery(limit=10_000_000))
            return sum(1 for op in ops if op.state is State.CONFIRMED)

    return asyncio.run(count())


def run_backend(backend: str, args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    target: dict[str, str] = {"backend": backend}
    setting = ""
    if backend == "sqlite":
        target["path"] = str(workdir / "ledger.sqlite")
        setting = "WAL, synchronous=FULL, one shared file"
    else:
        target["dsn"] = args.dsn
        target["schema"] = f"lge_bench_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(args.dsn) as conn:
            sync = conn.execute("SHOW synchronous_commit").fetchone()
            version = conn.execute("SHOW server_version").fetchone()
        setting = f"server {version[0] if version else '?'}, synchronous_commit={sync[0] if sync else '?'}"
    asyncio.run(_setup(target))
    try:
        rows = []
        for w in args.workers:
            result = measure(target, w, args.pairs, args.repeats)
            rows.append(result)
            print(
                f"  {backend:<9}{w:>3} workers: {result['pairs_per_second']:>8.0f} pairs/s "
                f"(repeats: {', '.join(f'{x:.0f}' for x in result['repeats_pairs_per_second'])})",
                flush=True,
            )
        confirmed = _count_rows(target)
        expected = sum(w * (WARMUP + args.pairs * args.repeats) for w in args.workers)
        if confirmed != expected:
            raise RuntimeError(f"{backend}: {confirmed} confirmed operations, expected {expected}")
    finally:
        if backend == "postgres":
            with psycopg.connect(args.dsn, autocommit=True) as conn:
                conn.execute(f'DROP SCHEMA IF EXISTS "{target["schema"]}" CASCADE')
    base = next((r for r in rows if r["workers"] == 1), rows[0])
    for r in rows:
        r["scaling"] = r["pairs_per_second"] / base["pairs_per_second"]
        r["scaling_base_workers"] = base["workers"]
    return {"backend": backend, "setting": setting, "rows": rows, "confirmed_rows": confirmed}


def _loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


def print_table(report: dict[str, Any]) -> None:
    setup = report["setup"]
    print(
        f"\nLedger throughput: intent+outcome pairs per second, {setup['pairs']} pairs per worker, "
        f"median of {setup['repeats']} repeats; {setup['cpus']} CPUs, Python {setup['python']}; "
        f"load average before {setup['loadavg_before']}, after {setup['loadavg_after']}"
    )
    header = (
        f"{'backend':<10}{'workers':>8}{'pairs/s':>10}{'ops/s':>9}{'scaling':>9}"
        f"{'pair ms p50':>13}{'p95':>8}"
    )
    print(header)
    print("-" * len(header))
    for result in report["backends"]:
        for r in result["rows"]:
            print(
                f"{result['backend']:<10}{r['workers']:>8}{r['pairs_per_second']:>10.0f}"
                f"{r['pairs_per_second'] * 2:>9.0f}{r['scaling']:>8.2f}x"
                f"{r['pair_median_ms']:>13.2f}{r['pair_p95_ms']:>8.2f}"
            )
    for result in report["backends"]:
        print(f"{result['backend']}: {result['setting']}")
    for backend, problem in report["skipped"].items():
        print(f"{backend}: not measured ({problem})")
    print("ops/s counts the two ledger writes of a pair (intent+dispatch, outcome) separately.")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--pairs", type=int, default=300, help="pairs per worker per repeat (300)")
    parser.add_argument("--workers", default="1,4,8", help="worker counts, comma-separated (1,4,8)")
    parser.add_argument("--backends", default="sqlite,postgres", help="sqlite,postgres")
    parser.add_argument("--repeats", type=int, default=3, help="repeats per figure (3)")
    parser.add_argument("--json", type=Path, help="also write the results here")
    parser.add_argument(
        "--dsn", default=os.environ.get("LANGGRAPH_EFFECTS_TEST_PG_DSN", DEFAULT_DSN), help="Postgres DSN"
    )
    parser.add_argument("--dir", help="directory for the SQLite file (default: a fresh temp dir)")
    args = parser.parse_args(argv)
    try:
        args.workers = sorted({int(w) for w in args.workers.split(",") if w.strip()})
    except ValueError:
        parser.error("--workers takes comma-separated integers, e.g. 1,4,8")
    backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    if not backends or set(backends) - {"sqlite", "postgres"}:
        parser.error("--backends takes sqlite and/or postgres")
    if args.pairs < 1 or args.repeats < 1 or not args.workers or min(args.workers) < 1:
        parser.error("--pairs, --repeats and every worker count must be at least 1")

    report: dict[str, Any] = {
        "setup": {
            "pairs": args.pairs,
            "repeats": args.repeats,
            "workers": args.workers,
            "warmup_pairs": WARMUP,
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "loadavg_before": _loadavg(),
        },
        "backends": [],
        "skipped": {},
    }
    with tempfile.TemporaryDirectory(prefix="lge-throughput-", dir=args.dir) as tmp:
        for backend in backends:
            if backend == "postgres":
                problem = postgres_problem(args.dsn)
                if problem is not None:
                    line = f"PostgreSQL is not reachable at {args.dsn} ({problem}); skipping it"
                    print(line, flush=True)
                    report["skipped"]["postgres"] = line
                    continue
            print(f"{backend}:", flush=True)
            report["backends"].append(run_backend(backend, args, Path(tmp)))
    report["setup"]["loadavg_after"] = _loadavg()
    print_table(report)
    if args.json:
        args.json.write_text(json.dumps(report, indent=2, sort_keys=True) + "\n")
        print(f"\nwrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
