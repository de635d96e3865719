"""Ledger throughput with concurrent worker processes, Postgres and SQLite in one run
(scenario ``ledger_throughput``).

    python benchmarks/run.py ledger_throughput [--pairs 300] [--workers 1,4,8]
        [--backends sqlite,postgres] [--repeats 3] [--json out.json] [--postgres-dsn DSN]

One *pair* is what one effectful tool call costs the ledger: ``record_intents([op],
change=dispatch)`` (intent and dispatch marker in one commit) then
``transition(op, succeed)`` (the outcome, one commit), on the row
``ledger_pairs.make_op`` builds, so both benchmarks write the same rows.

Each backend gets max(W) worker **processes**, each with its own ledger (SQLite: its
own connection to one shared file, WAL, ``synchronous=FULL``; Postgres: its own
one-connection pool to one shared schema, at the server's ``synchronous_commit``).
They connect and warm up once, then the parent runs rounds: in a round, the first
W workers start together (a start time a moment ahead, sent to each) and each
writes ``--pairs`` pairs as fast as it can; the round's figure is all their pairs
divided by the wall time from the start to the last worker's finish. Rounds are
interleaved (repeat, then worker count, then backend), so load drifting on the
machine touches every figure alike; each reported figure is the median of
``--repeats`` rounds. "Scaling" is a figure over the same backend's 1-worker figure
(the smallest worker count if 1 is not measured). The load average before and
after is printed: on a shared machine, read the figures with it.

With Postgres, a baseline is measured in the same run, interleaved round by round:
``pg-raw``, the same workers writing a plain two-commit pair through psycopg (an
``INSERT`` committed, then an ``UPDATE`` committed: two autocommit statements, one
round trip each) to a table of their own; the table shows the ledger's figure over it
("vs raw": ratio of medians of pairs/s with a paired bootstrap interval, and the
worker CPU per pair over raw's, whose issue-32 target is at most 2x). Workers pass the
row they hold to the outcome (``before=``) when the ledger accepts it, as the engine
does. Postgres: the runner's ``--postgres-dsn``; the ledger goes in a fresh schema,
dropped afterwards. If the server cannot be reached, that is said in one line and
SQLite is still measured.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import inspect
import json
import multiprocessing
import os
import platform
import queue
import socket
import statistics
import tempfile
import threading
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import psycopg
import stats
from psycopg.conninfo import make_conninfo

from langgraph_effects.core.operation import Change, Event, Owner, State
from langgraph_effects.ledger.base import Ledger, OperationQuery
from langgraph_effects.ledger.postgres import PostgresLedger
from langgraph_effects.ledger.sqlite import SqliteLedger
from scenarios import opt, section
from scenarios.ledger_pairs import make_op

WARMUP = 20
RESULT = b'{"id": "msg_123"}'
START_AHEAD = 0.3  # seconds between sending a round's start time and the start itself
TIMEOUT = 900.0  # seconds to wait for any one worker message before giving up


# -- one worker process -------------------------------------------------------------------


def _open(target: dict[str, str]) -> Any:
    if target["backend"] == "sqlite":
        return SqliteLedger.from_conn_string(target["path"])
    if target["backend"] == "pg-raw":
        return _raw_connection(target["dsn"])
    # One connection: a worker writes one pair at a time.
    return PostgresLedger.from_conn_string(target["dsn"], schema=target["schema"], min_size=1, max_size=1)


async def _pairs(ledger: Ledger, owner: Owner, prefix: str, n: int) -> list[float]:
    latencies: list[float] = []
    optimistic = "before" in inspect.signature(ledger.transition).parameters
    for i in range(n):
        op = make_op(f"{prefix}-{i}")
        start = time.perf_counter()
        dispatch = Change(Event.DISPATCH, owner=owner, lease_expires_at=time.time() + 30)
        [stored] = await ledger.record_intents([op], change=dispatch)
        succeed = Change(Event.SUCCEED, result=RESULT, result_type="json", evidence={"kind": "result"})
        extra: dict[str, Any] = {"before": stored} if optimistic else {}
        done = await ledger.transition(op.op_id, succeed, expected_version=stored.version, **extra)
        latencies.append(time.perf_counter() - start)
        if stored.owner != owner or done.state is not State.CONFIRMED:
            raise RuntimeError(f"pair {op.op_id} did not go intent -> confirmed: {done.state}")
    return latencies


@contextlib.asynccontextmanager
async def _raw_connection(dsn: str) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
        yield conn


async def _raw_pairs(conn: psycopg.AsyncConnection[Any], schema: str, prefix: str, n: int) -> list[float]:
    """The baseline: one row inserted (commit), then updated (commit)."""
    latencies: list[float] = []
    body = json.dumps(make_op("raw").args)
    insert = f'INSERT INTO "{schema}".bench_raw (id, state, body) VALUES (%s, %s, %s)'
    update = f'UPDATE "{schema}".bench_raw SET state = %s, result = %s WHERE id = %s'
    for i in range(n):
        key = f"{prefix}-{i}"
        start = time.perf_counter()
        await conn.execute(insert, [key, "dispatched", body])
        await conn.execute(update, ["confirmed", RESULT, key])
        latencies.append(time.perf_counter() - start)
    return latencies


async def _worker_async(target: dict[str, str], wid: int, commands: Any, out: Any) -> None:
    token = f"{target['backend']}-{wid}-{uuid.uuid4().hex[:8]}"
    owner = Owner(host=socket.gethostname(), pid=os.getpid(), started=0.0, token=token)
    async with _open(target) as ledger:
        if target["backend"] == "pg-raw":
            run = functools.partial(_raw_pairs, ledger, target["schema"])
        else:
            run = functools.partial(_pairs, ledger, owner)
        await run(f"{token}-warm", WARMUP)
        out.put({"wid": wid, "ready": True})
        while True:
            command = await asyncio.to_thread(commands.get)
            if command is None:
                return
            tag, pairs, start_at = command
            await asyncio.sleep(max(0.0, start_at - time.time()))
            started, cpu = time.time(), time.process_time()
            latencies = await run(f"{token}-{tag}", pairs)
            out.put({"wid": wid, "tag": tag, "started": started, "finished": time.time(),
                     "cpu": time.process_time() - cpu, "latencies": latencies})


def worker(target: dict[str, str], wid: int, commands: Any, out: Any) -> None:
    try:
        asyncio.run(_worker_async(target, wid, commands, out))
    except BaseException as error:
        out.put({"wid": wid, "error": f"{type(error).__name__}: {error}"})
        raise


# -- the parent -----------------------------------------------------------------------------


class Fleet:
    """``size`` worker processes on one backend, started once and driven round by round."""

    def __init__(self, target: dict[str, str], size: int) -> None:
        ctx = multiprocessing.get_context("spawn")  # fresh interpreters: no inherited loops or pools
        self.target = target
        self.out = ctx.Queue()
        self.commands = [ctx.Queue() for _ in range(size)]
        self.procs = [
            ctx.Process(target=worker, args=(target, w, self.commands[w], self.out), daemon=True)
            for w in range(size)
        ]
        for proc in self.procs:
            proc.start()

    def _get(self) -> dict[str, Any]:
        try:
            item: dict[str, Any] = self.out.get(timeout=TIMEOUT)
        except queue.Empty:
            raise RuntimeError(f"{self.target['backend']}: no word from a worker in {TIMEOUT:.0f}s") from None
        if "error" in item:
            raise RuntimeError(f"{self.target['backend']} worker {item['wid']} failed: {item['error']}")
        return item

    def wait_ready(self) -> None:
        for _ in self.procs:
            self._get()

    def round(self, workers: int, pairs: int, tag: str) -> dict[str, Any]:
        """The first ``workers`` workers write ``pairs`` pairs each, starting together."""
        start_at = time.time() + START_AHEAD
        for w in range(workers):
            self.commands[w].put((tag, pairs, start_at))
        sampler = WaitSampler(self.target) if self.target["backend"] != "sqlite" else None
        time.sleep(max(0.0, start_at - time.time()))
        machine0, server0 = machine_cpu(), server_cpu()
        try:
            items = [self._get() for _ in range(workers)]
        finally:
            waits = sampler.stop() if sampler is not None else None
        machine1, server1 = machine_cpu(), server_cpu()
        wall = max(i["finished"] for i in items) - min(i["started"] for i in items)
        n = workers * pairs
        busy, total = machine1[0] - machine0[0], machine1[1] - machine0[1]
        return {
            "per_second": n / wall,
            "latencies": [x for i in items for x in i["latencies"]],
            "worker_cpu_ms": sum(i["cpu"] for i in items) / n * 1e3,
            "server_cpu_ms": (server1 - server0) / n * 1e3
            if self.target["backend"] != "sqlite" and server0 is not None and server1 is not None
            else None,
            "machine_busy": busy / total if total > 0 else None,
            "waits": waits,
        }

    def close(self) -> None:
        for q in self.commands:
            q.put(None)
        for proc in self.procs:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()


class WaitSampler:
    """Samples what the workers' Postgres connections are doing, every ``interval`` s.

    Each sample of a worker connection is counted under ``Lock`` (a heavyweight lock:
    row, tuple, transaction, advisory: workers serialising on each other), ``LWLock``
    or ``IO`` (e.g. WAL insert/flush: the commit path), ``CPU`` (active, no wait),
    ``client`` (idle inside a transaction: the worker's own code between statements),
    or any other wait type under Postgres' own name; ``idle`` (between transactions)
    is not counted. The sampler's own queries add a little to the server CPU figure.
    """

    def __init__(self, target: dict[str, str], interval: float = 0.02) -> None:
        self.counts: Counter[str] = Counter()
        self._app = target["app"]
        self._stop = threading.Event()
        self._conn = psycopg.connect(target["dsn"], autocommit=True, application_name="lge-bench-sampler")
        self._thread = threading.Thread(target=self._run, args=(interval,), daemon=True)
        self._thread.start()

    def _run(self, interval: float) -> None:
        sql = (
            "SELECT state, wait_event_type FROM pg_stat_activity "
            "WHERE application_name = %s AND state <> 'idle'"
        )
        while not self._stop.wait(interval):
            for state, wait_type in self._conn.execute(sql, [self._app]).fetchall():
                if state == "active":
                    self.counts[wait_type or "CPU"] += 1
                else:
                    self.counts["client"] += 1

    def stop(self) -> dict[str, int]:
        self._stop.set()
        self._thread.join()
        self._conn.close()
        return dict(self.counts)



_TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def machine_cpu() -> tuple[float, float]:
    """(busy, total) CPU seconds of the whole machine so far (Linux; zeros elsewhere)."""
    try:
        with open("/proc/stat") as f:
            fields = [float(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return 0.0, 0.0
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0.0)  # idle + iowait
    total = sum(fields[:8])  # guest time is already counted in user
    return (total - idle) / _TICK, total / _TICK


def server_cpu() -> float | None:
    """CPU seconds used so far by every ``postgres`` process on this machine, or ``None``.

    Only meaningful when the server runs here; it also counts other clients' work.
    """
    seen = False
    ticks = 0.0
    for entry in os.scandir("/proc") if os.path.isdir("/proc") else []:
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        name = stat[stat.find("(") + 1 : stat.rfind(")")]
        if name != "postgres":
            continue
        fields = stat[stat.rfind(")") + 2 :].split()
        ticks += float(fields[11]) + float(fields[12])  # utime + stime
        seen = True
    return ticks / _TICK if seen else None


def prepare(backend: str, args: argparse.Namespace, workdir: Path) -> tuple[dict[str, str], str]:
    """Where the backend's ledger lives (set up, empty) and a line describing it."""
    target: dict[str, str] = {"backend": backend}
    if backend == "sqlite":
        target["path"] = str(workdir / "ledger.sqlite")
        setting = "WAL, synchronous=FULL, one shared file"
    else:
        # Tagged, so the wait sampler finds exactly the workers' connections.
        target["app"] = f"lge-bench-{uuid.uuid4().hex[:8]}"
        target["dsn"] = make_conninfo(args.dsn, application_name=target["app"])
        target["schema"] = f"lge_bench_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(args.dsn) as conn:
            sync = conn.execute("SHOW synchronous_commit").fetchone()
            version = conn.execute("SHOW server_version").fetchone()
        setting = (
            f"server {version[0] if version else '?'}, synchronous_commit={sync[0] if sync else '?'}, "
            "one shared schema, one connection per worker"
        )

    if backend == "pg-raw":
        setting = setting.replace("one connection per worker", "autocommit INSERT then UPDATE, one table")
        with psycopg.connect(args.dsn, autocommit=True) as conn:
            conn.execute(f'CREATE SCHEMA "{target["schema"]}"')
            conn.execute(
                f'CREATE TABLE "{target["schema"]}".bench_raw '
                "(id text PRIMARY KEY, state text NOT NULL, body text, result bytea)"
            )
        return target, setting

    async def setup() -> None:
        async with _open(target) as ledger:
            await ledger.setup()

    asyncio.run(setup())
    return target, setting


def confirmed_rows(target: dict[str, str]) -> int:
    if target["backend"] == "pg-raw":
        with psycopg.connect(target["dsn"]) as conn:
            sql = f'SELECT count(*) FROM "{target["schema"]}".bench_raw WHERE state = %s'
            row = conn.execute(sql, ["confirmed"]).fetchone()
            return int(row[0]) if row else 0

    async def count() -> int:
        async with _open(target) as ledger:
            ops = await ledger.list_operations(OperationQuery(limit=10_000_000))
            return sum(1 for op in ops if op.state is State.CONFIRMED)

    return asyncio.run(count())


def drop(target: dict[str, str]) -> None:
    if target["backend"] != "sqlite":
        with psycopg.connect(target["dsn"], autocommit=True) as conn:
            conn.execute(f'DROP SCHEMA IF EXISTS "{target["schema"]}" CASCADE')


def measure(args: argparse.Namespace, backends: list[str], workdir: Path, log: Any) -> list[dict[str, Any]]:
    size = max(args.workers)
    targets: dict[str, dict[str, str]] = {}
    settings: dict[str, str] = {}
    fleets: dict[str, Fleet] = {}
    rounds: dict[tuple[str, int], list[dict[str, Any]]] = {}
    try:
        for backend in backends:
            targets[backend], settings[backend] = prepare(backend, args, workdir)
            fleets[backend] = Fleet(targets[backend], size)
        for fleet in fleets.values():
            fleet.wait_ready()
        for rep in range(args.repeats):
            for w in args.workers:
                for backend in backends:
                    result = fleets[backend].round(w, args.pairs, f"r{rep}-w{w}")
                    rounds.setdefault((backend, w), []).append(result)
                    line = (
                        f"  repeat {rep + 1}: {backend:<9}{w:>3} workers "
                        f"{result['per_second']:>8.0f} pairs/s"
                    )
                    log(line)
        for fleet in fleets.values():
            fleet.close()
        results = []
        for backend in backends:
            rows = []
            for w in args.workers:
                done = rounds[(backend, w)]
                ordered = sorted(x for r in done for x in r["latencies"])
                rows.append(
                    {
                        "workers": w,
                        "pairs_per_second": statistics.median(r["per_second"] for r in done),
                        "repeats_pairs_per_second": [r["per_second"] for r in done],
                        "pair_median_ms": statistics.median(ordered) * 1e3,
                        "pair_p95_ms": ordered[int(0.95 * (len(ordered) - 1))] * 1e3,
                        "worker_cpu_ms_per_pair": _median([r["worker_cpu_ms"] for r in done]),
                        "server_cpu_ms_per_pair": _median([r["server_cpu_ms"] for r in done]),
                        "machine_busy": _median([r["machine_busy"] for r in done]),
                        "wait_samples": _sum_counts([r["waits"] for r in done]),
                    }
                )
            base = next((r for r in rows if r["workers"] == 1), rows[0])
            for r in rows:
                r["scaling"] = r["pairs_per_second"] / base["pairs_per_second"]
                r["scaling_base_workers"] = base["workers"]
            # Every pair really went intent -> confirmed, and nothing else is in the ledger.
            confirmed = confirmed_rows(targets[backend])
            expected = size * WARMUP + args.repeats * args.pairs * sum(args.workers)
            if confirmed != expected:
                raise RuntimeError(f"{backend}: {confirmed} confirmed operations, expected {expected}")
            results.append(
                {"backend": backend, "setting": settings[backend], "rows": rows, "confirmed_rows": confirmed}
            )
        return results
    finally:
        for fleet in fleets.values():
            for proc in fleet.procs:
                if proc.is_alive():
                    proc.kill()
        for target in targets.values():
            drop(target)


def _sum_counts(counts: list[dict[str, int] | None]) -> dict[str, int] | None:
    known = [c for c in counts if c is not None]
    if not known:
        return None
    total: Counter[str] = Counter()
    for c in known:
        total.update(c)
    return dict(total)


def _shares(counts: dict[str, int] | None) -> str:
    """``Lock 0% LWLock 3% IO 20% ...`` with Lock always shown first."""
    if not counts:
        return ""
    n = sum(counts.values())
    order = ["Lock", *sorted((k for k in counts if k != "Lock"), key=lambda k: -counts[k])]
    return " ".join(f"{k} {counts.get(k, 0) / n:.0%}" for k in order)


def _median(values: list[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return statistics.median(known) if known else None


def _fmt(value: float | None, spec: str, scale: float = 1.0) -> str:
    return "-" if value is None else format(value * scale, spec)


def _loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return None


TARGET_CPU_VS_RAW = 2.0  # issue 32: the ledger's worker CPU per pair, over the bare pair's


def _versus_raw(report: dict[str, Any]) -> list[str]:
    rows = {(b["backend"], r["workers"]): r for b in report["backends"] for r in b["rows"]}
    lines = []
    for (backend, workers), ours in sorted(rows.items()):
        raw = rows.get(("pg-raw", workers))
        if backend != "postgres" or raw is None:
            continue
        found = stats.compare(
            stats.benchmark(f"ledger/{workers}", ours["repeats_pairs_per_second"]),
            stats.benchmark(f"raw/{workers}", raw["repeats_pairs_per_second"]),
        )
        low, high = found["ratio_ci95"]
        ours_cpu, raw_cpu = ours["worker_cpu_ms_per_pair"], raw["worker_cpu_ms_per_pair"]
        cpu_ratio = ours_cpu / raw_cpu if ours_cpu and raw_cpu else None
        verdict = "" if cpu_ratio is None else (
            f" (target <= {TARGET_CPU_VS_RAW:g}x {'met' if cpu_ratio <= TARGET_CPU_VS_RAW else 'MISSED'})"
        )
        ours["vs_raw"], ours["vs_raw_ci"], ours["cpu_vs_raw"] = found["ratio"], [low, high], cpu_ratio
        lines.append(
            f"{workers} workers: {found['ratio']:.2f}x [{low:.2f}, {high:.2f}] of "
            f"{raw['pairs_per_second']:.0f} pairs/s; worker CPU per pair "
            f"{'-' if cpu_ratio is None else f'{cpu_ratio:.2f}x'}{verdict}"
        )
    return lines


def table_lines(report: dict[str, Any]) -> list[str]:
    lines: list[str] = []
    print = lines.append
    setup = report["setup"]
    print(
        f"\nLedger throughput: intent+outcome pairs per second, {setup['pairs']} pairs per worker, "
        f"median of {setup['repeats']} repeats\n{setup['cpus']} CPUs, Python {setup['python']}; "
        f"load average before {setup['loadavg_before']}, after {setup['loadavg_after']}\n"
    )
    header = (
        f"{'backend':<10}{'workers':>8}{'pairs/s':>9}{'scaling':>9}{'pair ms p50':>12}{'p95':>8}"
        f"{'cpu ms/pair: workers':>22}{'server':>8}{'busy':>6}   repeats (pairs/s)"
    )
    print(header)
    print("-" * len(header))
    for result in report["backends"]:
        for r in result["rows"]:
            repeats = ", ".join(f"{x:.0f}" for x in r["repeats_pairs_per_second"])
            print(
                f"{result['backend']:<10}{r['workers']:>8}{r['pairs_per_second']:>9.0f}"
                f"{r['scaling']:>8.2f}x{r['pair_median_ms']:>12.2f}{r['pair_p95_ms']:>8.2f}"
                f"{_fmt(r['worker_cpu_ms_per_pair'], '.2f'):>22}{_fmt(r['server_cpu_ms_per_pair'], '.2f'):>8}"
                f"{_fmt(r['machine_busy'], '.0%'):>6}   {repeats}"
            )
    print(
        "\ncpu ms/pair: CPU time per pair in the worker processes and in the local postgres "
        "processes;\nbusy: the whole machine's CPU use during the rounds (other programs included)."
    )
    waits = [
        (result["backend"], r) for result in report["backends"] for r in result["rows"] if r["wait_samples"]
    ]
    if waits:
        print(
            "\nWhere the Postgres workers' connections were, sampled every 20 ms (Lock = waiting for "
            "another\nworker's row/transaction/advisory lock; client = idle in a transaction, the "
            "worker's own code):"
        )
        for backend, r in waits:
            print(f"  {backend} {r['workers']} workers: {_shares(r['wait_samples'])}")
    versus = _versus_raw(report)
    if versus:
        print(
            "\nThe ledger against the plain two-commit pair (pg-raw), round by round in the same run:\n"
            "ratio of pairs/s (median of the per-repeat ratios, bootstrap 95% CI) and of worker CPU per pair:"
        )
        for line in versus:
            print(f"  {line}")
    print("")
    for result in report["backends"]:
        print(f"{result['backend']}: {result['setting']}")
    for backend, problem in report["skipped"].items():
        print(f"{backend}: not measured ({problem})")
    print(
        "A pair is two durable commits: intent+dispatch marker, then the outcome "
        "(pg-raw: INSERT, then UPDATE)."
    )
    return "\n".join(lines).splitlines()


CONFIGURATIONS = ("sqlite", "postgres", "pg-raw")
QUICK = ["--pairs", "5", "--workers", "1,2"]


def options(group: Any) -> None:
    group.add_argument("--pairs", type=int, default=300, help="pairs per worker per round (300)")
    group.add_argument("--workers", default="1,4,8", help="worker counts, comma-separated (1,4,8)")
    group.add_argument("--backends", default="sqlite,postgres", help="sqlite,postgres (both)")
    # --repeats (3 here), --postgres-dsn and --dir are the runner's own options


def check(args: Any) -> str | None:
    try:
        workers = sorted({int(w) for w in args.workers.split(",") if w.strip()})
    except ValueError:
        return "--workers takes comma-separated integers, e.g. 1,4,8"
    backends = {b.strip() for b in args.backends.split(",") if b.strip()}
    if not backends or backends - {"sqlite", "postgres"}:
        return "--backends takes sqlite and/or postgres"
    if args.pairs < 1 or not workers or min(workers) < 1:
        return "--pairs and every worker count must be at least 1"
    return None


async def run(args: Any, ctx: Any) -> dict[str, Any]:
    shim = argparse.Namespace(
        pairs=opt(args, "pairs", 300),
        workers=sorted({int(w) for w in opt(args, "workers", "1,4,8").split(",") if w.strip()}),
        repeats=getattr(args, "repeats_given", None) or 3,
        dsn=ctx.dsn,
    )
    backends = list(dict.fromkeys(b.strip() for b in opt(args, "backends", "sqlite,postgres").split(",")))
    report: dict[str, Any] = {
        "setup": {
            "pairs": shim.pairs, "repeats": shim.repeats, "workers": shim.workers, "warmup_pairs": WARMUP,
            "cpus": os.cpu_count(), "python": platform.python_version(), "platform": platform.platform(),
            "loadavg_before": _loadavg(),
        },
        "backends": [],
        "skipped": {},
    }
    if "postgres" in backends:
        if ctx.pg_skip is not None:
            report["skipped"]["postgres"] = f"PostgreSQL skipped ({ctx.pg_skip}); measuring SQLite only"
            backends.remove("postgres")
        else:
            backends.append("pg-raw")  # the baseline, interleaved with the ledger's rounds
    if backends:
        with tempfile.TemporaryDirectory(prefix="lge-throughput-", dir=ctx.workdir) as tmp:
            report["backends"] = await asyncio.to_thread(measure, shim, backends, Path(tmp), ctx.log)
    report["setup"]["loadavg_after"] = _loadavg()
    return section("ledger_throughput", table_lines(report), **report)
