"""``langgraph-effects crashtest``: crash-test your own graph against your own provider.

Exit codes: 0 every faulted run ended with exactly the control run's effects;
1 a run duplicated or lost effects; 2 usage (bad option, a target that cannot be
imported, a factory that returns no graph); 5 a run could not be made or completed,
and none duplicated or lost (the probe raised, the control run failed, a worker broke).
All are read from each run's one outcome (`RunResult.outcome`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import textwrap
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from ..cli.argparsing import parse_args, usage_error
from ..cli.render import stderr, stdout
from ..core.exitcodes import ExitCode
from .core import (
    POINTS,
    RANDOM,
    CrashReport,
    CrashtestRunError,
    CrashtestUsageError,
    RunResult,
    crashtest,
    points_help,
    summary,
)

_STYLE = {
    "exact": "green",
    "duplicated": "bold red",
    "lost": "bold yellow",
    "broken": "dim",
}


class _Usage(Exception):
    pass


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="langgraph-effects crashtest",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=textwrap.fill(
            "Crash-test your own graph: a control run without faults, then, for every fault point "
            "and every tool call the control run made, a fresh thread faulted there (SIGKILL, or a "
            "timeout) and resumed in fresh processes until it finishes. Effects are counted by your "
            "probe, per thread.",
            width=88,
        ),
        epilog="fault points:\n" + points_help() + "\n\nexit codes: 0 exact everywhere, 1 effects "
        "duplicated or lost, 2 usage, 5 a run could not be made (e.g. the probe raised).",
    )
    parser.add_argument(
        "factory",
        metavar="MODULE:FACTORY",
        help="factory(checkpointer) returning your compiled graph (sync or async); imported "
        "from the current directory",
    )
    parser.add_argument(
        "--probe",
        required=True,
        metavar="MODULE:FUNC",
        help="probe(thread_id) -> int (or awaitable): effects your provider holds for that thread",
    )
    parser.add_argument("--input", metavar="JSON", help="graph input of every run (default: a user message)")
    parser.add_argument("--config", metavar="JSON", help="merged into every run's config")
    parser.add_argument(
        "--points", metavar="A,B", help=f"fault points (default: all that apply): {','.join(POINTS)}"
    )
    parser.add_argument(
        "--random", type=int, default=0, metavar="N", help="N more runs killed at random moments"
    )
    parser.add_argument("--seed", type=int, default=None, help="seed for --random")
    parser.add_argument(
        "--db", metavar="DSN", help="run on AsyncEffectPostgresSaver in this database (default: SQLite files)"
    )
    parser.add_argument("--workdir", type=Path, help="keep the runs' SQLite files here (default: a temp dir)")
    parser.add_argument(
        "--sync", action="store_true", help="run the graph as a sync app does: invoke on SyncEffect*Saver"
    )
    parser.add_argument("--json", type=Path, metavar="PATH", help="write the whole report as JSON")
    return parser


def _json_arg(value: str | None, option: str) -> Any:
    if value is None:
        return None
    try:
        return json.loads(value)
    except json.JSONDecodeError as error:
        raise _Usage(f"{option} is not valid JSON ({error.msg} at column {error.colno}): {value!r}") from None


def main(argv: list[str] | None = None) -> int:
    """Run the crash test; returns the exit code (see the module docstring)."""
    parser = build_parser()
    args = parse_args(parser, argv)
    if isinstance(args, int):
        return args
    try:
        graph_input = _json_arg(args.input, "--input")
        config = _json_arg(args.config, "--config")
        if config is not None and not isinstance(config, dict):
            raise _Usage(f"--config must be a JSON object, not {type(config).__name__}")
        points = None
        if args.points:
            points = [p.strip() for p in args.points.split(",") if p.strip()]
        if args.random < 0:
            raise _Usage("--random must be at least 0")
        report = asyncio.run(
            crashtest(
                args.factory,
                args.probe,
                input=graph_input,
                config=config,
                points=points,
                random=args.random,
                seed=args.seed,
                db=args.db,
                workdir=args.workdir,
                sync=args.sync,
                on_run=lambda run, done, total: _progress(run, done, total),
            )
        )
    except (_Usage, CrashtestUsageError) as error:
        return usage_error(parser, error)
    except CrashtestRunError as error:
        stderr().print(Text(f"{parser.prog}: a run could not be made: {error}", style="bold red"))
        return int(ExitCode.INTERNAL)
    out = stdout(pipe_width=120)
    render(report, out)
    if args.json is not None:
        args.json.write_text(json.dumps(report.to_json(), indent=2) + "\n")
        out.print(f"JSON report: {args.json}")
    return report.exit_code


def _progress(run: RunResult, done: int, total: int) -> None:
    """One line per finished run, on stderr, flushed: CI logs show it as it happens."""
    what = f"{run.effects} effect(s), expected {run.expected}: {run.outcome()}"
    if run.problem is not None:
        what += f", could not be completed: {run.problem}"
    extra = f"{run.processes} process(es), {run.kills} kill(s)"
    if run.restarts:
        extra += f", {run.restarts} restart(s): ended before the first checkpoint"
    if run.reviews:
        extra += f", {run.reviews} review(s)"
    if not run.fault_reached:
        extra += ", fault not reached"
    print(f"[{done}/{total}] {run.label}: {what} ({extra}, {run.seconds:.1f} s)", file=sys.stderr, flush=True)


def _cell(run: RunResult) -> Text:
    text = _cell_line(run)
    if run.duplicates:
        text.append(f"\n+{run.duplicates} duplicate", style="red")
    if run.missing:
        text.append(f"\n-{run.missing} missing", style="yellow")
    if run.reviews:
        text.append(f"\nreview {run.reviews}", style="cyan")
    if not run.fault_reached:
        text.append("\nnot reached", style="dim")
    return text


def _cell_line(run: RunResult) -> Text:
    """``effects / expected`` in the run's outcome's colour; a run that could not be
    completed says so (its count decides nothing unless it already exceeds)."""
    outcome = run.outcome()
    text = Text(f"{run.effects} / {run.expected}", style=_STYLE[outcome])
    if run.problem is not None:
        text.append(" could not finish", style="dim")
    return text


def render(report: CrashReport, out: Console) -> None:
    """The matrix (fault point by call), the points that did not apply, and the verdict."""
    matrix = report.matrix()
    columns = len(report.calls)
    out.print(
        f"crashtest {report.factory}: control run {report.control_seconds:.2f} s, "
        f"{len(report.calls)} tool call(s), {report.expected} effect(s) counted by {report.probe}. "
        "Cells read effects / expected, per faulted thread."
    )
    table = Table(box=box.SIMPLE_HEAD, show_lines=False)
    table.add_column("fault point")
    for index in range(1, columns + 1):
        tool = report.calls[index - 1].tool if index <= len(report.calls) else ""
        table.add_column(f"call {index}\n{tool}", justify="center")
    for point in POINTS:
        cells = matrix.get(point)
        if not cells:
            continue
        row: list[Text | str] = [point]
        for index in range(1, columns + 1):
            run = cells.get(str(index))
            row.append(_cell(run) if run is not None else "")
        table.add_row(*row)
    out.print(table)
    randoms = [run for run in report.runs if run.point == RANDOM]
    if randoms:
        line = Text("random kills: ")
        for number, run in enumerate(randoms):
            if number:
                line.append(" · ")
            moment = f"at {run.kill_after or 0.0:.2f} s" if run.kills else "ended before the kill"
            if run.restarts:
                moment += " (before the first checkpoint: started again)"
            line.append(f"{moment}: ")
            line.append_text(_cell_line(run))
        out.print(line)
    for point, why in report.not_applicable.items():
        out.print(Text(f"{point}: not run ({why})", style="dim"))
    used = [p for p in [*POINTS, RANDOM] if p in matrix]
    out.print(Text(" · ".join(f"{p}: {summary(p)}" for p in used), style="dim"))
    for run in report.broken:
        out.print(Text(f"{run.label}: could not be completed: {run.problem}", style="yellow"))
    style = {0: "bold green", 1: "bold red"}.get(report.exit_code, "bold yellow")
    out.print(Text(report.verdict(), style=style))
    out.print(f"{len(report.runs)} faulted runs in {report.seconds:.1f} s")


if __name__ == "__main__":
    sys.exit(main())
