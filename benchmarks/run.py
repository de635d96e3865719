"""What safety costs: langgraph-effects measured against plain LangGraph, one runner for
every benchmark scenario.

    python benchmarks/run.py                          # the main table (turn, counts, scan, memory)
    python benchmarks/run.py --quick                  # a small smoke run
    python benchmarks/run.py --only middleware,sqlite # one row group, to iterate on it
    python benchmarks/run.py turn,counts --json out.json --pyperf out.pyperf.json
    python benchmarks/run.py turn_split --backend postgres --path node --fanout 8
    python benchmarks/run.py --list                   # the scenarios and what each compares

Scenarios are modules under ``benchmarks/scenarios/`` (see its ``__init__``); name one
or several (comma-separated) first. Options of a scenario's own are accepted when it is
the only one named. The run prints one table and writes one JSON (every scenario's
figures, the machine's pyperf metadata, the targets met or MISSED); ``--pyperf`` also
writes the timed turns' samples (scenarios ``turn`` and ``sync``: each side's wall and
CPU per batch, and the bare pair's) as a pyperf suite (``python -m pyperf stats``).
Progress goes to stderr.

The main table (scenario ``turn``): one agent turn, ``EffectToolNode`` vs ``ToolNode``,
``EffectMiddleware`` vs ``create_agent``, the no-op middleware floor, on SQLite and
Postgres, fan-out 1 and 8, a 0 ms and a 5 ms tool; each ratio of medians over
interleaved batches (AB BA ...) with a paired bootstrap 95% interval, the CPU ratio,
the milliseconds added per call, and the same as a multiple of a bare two-commit pair
measured in the same run (``scenarios/turn.py``), against the targets of issue 32.

``--only`` takes comma-separated words that narrow the main table: sections (``timing``,
``counts``, ``scan``, ``memory``), paths (``node``, ``middleware``, ``floor``), backends
(``sqlite``, ``postgres``), tools (``0ms``, ``5ms``), fan-outs (``fanout1``,
``fanout8``). Words of one kind add up; kinds narrow each other; naming only rows runs
timing and counts for them.

Postgres parts run against ``--postgres-dsn`` (default: env
``LANGGRAPH_EFFECTS_TEST_PG_DSN`` or ``postgresql://postgres@127.0.0.1:5432/test``) in
fresh databases dropped afterwards; they are skipped, with a line saying why, when no
server answers.
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

# This checkout's package (not another one installed in the environment) and the benchmarks.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import bench_report
import scenarios
import stats
from bench_common import DEFAULT_PG_DSN, pg_problem
from scenarios import turn

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

SECTIONS = ("turn", "counts", "scan", "memory")
_SECTION_WORDS = {"e2e": "turn", "turn": "turn", "timing": "turn", "counts": "counts", "commits": "counts",
                  "scan": "scan", "memory": "memory"}
_LATENCIES = {"0ms": 0.0, "5ms": 5.0}
_FANOUTS = {"fanout1": 1, "fanout8": 8}


@dataclass
class Only:
    """What ``--only`` leaves in (everything by default)."""

    sections: set[str] = field(default_factory=lambda: set(SECTIONS))
    paths: tuple[str, ...] = turn.PATHS
    backends: tuple[str, ...] = turn.BACKENDS
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
            if w not in _SECTION_WORDS and w not in turn.PATHS and w not in turn.BACKENDS
            and w not in _LATENCIES and w not in _FANOUTS
        ]
        if unknown:
            known = [*_SECTION_WORDS, *turn.PATHS, *turn.BACKENDS, *_LATENCIES, *_FANOUTS]
            raise ValueError(f"--only: unknown {', '.join(unknown)} (known: {', '.join(known)})")
        sections = {_SECTION_WORDS[w] for w in words if w in _SECTION_WORDS}
        rows_named = any(w not in _SECTION_WORDS for w in words)
        only.sections = sections or ({"turn", "counts"} if rows_named else set(SECTIONS))

        def pick(allowed: tuple[Any, ...], chosen: list[Any]) -> tuple[Any, ...]:
            return tuple(x for x in allowed if x in chosen) if chosen else allowed

        only.paths = pick(turn.PATHS, [w for w in words if w in turn.PATHS])
        only.backends = pick(turn.BACKENDS, [w for w in words if w in turn.BACKENDS])
        only.latencies = pick((0.0, 5.0), [_LATENCIES[w] for w in words if w in _LATENCIES])
        only.fanouts = pick((1, 8), [_FANOUTS[w] for w in words if w in _FANOUTS])
        return only

    def scenarios(self, backend: str) -> list[turn.Scenario]:
        """The timed rows of ``backend`` this run keeps."""
        return [
            turn.Scenario(path, backend, latency, fanout)
            for path in self.paths
            for latency in self.latencies
            for fanout in self.fanouts
        ]


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
        "pyperf": stats.metadata(),
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



# -- the run ---------------------------------------------------------------------------------


def _context(args: argparse.Namespace, only: Only, workdir: Path) -> scenarios.Context:
    dsn = args.postgres_dsn or os.environ.get("LANGGRAPH_EFFECTS_TEST_PG_DSN", DEFAULT_PG_DSN)
    pg_skip: str | None = "not selected by --only"
    if "postgres" in only.backends:
        pg_skip = "--no-postgres" if args.no_postgres else pg_problem(dsn)
        if pg_skip is not None:
            log(f"Postgres skipped: {pg_skip}")
    return scenarios.Context(quick=args.quick, workdir=workdir, dsn=dsn, pg_skip=pg_skip, only=only, log=log)


async def run_all(args: argparse.Namespace, only: Only, names: list[str]) -> tuple[dict[str, Any], list[Any]]:
    workdir = Path(args.dir or tempfile.mkdtemp(prefix="lge-bench-"))
    workdir.mkdir(parents=True, exist_ok=True)
    ctx = _context(args, only, workdir)
    report: dict[str, Any] = {
        "meta": _meta(args),
        "settings": {
            "quick": args.quick, "repeats": args.repeats, "runs_per_batch": args.runs,
            "count_runs": 2 if args.quick else 20, "only": args.only, "scenarios": names,
        },
        "postgres": {"dsn": redact(ctx.dsn), "available": ctx.pg_skip is None, "skipped": ctx.pg_skip},
        "e2e": {}, "bare": {}, "counts": [], "scan": {}, "memory": {}, "scenarios": {},
    }
    for name in names:
        log(f"scenario {name}")
        part = await scenarios.load(name).run(args, ctx)
        for key, value in part.items():
            if isinstance(report[key], list):
                report[key].extend(value)
            else:
                report[key].update(value)
    if not args.dir:
        with contextlib.suppress(OSError):
            workdir.rmdir()
    report["meta"]["loadavg_end"] = list(os.getloadavg()) if hasattr(os, "getloadavg") else None
    report["targets"] = bench_report.targets(report)
    return report, ctx.benchmarks


# -- entry point -----------------------------------------------------------------------------


def _parser(module: Any = None, *, add_help: bool = True) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0], add_help=add_help)
    parser.add_argument("scenarios", nargs="?", help="comma-separated scenarios (default: "
                        f"{','.join(scenarios.DEFAULT)}; --list names them all)")
    parser.add_argument("--list", action="store_true", help="list the scenarios and exit")
    parser.add_argument("--quick", action="store_true", help="a small, fast run (smoke test)")
    parser.add_argument("--json", type=Path, help="write the results here (default: a temp file)")
    parser.add_argument("--pyperf", type=Path, help="also write the turns' samples as a pyperf suite")
    parser.add_argument("--repeats", type=int, help="interleaved batches per row (51; quick 3)")
    parser.add_argument("--runs", type=int, help="agent turns per batch (2)")
    parser.add_argument("--rows", type=int, help="ledger rows for the unresolved scan (1,000,000)")
    parser.add_argument("--postgres-dsn", help=f"Postgres server (default {DEFAULT_PG_DSN})")
    parser.add_argument("--no-postgres", action="store_true", help="skip the Postgres parts")
    # Accepted so that the commands the issues and pages cite still run: the profile of a
    # missed target is no longer part of the run (a per-call trace script does that job).
    parser.add_argument("--no-profile", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument(
        "--only",
        help="comma-separated: sections timing,counts,scan,memory; paths node,middleware,floor; "
        "backends sqlite,postgres; tools 0ms,5ms; fan-outs fanout1,fanout8",
    )
    parser.add_argument("--dir", help="directory for the SQLite files (default: a temp dir)")
    if module is not None and hasattr(module, "options"):
        module.options(parser.add_argument_group(f"scenario {module.__name__.split('.')[-1]}"))
    return parser


def _scenarios(argv: list[str]) -> tuple[argparse.ArgumentParser, argparse.Namespace, list[str], Only]:
    first, _ = _parser(add_help=False).parse_known_args(argv)  # --help: after the scenario's options
    names = [n.strip() for n in (first.scenarios or "").split(",") if n.strip()]
    for name in names:
        if name not in scenarios.NAMES:
            _parser().error(f"unknown scenario {name!r} (known: {', '.join(scenarios.NAMES)})")
    parser = _parser(scenarios.load(names[0]) if len(names) == 1 else None)
    args = parser.parse_args(argv)
    for name in ("repeats", "runs", "rows"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name} must be at least 1")
    # (given as such, for the scenarios whose own defaults differ)
    args.repeats_given, args.runs_given = args.repeats, args.runs
    args.repeats = args.repeats or (3 if args.quick else 51)
    args.runs = args.runs or 2
    try:
        only = Only.parse(args.only)
    except ValueError as error:
        parser.error(str(error))
    if not names:
        names = [n for n in scenarios.DEFAULT if n in only.sections]
    return parser, args, names, only


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser, args, names, only = _scenarios(argv)
    if args.list:
        for name in scenarios.NAMES:
            module = scenarios.load(name)
            print(f"{name:18s}{scenarios.summary(module)}")
            print(f"{'':18s}compares: {', '.join(module.CONFIGURATIONS)}")
        return 0
    if len(names) == 1 and hasattr(scenarios.load(names[0]), "check"):
        problem = scenarios.load(names[0]).check(args)
        if problem:
            parser.error(problem)
    started = time.perf_counter()
    report, benchmarks = asyncio.run(run_all(args, only, names))
    report["meta"]["seconds"] = round(time.perf_counter() - started, 1)
    table = bench_report.render(report)
    report["table"] = table
    print(table)
    target = args.json or Path(tempfile.gettempdir()) / "langgraph-effects-bench.json"
    target.write_text(json.dumps(report, indent=2, sort_keys=True, default=str) + "\n")
    if args.pyperf is not None and benchmarks:
        suite = stats.suite(benchmarks)
        if suite is not None:
            suite.dump(str(args.pyperf), replace=True)
    print(f"\nwrote {target} ({report['meta']['seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
