"""What safety costs: langgraph-effects measured against plain LangGraph and its targets.

    python benchmarks/run.py                 # the full run (a few minutes)
    python benchmarks/run.py --quick         # a small smoke run (CI)
    python benchmarks/run.py --json out.json --repeats 21 --postgres-dsn postgresql://...

Prints a table and writes every figure to JSON. Each timing is a median of repeated
runs and each overhead a ratio against a baseline measured in the same process run,
interleaved with it (these machines are noisy: an absolute time alone means little).

* agent loop, ``EffectToolNode`` vs ``ToolNode``: SQLite (same file) and Postgres
  (same database), a zero-latency tool and a 5 ms tool, fan-out 1 and 8;
* durable commits per effectful call, counted (SQLite trace callback on the ledger's
  connection; libpq protocol trace of the Postgres ledger's pool);
* time to find unresolved operations among 1,000,000 (``--quick``: 20,000);
* memory per 10,000 recorded operations (``InMemoryLedger``) and SQLite file growth;
* where a target is missed: a profile of the ``EffectToolNode`` run.

Postgres parts run against ``--postgres-dsn`` (default: env
``LANGGRAPH_EFFECTS_TEST_PG_DSN`` or ``postgresql://postgres@127.0.0.1:5432/test``) in a
fresh database that is dropped afterwards; they are skipped, with a line saying why,
when no server answers. The ledger-only throughput benchmarks are separate scripts:
``benchmarks/ledger_pairs.py`` (and ``benchmarks/ledger_throughput.py`` if present).
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
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_e2e
import bench_ledger
from bench_common import DEFAULT_PG_DSN, fresh_pg_database, pg_problem

TARGET_COMMITS = 2.0
TARGET_ZERO = 1.10
TARGET_5MS = 1.03
TARGET_FANOUT = 1.15
TARGET_POSTGRES = 1.20
TARGET_TRIPS = 2.0
PATHS = ("node", "middleware")


def limit_for(row: dict[str, Any]) -> float | None:
    """The issue's target for an end-to-end row (ratio of medians), if it sets one."""
    if row["backend"] == "postgres":
        return TARGET_POSTGRES
    if row["fanout"] > 1:
        return TARGET_FANOUT if row["tool_ms"] == 0 else None
    return TARGET_ZERO if row["tool_ms"] == 0 else TARGET_5MS
TARGET_SCAN_MS = 10.0
TARGET_SCAN_ROWS = 1_000_000


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
    root = Path(__file__).resolve().parents[1]
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no", "langgraph_effects"],
            cwd=root,
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


# -- the run ---------------------------------------------------------------------------------


def settings_for(args: argparse.Namespace) -> dict[str, Any]:
    quick = args.quick
    return {
        "quick": quick,
        # Short batches, many of them: a pair of adjacent batches sees the same machine load.
        "repeats": args.repeats or (3 if quick else 51),
        "runs_per_batch": args.runs or 2,
        "count_runs": 2 if quick else 20,
        "profile_runs": 3 if quick else 60,
        "scan_rows": args.rows or (20_000 if quick else TARGET_SCAN_ROWS),
        "scan_unresolved": 1_000,
        # A small ledger with the same 1,000 unresolved rows: the scan is O(result), not O(history).
        "scan_reference_rows": [] if quick else [20_000],
        "scan_repeats": 5 if quick else 25,
        "memory_ops": 2_000 if quick else 10_000,
    }


def scenarios(backend: str, paths: tuple[str, ...] = PATHS) -> list[bench_e2e.Scenario]:
    return [
        bench_e2e.Scenario(backend, latency, fanout, path)
        for path in paths
        for latency in (0.0, 5.0)
        for fanout in (1, 8)
    ]


