"""What safety costs: langgraph-effects measured against plain LangGraph and its targets.

    python benchmarks/run.py                          # the full run (several minutes)
    python benchmarks/run.py --quick                  # a small smoke run (CI)
    python benchmarks/run.py --only middleware,sqlite # one row group, to iterate on it
    python benchmarks/run.py --json out.json --repeats 101 --postgres-dsn postgresql://...

Prints a table and writes every figure to JSON; progress goes to stderr. Each timing is
a median of repeated batches, and each overhead the ratio of the medians against a
baseline measured in the same process, interleaved with it (AB BA ...), with a paired
bootstrap 95% confidence interval and the same ratio for CPU time beside it (these
machines are noisy: an absolute time alone means little).

* one agent turn, both paths: ``EffectToolNode`` vs ``ToolNode`` (a ``StateGraph``
  agent loop) and ``EffectMiddleware`` vs plain ``create_agent``; SQLite (same file)
  and Postgres (same database); a zero-latency tool and a 5 ms tool; fan-out 1 and 8;
  each row with its target, met or MISSED;
* per path and backend, counted: durable ledger commits and ledger round trips per
  call (at the ledger's connection or pool), checkpoint commits and graph steps per
  turn for the baseline and for ours;
* time to find unresolved operations among 1,000,000 (``--quick``: 20,000);
* memory per 10,000 recorded operations (``InMemoryLedger``) and SQLite file growth;
* where a SQLite target is missed: a profile of that path's turn.

``--only`` takes comma-separated words that narrow the run: sections (``timing``,
``counts``, ``scan``, ``memory``), paths (``node``, ``middleware``), backends
(``sqlite``, ``postgres``), tools (``0ms``, ``5ms``), fan-outs (``fanout1``,
``fanout8``). Words of one kind add up; kinds narrow each other; naming only rows
(no section) runs timing and counts for them.

Postgres parts run against ``--postgres-dsn`` (default: env
``LANGGRAPH_EFFECTS_TEST_PG_DSN`` or ``postgresql://postgres@127.0.0.1:5432/test``) in a
fresh database that is dropped afterwards; they are skipped, with a line saying why,
when no server answers. Separate scripts: the ledger-only throughput benchmarks
``benchmarks/ledger_pairs.py`` and ``benchmarks/ledger_throughput.py``; where a turn's
added time goes (the saver, on Postgres its fence's triggers apart, the protocol's
Python, the ledger's commits), ``benchmarks/turn_split.py``; what one runner per
thread costs a save, ``benchmarks/fencing.py``; what a turn leaves for Python's
garbage collector, ``benchmarks/gc_churn.py``; what reusing dispatch lock files
saves, ``benchmarks/lease_files.py``; what any middleware costs ``create_agent``, hook
by hook, and what ``EffectMiddleware`` adds over that floor, ``benchmarks/floor_split.py``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import json
import os
import platform
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

# This checkout's package (not another one installed in the environment) and its modules.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_counts
import bench_e2e
import bench_ledger
import bench_profile
import bench_report
from bench_common import DEFAULT_PG_DSN, fresh_pg_database, pg_problem

import langgraph_effects

ROOT = Path(__file__).resolve().parents[1]

def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def redact(dsn: str) -> str:
    try:
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        params = conninfo_to_dict(dsn)
        if "password" in params:
            params["password"] = "***"
        return make_conninfo(**{k: str(v) for k, v in params.items()})
    except Exception:
        return "<dsn>"


def command_line(argv: list[str]) -> str:
    """The command as run, with any password in a DSN masked."""
    shown: list[str] = []
    after_dsn = False
    for arg in argv:
        if after_dsn:
            arg, after_dsn = redact(arg), False
        elif arg == "--postgres-dsn":
            after_dsn = True
        elif arg.startswith("--postgres-dsn="):
            arg = "--postgres-dsn=" + redact(arg.split("=", 1)[1])
        shown.append(arg)
    return " ".join(["python", "benchmarks/run.py", *shown])


def git_state() -> dict[str, Any]:
    """The commit measured, and whether the work tree differed from it (read-only git)."""
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "langgraph_effects"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return {"commit": None, "package_modified": None}
    return {"commit": commit or None, "package_modified": bool(dirty)}


def version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "-"


# -- what to run -----------------------------------------------------------------------------

SECTIONS = ("e2e", "counts", "scan", "memory")
_SECTION_WORDS = {"e2e": "e2e", "timing": "e2e", "counts": "counts", "commits": "counts",
                  "scan": "scan", "memory": "memory"}
_LATENCIES = {"0ms": 0.0, "5ms": 5.0}
_FANOUTS = {"fanout1": 1, "fanout8": 8}


@dataclass
class Only:
    """What ``--only`` leaves in (everything by default)."""

    sections: set[str] = field(default_factory=lambda: set(SECTIONS))
    paths: tuple[str, ...] = bench_e2e.PATHS
    backends: tuple[str, ...] = bench_e2e.BACKENDS
    latencies: tuple[float, ...] = (0.0, 5.0)
    fanouts: tuple[int, ...] = (1, 8)

    @classmethod
    def parse(cls, text: str | None) -> Only:
        only = cls()
        if not text:
            return only
        words = [w.strip().lower() for w in text.split(",") if w.strip()]
        unknown = [
            w for w in words
            if w not in _SECTION_WORDS and w not in bench_e2e.PATHS and w not in bench_e2e.BACKENDS
            and w not in _LATENCIES and w not in _FANOUTS
        ]
        if unknown:
            known = [*_SECTION_WORDS, *bench_e2e.PATHS, *bench_e2e.BACKENDS, *_LATENCIES, *_FANOUTS]
            raise ValueError(f"--only: unknown {', '.join(unknown)} (known: {', '.join(known)})")
        sections = {_SECTION_WORDS[w] for w in words if w in _SECTION_WORDS}
        rows_named = any(w not in _SECTION_WORDS for w in words)
        only.sections = sections or ({"e2e", "counts"} if rows_named else set(SECTIONS))

        def pick(allowed: tuple[Any, ...], chosen: list[Any]) -> tuple[Any, ...]:
            return tuple(x for x in allowed if x in chosen) if chosen else allowed

        only.paths = pick(bench_e2e.PATHS, [w for w in words if w in bench_e2e.PATHS])
        only.backends = pick(bench_e2e.BACKENDS, [w for w in words if w in bench_e2e.BACKENDS])
        only.latencies = pick((0.0, 5.0), [_LATENCIES[w] for w in words if w in _LATENCIES])
        only.fanouts = pick((1, 8), [_FANOUTS[w] for w in words if w in _FANOUTS])
        return only

    def scenarios(self, backend: str) -> list[bench_e2e.Scenario]:
        return [
            bench_e2e.Scenario(path, backend, latency, fanout)
            for path in self.paths
            for latency in self.latencies
            for fanout in self.fanouts
        ]


def settings_for(args: argparse.Namespace) -> dict[str, Any]:
    quick = args.quick
    return {
        "quick": quick,
        # Short batches, many of them: a pair of adjacent batches sees the same machine load.
        "repeats": args.repeats or (3 if quick else 51),
        "runs_per_batch": args.runs or 2,
        "count_runs": 2 if quick else 20,
        "profile_runs": 3 if quick else 60,
        "scan_rows": args.rows or (20_000 if quick else bench_report.TARGET_SCAN_ROWS),
        "scan_unresolved": 1_000,
        # A small ledger with the same 1,000 unresolved rows: the scan is O(result), not O(history).
        "scan_reference_rows": [] if quick else [20_000],
        "scan_repeats": 5 if quick else 25,
        "memory_ops": 2_000 if quick else 10_000,
    }


# -- the run ---------------------------------------------------------------------------------


def _fdatasync_ms(where: Path | None, samples: int = 50) -> float | None:
    """The median time of one 4 KiB write + ``fdatasync`` where the SQLite files go: a
    commit's floor on this disk, printed so two runs' machines can be compared."""
    if not hasattr(os, "fdatasync"):
        return None
    with tempfile.NamedTemporaryFile(dir=where, prefix="lge-fsync-") as fh:
        times = []
        for _ in range(samples):
            os.write(fh.fileno(), b"x" * 4096)
            start = time.perf_counter()
            os.fdatasync(fh.fileno())
            times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def _meta(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "started": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "loadavg_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
        "fdatasync_ms": _fdatasync_ms(Path(args.dir) if args.dir else None),
        "sqlite": sqlite3.sqlite_version,
        "package_path": str(Path(langgraph_effects.__file__).resolve().parent),
        "versions": {
            name: version(name)
            for name in (
                "langgraph-effects",
                "langgraph",
                "langgraph-prebuilt",
                "langchain",
                "langgraph-checkpoint-sqlite",
                "langgraph-checkpoint-postgres",
                "aiosqlite",
                "psycopg",
            )
        },
        "command": command_line(sys.argv[1:]),
        "git": git_state(),
    }


async def _backend(
    backend: str, savers: tuple[Any, Any], only: Only, cfg: dict[str, Any], report: dict[str, Any],
    *, profile: bool,
) -> None:
    """Counts, then timing, then (SQLite) the profile of what missed, on one pair of savers."""
    count = bench_counts.count_sqlite if backend == "sqlite" else bench_counts.count_postgres
    if "counts" in only.sections:
        for path in [p for p in only.paths if p in bench_e2e.LEDGER_PATHS]:
            for fanout in only.fanouts:
                row = await count(path, savers, fanout, cfg["count_runs"])
                report["counts"].append(row)
                trips = row["ledger_round_trips_per_call"]
                log(
                    f"  counts {path}/{backend}/fanout={fanout}: ledger "
                    f"{row['ledger_commits_per_call']:.3f} commits and "
                    f"{'?' if trips is None else f'{trips:.2f}'} round trips per call; steps "
                    f"{row['graph_steps_per_run_baseline']:g} -> {row['graph_steps_per_run_effect']:g}"
                )
    if "e2e" not in only.sections:
        return
    rows = await bench_e2e.time_scenarios(
        only.scenarios(backend), savers, runs=cfg["runs_per_batch"], repeats=cfg["repeats"], log=log
    )
    report["e2e"].update(rows)
    if backend != "sqlite" or not profile:
        return
    for path in [p for p in only.paths if p in bench_e2e.LEDGER_PATHS]:
        missed = sorted(
            {
                row["fanout"] for row in rows.values()
                if row["path"] == path and bench_report.time_met(row) is False
            }
        )
        for fanout in missed:
            log(f"  profiling {bench_e2e.OURS[path]} on SQLite, fan-out {fanout} (a target was missed)")
            key = bench_e2e.Scenario(path, "sqlite", 0.0, fanout).key
            report["profile"][f"{path}/sqlite/fanout={fanout}"] = await bench_profile.profile_sqlite(
                path,
                savers,
                fanout,
                cfg["profile_runs"],
                report["e2e"].get(key),
                what_if_runs=cfg["runs_per_batch"],
                what_if_repeats=3 if cfg["quick"] else 36,
            )


async def _scan_and_memory(
    only: Only, cfg: dict[str, Any], workdir: Path, dsn: str, pg_ok: bool, report: dict[str, Any]
) -> None:
    if "scan" in only.sections:
        if "sqlite" in only.backends:
            for rows in [cfg["scan_rows"], *cfg["scan_reference_rows"]]:
                log(f"unresolved scan, {rows:,} rows (SQLite)")
                report["scan"][f"sqlite/{rows}"] = await bench_ledger.scan_sqlite(
                    workdir / "scan.sqlite",
                    total=rows,
                    unresolved=cfg["scan_unresolved"],
                    repeats=cfg["scan_repeats"],
                )
        if pg_ok and "postgres" in only.backends:
            log(f"unresolved scan, {cfg['scan_rows']:,} rows (Postgres)")
            async with fresh_pg_database(dsn) as fresh:
                report["scan"][f"postgres/{cfg['scan_rows']}"] = await bench_ledger.scan_postgres(
                    fresh,
                    total=cfg["scan_rows"],
                    unresolved=cfg["scan_unresolved"],
                    repeats=cfg["scan_repeats"],
                )
    if "memory" in only.sections:
        log(f"memory and disk per {cfg['memory_ops']:,} operations")
        report["memory"]["inmemory"] = await bench_ledger.memory_inmemory(cfg["memory_ops"])
        report["memory"]["sqlite_file"] = await bench_ledger.disk_sqlite(
            workdir / "disk.sqlite", cfg["memory_ops"]
        )


async def run_all(args: argparse.Namespace, only: Only) -> dict[str, Any]:
    cfg = settings_for(args)
    workdir = Path(args.dir or tempfile.mkdtemp(prefix="lge-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    dsn = args.postgres_dsn or os.environ.get("LANGGRAPH_EFFECTS_TEST_PG_DSN", DEFAULT_PG_DSN)
    wants_pg = "postgres" in only.backends
    pg_skip = "not selected by --only"
    if wants_pg:
        pg_skip = "--no-postgres" if args.no_postgres else pg_problem(dsn)
    report: dict[str, Any] = {
        "meta": _meta(args),
        "settings": {**cfg, "only": args.only},
        "postgres": {"dsn": redact(dsn), "available": pg_skip is None, "skipped": pg_skip},
        "e2e": {},
        "counts": [],
        "scan": {},
        "memory": {},
        "profile": {},
    }
    if pg_skip is not None and wants_pg:
        log(f"Postgres skipped: {pg_skip}")
    agent_parts = only.sections & {"e2e", "counts"}
    profile = not args.no_profile
    if agent_parts and "sqlite" in only.backends:
        log("agent turns on SQLite")
        async with bench_e2e.sqlite_savers(workdir / "agent.sqlite") as savers:
            await _backend("sqlite", savers, only, cfg, report, profile=profile)
        for suffix in ("", "-wal", "-shm"):
            Path(f"{workdir / 'agent.sqlite'}{suffix}").unlink(missing_ok=True)
    if agent_parts and pg_skip is None:
        log("agent turns on Postgres")
        async with (
            fresh_pg_database(dsn) as plain_db,
            fresh_pg_database(dsn) as ours_db,
            bench_e2e.postgres_savers(plain_db, ours_db) as savers,
        ):
            await _backend("postgres", savers, only, cfg, report, profile=profile)
    await _scan_and_memory(only, cfg, workdir, dsn, pg_skip is None, report)
    if not args.dir:
        with contextlib.suppress(OSError):
            workdir.rmdir()
    report["meta"]["loadavg_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    report["targets"] = bench_report.targets(report)
    return report


# -- entry point -----------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a small, fast run (CI smoke test)")
    parser.add_argument("--json", type=Path, help="write the results here (default: a temp file)")
    parser.add_argument("--repeats", type=int, help="interleaved repeats per row (51; quick 3)")
    parser.add_argument("--runs", type=int, help="agent turns per batch (2)")
    parser.add_argument("--rows", type=int, help="ledger rows for the unresolved scan (1,000,000)")
    parser.add_argument("--postgres-dsn", help=f"Postgres server (default {DEFAULT_PG_DSN})")
    parser.add_argument("--no-postgres", action="store_true", help="skip the Postgres parts")
    parser.add_argument("--no-profile", action="store_true", help="do not profile missed targets")
    parser.add_argument(
        "--only",
        help="comma-separated: sections timing,counts,scan,memory; paths node,middleware,floor; "
        "backends sqlite,postgres; tools 0ms,5ms; fan-outs fanout1,fanout8",
    )
    parser.add_argument("--dir", help="directory for the SQLite files (default: a temp dir)")
    args = parser.parse_args(argv)
    for name in ("repeats", "runs", "rows"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name} must be at least 1")
    try:
        only = Only.parse(args.only)
    except ValueError as error:
        parser.error(str(error))
    started = time.perf_counter()
    report = asyncio.run(run_all(args, only))
    report["meta"]["seconds"] = round(time.perf_counter() - started, 1)
    table = bench_report.render(report)
    report["table"] = table
    print(table)
    target = args.json or Path(tempfile.gettempdir()) / "langgraph-effects-bench.json"
    target.write_text(json.dumps(report, indent=2, sort_keys=True, default=str) + "\n")
    print(f"\nwrote {target} ({report['meta']['seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