async def run_all(args: argparse.Namespace) -> dict[str, Any]:
    cfg = settings_for(args)
    sections = set(args.only.split(",")) if args.only else {"e2e", "commits", "scan", "memory"}
    workdir = Path(args.dir or tempfile.mkdtemp(prefix="lge-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    dsn = args.postgres_dsn or os.environ.get("LANGGRAPH_EFFECTS_TEST_PG_DSN", DEFAULT_PG_DSN)
    pg_skip = "--no-postgres" if args.no_postgres else pg_problem(dsn)
    report: dict[str, Any] = {
        "meta": {
            "started": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "cpus": os.cpu_count(),
            "loadavg_start": list(os.getloadavg()) if hasattr(os, "getloadavg") else None,
            "sqlite": sqlite3.sqlite_version,
            "versions": {
                name: version(name)
                for name in (
                    "langgraph-effects",
                    "langgraph",
                    "langgraph-prebuilt",
                    "langgraph-checkpoint-sqlite",
                    "langgraph-checkpoint-postgres",
                    "aiosqlite",
                    "psycopg",
                )
            },
            "command": command_line(sys.argv[1:]),
            "git": git_state(),
        },
        "settings": cfg,
        "postgres": {"dsn": redact(dsn), "available": pg_skip is None, "skipped": pg_skip},
        "e2e": {},
        "commits": [],
        "scan": {},
        "memory": {},
        "profile": {},
    }
    runs = cfg["runs_per_batch"]

    def runs_for(sc: bench_e2e.Scenario) -> int:
        return int(runs)

    if pg_skip is not None:
        log(f"Postgres skipped: {pg_skip}")

    # SQLite: agent loop, commits, profile (one file for both savers).
    if sections & {"e2e", "commits"}:
        log("agent loop on SQLite")
        async with bench_e2e.sqlite_savers(workdir / "agent.sqlite") as savers:
            if "commits" in sections:
                for path in PATHS:
                    for fanout in (1, 8):
                        row = await bench_e2e.count_sqlite(savers, fanout, cfg["count_runs"], path)
                        report["commits"].append(row)
                        log(
                            f"  {path} sqlite fan-out {fanout}: {row['ledger_commits_per_call']:.3f} "
                            f"commits/call, {row['ledger_round_trips_per_call']:.3f} round trips/call"
                        )
            if "e2e" in sections:
                report["e2e"].update(
                    await bench_e2e.time_scenarios(
                        scenarios("sqlite"), savers, runs=runs_for, repeats=cfg["repeats"], log=log
                    )
                )
                missed = [
                    row
                    for row in report["e2e"].values()
                    if row["backend"] == "sqlite"
                    and row["path"] == "node"
                    and (limit := limit_for(row)) is not None
                    and row["ratio_of_medians"] > limit
                ]
                if missed and not args.no_profile:
                    for fanout in sorted({row["fanout"] for row in missed}):
                        log(f"  profiling the EffectToolNode run, fan-out {fanout}")
                        key = bench_e2e.Scenario("sqlite", 0.0, fanout).key
                        report["profile"][f"sqlite/fanout={fanout}"] = await bench_e2e.profile_sqlite(
                            savers,
                            fanout,
                            cfg["profile_runs"],
                            report["e2e"].get(key),
                            what_if_runs=cfg["runs_per_batch"],
                            what_if_repeats=3 if cfg["quick"] else 36,
                        )
        for suffix in ("", "-wal", "-shm"):
            Path(f"{workdir / 'agent.sqlite'}{suffix}").unlink(missing_ok=True)

    if pg_skip is None and sections & {"e2e", "commits"}:
        log("agent loop on Postgres")
        async with fresh_pg_database(dsn) as fresh, bench_e2e.postgres_savers(fresh) as savers:
            if "commits" in sections:
                for fanout in (1, 8):
                    row = await bench_e2e.count_postgres(fresh, fanout, cfg["count_runs"])
                    report["commits"].append(row)
                    log(f"  commits postgres fan-out {fanout}: {row['ledger_commits_per_call']:.3f}/call")
            if "e2e" in sections:
                report["e2e"].update(
                    await bench_e2e.time_scenarios(
                        scenarios("postgres"), savers, runs=runs_for, repeats=cfg["repeats"], log=log
                    )
                )

    if "scan" in sections:
        sizes = [cfg["scan_rows"], *cfg["scan_reference_rows"]]
        for rows in sizes:
            log(f"unresolved scan, {rows:,} rows (SQLite)")
            report["scan"][f"sqlite/{rows}"] = await bench_ledger.scan_sqlite(
                workdir / "scan.sqlite",
                total=rows,
                unresolved=cfg["scan_unresolved"],
                repeats=cfg["scan_repeats"],
            )
        if pg_skip is None:
            log(f"unresolved scan, {cfg['scan_rows']:,} rows (Postgres)")
            async with fresh_pg_database(dsn) as fresh:
                report["scan"][f"postgres/{cfg['scan_rows']}"] = await bench_ledger.scan_postgres(
                    fresh,
                    total=cfg["scan_rows"],
                    unresolved=cfg["scan_unresolved"],
                    repeats=cfg["scan_repeats"],
                )

    if "memory" in sections:
        log(f"memory and disk per {cfg['memory_ops']:,} operations")
        report["memory"]["inmemory"] = await bench_ledger.memory_inmemory(cfg["memory_ops"])
        report["memory"]["sqlite_file"] = await bench_ledger.disk_sqlite(
            workdir / "disk.sqlite", cfg["memory_ops"]
        )

    if not args.dir:
        with contextlib.suppress(OSError):
            workdir.rmdir()
    report["meta"]["loadavg_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    report["targets"] = targets(report)
    return report


# -- targets ---------------------------------------------------------------------------------


def targets(report: dict[str, Any]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for row in report["commits"]:
        out.append(
            {
                "name": f"durable ledger commits per call, {row.get('path', 'node')}, {row['backend']}, "
                f"fan-out {row['fanout']}",
                "target": f"<= {TARGET_COMMITS:g}",
                "measured": round(row["ledger_commits_per_call"], 3),
                "met": row["ledger_commits_per_call"] <= TARGET_COMMITS,
            }
        )
    for row in report["e2e"].values():
        limit = limit_for(row)
        if limit is None:
            continue
        out.append(
            {
                "name": f"end-to-end, {row['path']}, {row['backend']}, {row['tool_ms']:g} ms tool, "
                f"fan-out {row['fanout']}",
                "target": f"<= {limit:.2f}x",
                "measured": round(row["ratio_of_medians"], 3),
                "met": row["ratio_of_medians"] <= limit,
            }
        )
    for scan in report["scan"].values():
        if scan["backend"] != "sqlite":
            continue
        full = scan["rows"] >= TARGET_SCAN_ROWS
        out.append(
            {
                "name": f"unresolved() with {scan['rows']:,} operations in the ledger, sqlite",
                "target": f"< {TARGET_SCAN_MS:g} ms at {TARGET_SCAN_ROWS:,} rows",
                "measured": round(scan["unresolved_all_ms"], 3),
                "met": (scan["unresolved_all_ms"] < TARGET_SCAN_MS) if full else None,
            }
        )
    return out


# -- the table -------------------------------------------------------------------------------


def _mark(met: bool | None) -> str:
    return {True: "met", False: "MISSED", None: "n/a"}[met]


def render(report: dict[str, Any]) -> str:
    meta, cfg = report["meta"], report["settings"]
    lines: list[str] = []
    add = lines.append
    add(
        f"What safety costs: langgraph-effects {meta['versions']['langgraph-effects']}, "
        f"langgraph {meta['versions']['langgraph']}, Python {meta['python']}, SQLite {meta['sqlite']}, "
        f"{meta['cpus']} CPUs, load {_load(meta)}{' (quick)' if cfg['quick'] else ''}"
    )
    git = meta.get("git") or {}
    if git.get("commit"):
        modified = " + uncommitted package changes" if git.get("package_modified") else ""
        add(f"commit {git['commit'][:12]}{modified}; {meta['command']}")
    add("")
    if report["e2e"]:
        add(
            f"Agent loop (scripted model, 1 turn of tool calls), ms per run: median of "
            f"{cfg['repeats']} interleaved batches of {cfg['runs_per_batch']} runs"
        )
        header = (
            f"{'path':<11}{'backend':<9}{'tool':>6}{'fan-out':>8}{'baseline':>10}{'ours':>8}"
            f"{'ratio':>8}{'95% CI':>13}{'+ms/call':>9}{'CPU':>7}{'CPU 95% CI':>13}  target"
        )
        add(header)
        add("-" * len(header))
        for row in report["e2e"].values():
            limit = limit_for(row)
            ratio = row["ratio_of_medians"]
            verdict = f"<= {limit:.2f}x {_mark(ratio <= limit)}" if limit is not None else "-"
            lo, hi = row["ratio_ci95"]
            clo, chi = row["cpu_ratio_ci95"]
            add(
                f"{row['path']:<11}{row['backend']:<9}{row['tool_ms']:>4g}ms{row['fanout']:>8}"
                f"{row['toolnode_ms']:>10.2f}{row['effect_ms']:>8.2f}{ratio:>7.3f}x"
                f"{f'{lo:.2f}-{hi:.2f}x':>13}{row['added_ms_per_call']:>9.2f}"
                f"{row['cpu_ratio_of_medians']:>6.2f}x{f'{clo:.2f}-{chi:.2f}x':>13}  {verdict}"
            )
        add(
            "  baseline: ToolNode (node) / plain create_agent (middleware); ours: EffectToolNode / "
            "create_agent + EffectMiddleware"
        )
        add(
            "  ratio: median(ours) / median(baseline) over interleaved batches; 95% CI: bootstrap over "
            "the batch pairs"
        )
        add(
            "  CPU: the same for process CPU time (all threads): the machine's load barely moves it, "
            "but it leaves out fsync"
        )
        add("")
    if report["commits"]:
        add("Durable commits and round trips, counted (not inferred)")
        header = (
            f"{'path':<11}{'backend':<9}{'fan-out':>8}{'commits/call':>13}{'trips/call':>11}"
            f"{'checkpoint commits/run':>24}{'steps/run':>11}  target"
        )
        add(header)
        add("-" * len(header))
        for row in report["commits"]:
            ck = (
                f"{row['checkpoint_commits_per_run_toolnode']:.1f} | "
                f"{row['checkpoint_commits_per_run_effect']:.1f}"
            )
            trips = row.get("ledger_round_trips_per_call")
            steps = (
                f"{row['graph_steps_per_run_baseline']} | {row['graph_steps_per_run_effect']}"
                if "graph_steps_per_run_effect" in row
                else "-"
            )
            met = row["ledger_commits_per_call"] <= TARGET_COMMITS and (
                trips is None or trips <= TARGET_TRIPS
            )
            add(
                f"{row.get('path', 'node'):<11}{row['backend']:<9}{row['fanout']:>8}"
                f"{row['ledger_commits_per_call']:>13.3f}{'-' if trips is None else f'{trips:.3f}':>11}"
                f"{ck:>24}{steps:>11}  <= 2 {_mark(met)}"
            )
        add("  checkpoint commits/run and steps/run: baseline | ours (the middleware must add none)")
        add(
            "  ledger/call: commits of ledger transactions that wrote (SQLite: trace callback on the "
            "ledger's connection;"
        )
        add(
            "  Postgres: libpq trace of the ledger's pool). empty tx/run: ledger transactions per run "
            "that wrote nothing."
        )
        add("")
    if report["scan"]:
        add(
            "Finding unresolved operations: 1,000 unresolved among all rows, ms (median). unresolved() "
            "returns all 1,000"
        )
        add(
            "as Operations; then its parts on the ledger's thread: the partial index alone (count), "
            "fetching the rows, decoding them"
        )
        header = (
            f"{'backend':<9}{'rows':>11}{'unresolved()':>14}{'limit=100':>11}{'one thread':>12}"
            f"{'index':>8}{'fetch':>8}{'decode':>8}  target"
        )
        add(header)
        add("-" * len(header))
        for scan in report["scan"].values():
            full = scan["rows"] >= TARGET_SCAN_ROWS
            met = scan["unresolved_all_ms"] < TARGET_SCAN_MS if full else None
            parts = "".join(
                f"{scan[k]:>8.2f}" if k in scan else f"{'-':>8}"
                for k in ("index_only_count_ms", "sql_only_all_ms", "decode_all_ms")
            )
            add(
                f"{scan['backend']:<9}{scan['rows']:>11,}{scan['unresolved_all_ms']:>14.2f}"
                f"{scan['unresolved_limit100_ms']:>11.2f}{scan['unresolved_thread_ms']:>12.2f}{parts}"
                f"  {'< 10 ms ' + _mark(met) if scan['backend'] == 'sqlite' and full else '-'}"
            )
        for scan in report["scan"].values():
            if scan.get("decode_profile") and scan["rows"] >= max(s["rows"] for s in report["scan"].values()):
                add(
                    f"  decode profile ({scan['rows']:,} rows, self time): "
                    + ", ".join(
                        f"{item['function']} {item['self_share']:.0%}" for item in scan["decode_profile"][:4]
                    )
                )
                break
        add("")
    if report["memory"]:
        mem, disk = report["memory"]["inmemory"], report["memory"]["sqlite_file"]
        add(
            f"Memory per 10,000 operations: InMemoryLedger {mem['mb_per_10000']:.1f} MB "
            f"({mem['bytes_per_operation']:.0f} B/op, tracemalloc); SQLite file "
            f"{disk['mb_per_10000']:.1f} MB ({disk['bytes_per_operation']:.0f} B/op incl. "
            f"{disk['audit_rows_per_operation']:.0f} audit rows and indexes)"
        )
        add("")
    if report["postgres"]["skipped"]:
        add(f"Postgres: skipped ({report['postgres']['skipped']})")
        add("")
    if report["profile"]:
        add("Profile of the missed targets (EffectToolNode run, zero-latency tool, SQLite)")
        for name, prof in report["profile"].items():
            loop = prof["event_loop_thread"]
            add(
                f"  {name}: adds {prof['added_ms_per_run_unprofiled']:.2f} ms per run (median of "
                f"{prof['runs']} alternating runs each); a ledger call is pending "
                f"{prof['awaiting_ledger_ms_per_run']:.2f} ms per run (mean, may overlap other work)"
            )
            add(
                "    ledger calls per run (count, summed wait): "
                + ", ".join(
                    f"{m} {v['calls_per_run']:.0f}x {v['ms_per_run']:.2f} ms"
                    for m, v in prof["ledger_methods"].items()
                )
            )
            groups = ", ".join(
                f"{g} {ms:+.2f}" for g, ms in list(loop["added_by_package"].items())[:5] if abs(ms) >= 0.05
            )
            add(
                f"    event-loop thread, profiled self time: {loop['self_ms_per_run_toolnode']:.2f} -> "
                f"{loop['self_ms_per_run_effect']:.2f} ms per run; added by package (ms): {groups}"
            )
            add("    most added self time per run (calls per run ToolNode -> Effect):")
            for item in loop["top_added_self"][:6]:
                before, after = item["calls_per_run"]
                add(
                    f"      {item['added_self_ms_per_run']:+.3f} ms  {item['function']} "
                    f"({before:g} -> {after:g})"
                )
            add("    langgraph_effects on the event loop, cumulative CPU per run:")
            for item in loop["langgraph_effects_cumulative"][:4]:
                add(f"      {item['cumulative_ms_per_run']:.3f} ms  {item['function']}")
            add("    ledger's own thread, self time per run (idle wait excluded):")
            for item in prof["ledger_thread_top_self"][:4]:
                add(f"      {item['self_ms_per_run']:.3f} ms  {item['function']}")
            what_if = prof.get("what_if_ledger_setup_once")
            if what_if:
                add(
                    "    what-if, interleaved in one window: EffectToolNode as shipped "
                    f"{what_if['overhead']:.3f}x; with the ledger's schema checked once instead of "
                )
                add(
                    f"    on every checkpointer call {what_if['overhead_setup_once']:.3f}x "
                    f"({what_if['toolnode_ms']:.2f} / {what_if['effect_ms']:.2f} / "
                    f"{what_if['effect_setup_once_ms']:.2f} ms per run)"
                )
        add("")
    if report.get("targets"):
        add("Targets")
        for t in report["targets"]:
            add(f"  {_mark(t['met']):<7}{t['name']}: {t['measured']} (target {t['target']})")
    return "\n".join(lines)


def _load(meta: dict[str, Any]) -> str:
    load = meta.get("loadavg_start")
    return f"{load[0]:.2f}" if load else "?"


# -- entry point -----------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="a small, fast run (CI smoke test)")
    parser.add_argument("--json", type=Path, help="write the results here (default: a temp file)")
    parser.add_argument("--repeats", type=int, help="interleaved repeats per scenario (51; quick 3)")
    parser.add_argument("--runs", type=int, help="agent runs per batch (2)")
    parser.add_argument("--rows", type=int, help="ledger rows for the unresolved scan (1,000,000)")
    parser.add_argument("--postgres-dsn", help=f"Postgres server (default {DEFAULT_PG_DSN})")
    parser.add_argument("--no-postgres", action="store_true", help="skip the Postgres parts")
    parser.add_argument("--no-profile", action="store_true", help="do not profile missed targets")
    parser.add_argument("--only", help="comma-separated sections: e2e,commits,scan,memory")
    parser.add_argument("--dir", help="directory for the SQLite files (default: a temp dir)")
    args = parser.parse_args(argv)
    for name in ("repeats", "runs", "rows"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name} must be at least 1")
    started = time.perf_counter()
    report = asyncio.run(run_all(args))
    report["meta"]["seconds"] = round(time.perf_counter() - started, 1)
    table = render(report)
    report["table"] = table
    print(table)
    target = args.json or Path(tempfile.gettempdir()) / "langgraph-effects-bench.json"
    target.write_text(json.dumps(report, indent=2, sort_keys=True, default=str) + "\n")
    print(f"\nwrote {target} ({report['meta']['seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
