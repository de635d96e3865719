"""``langgraph-effects lab``: run the crash matrix and print what the providers saw.

Rows are strategies (per provider), columns are crash points, and every cell
reads ``effects / missing`` as counted from the provider's own records for N
intended operations. The seed rows are expected to duplicate or lose work;
only rows of this package decide the exit code:

* 0: every row of ours held its invariants (0 duplicates, 0 missing, 0 open);
* 1: a row of ours broke one;
* 2: usage error (unknown option, strategy or crash point);
* 5: a cell could not be run: a worker died where nothing was injected, or an
  attempt raised (a bug, as the console's exit code 5).

``--soak N`` runs N operations of ours instead, spread over the built-in
providers, each faulted or not by a seeded draw: killed at A, B or C, a lost
response, or SIGKILLed by the lab at a random moment of its first attempt. It
reports duplicates, missing effects and operations left open, with the same
exit codes.

Every finished cell prints one line to stderr, also when it is not a terminal
(CI logs).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Sequence
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from importlib.metadata import version
from pathlib import Path
from typing import Any

from rich import box
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from .driver import context, forkserver_pid
from .faults import CRASH_POINTS, CrashPoint
from .harness import Cell, CellResult, SoakFault, crash_point, run_cell
from .mcprow import add_opt_in_arguments, opt_in_points
from .providers import MODES
from .schedule import MAX_CELLS_PER_JOB, Admission, cpu_seconds, timings
from .strategies import Strategy, registered
from .worker import ProviderSettings

#: The default run: 10 faulted operations per cell, as the seed experiment's 100 actions
#: with 10 crashes had, and 4 unfaulted ones after each, run by the worker that replaced
#: the killed one. The faults are what a cell tests; the unfaulted operations between them all
#: take the same path (the ``none`` column runs it alone), so more of them cost time
#: without testing more. ``--ops 100 --kill-every 10`` runs the experiment's own shape.
OPS, KILL_EVERY = 50, 5


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="langgraph-effects lab",
        description=(
            "Crash lab: run N operations per cell through real LangGraph graphs, "
            "SIGKILL the worker at a crash point on every K-th one, resume, and count "
            "effects from the provider's own records."
        ),
    )
    parser.add_argument("--ops", type=int, default=OPS, help=f"operations per cell ({OPS})")
    parser.add_argument(
        "--kill-every",
        type=int,
        default=KILL_EVERY,
        metavar="K",
        help=f"fault every K-th operation ({KILL_EVERY}: {OPS // KILL_EVERY} faulted per cell)",
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=None,
        help="draw which operations are faulted (every K-th from a seeded offset); "
        "default: operations K, 2K, ...",
    )
    parser.add_argument("--json", type=Path, metavar="PATH", help="write every row as JSON")
    parser.add_argument("--strategies", metavar="A,B", help="comma-separated strategy names (default: all)")
    parser.add_argument(
        "--crash-points",
        metavar="A,B",
        help="comma-separated crash points (default: all but the opt-in ones: mcp-lost, the --controls ones)",
    )
    add_opt_in_arguments(parser)  # --mcp, --controls
    parser.add_argument(
        "--workdir",
        type=Path,
        help="keep the cells' SQLite files under this directory (default: a temp dir, removed)",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=(os.cpu_count() or 2) + 1,
        help="busy cells at once (CPU count + 1); a cell that mostly waits (a paused owner, "
        "held sends, a child sender) counts as the share of its time it computes",
    )
    parser.add_argument(
        "--timings",
        action="store_true",
        help="also print cell-seconds per column and row, and the CPU seconds the run used",
    )
    parser.add_argument("--lag", type=float, default=0.2, help="seconds the lagging provider's listing lags")
    parser.add_argument("--list", action="store_true", help="list strategies and crash points, then exit")
    parser.add_argument(
        "--soak",
        type=int,
        metavar="N",
        help="instead of the matrix: N operations of ours across the built-in providers, "
        "faulted at random (seeded by --seed, default 0): kills at A/B/C, lost responses, "
        "SIGKILLs at a random moment. Exit 1 on any duplicate, missing or open operation",
    )
    parser.add_argument(
        "--soak-chunk",
        type=int,
        default=SOAK_CHUNK,
        metavar="M",
        help=f"operations per soak cell (each on fresh files; {SOAK_CHUNK})",
    )
    return parser


#: Operations per soak cell: small enough for a progress line every few seconds.
SOAK_CHUNK = 100
#: Share of soak operations whose first attempt is faulted.
SOAK_FAULTED = 0.5
#: What a faulted soak operation gets, drawn uniformly (``random`` thrice as often:
#: a kill at a random moment reaches places no named point does).
SOAK_FAULTS = ("A", "B", "C", "timeout", "random", "random", "random")
SOAK_POINT = CrashPoint("soak", "seeded random faults: kills at A/B/C, lost responses, random-moment kills")


EXIT_OK, EXIT_VIOLATED, EXIT_USAGE, EXIT_BROKEN_CELL = 0, 1, 2, 5


class _Usage(Exception):
    pass


def _names(value: str | None, known: Sequence[str], what: str) -> list[str]:
    if value is None:
        return list(known)
    names = [name.strip() for name in value.split(",") if name.strip()]
    unknown = [name for name in names if name not in known]
    if unknown:
        raise _Usage(f"unknown {what}: {', '.join(unknown)} (known: {', '.join(known)})")
    return names


def plan_cells(
    strategies: Sequence[Strategy],
    points: Sequence[str],
    *,
    ops: int,
    kill_every: int,
    phase: int,
    settings: ProviderSettings,
) -> list[Cell]:
    """Every (strategy, provider, crash point) cell, in table order. A column that names
    its providers (the edge paths) runs our rows only against those."""
    return [
        Cell(strategy, provider, crash_point(point), ops, kill_every, phase, settings)
        for strategy in strategies
        for provider in strategy.providers
        for point in points
        if point in strategy.columns() and _runs(strategy, provider, CRASH_POINTS[point])
    ]


def _runs(strategy: Strategy, provider: str, point: CrashPoint) -> bool:
    return not strategy.ours or point.providers is None or provider in point.providers


def main(argv: list[str] | None = None) -> int:
    """Run the lab; returns the process exit code (see the module docstring)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:  # --help, or argparse's own usage error (already printed)
        return int(exit_.code or 0)
    try:
        return _main(args)
    except _Usage as error:
        parser.print_usage(sys.stderr)
        print(f"{parser.prog}: error: {error}", file=sys.stderr)
        return EXIT_USAGE


def _main(args: argparse.Namespace) -> int:
    available = registered()
    out = Console()
    if not out.is_terminal:
        # Piped into a file or a README: do not squeeze the table into 80 columns.
        out = Console(width=120)
    if args.list:
        _print_catalogue(out, available)
        return EXIT_OK
    if args.ops < 1 or args.kill_every < 1 or args.jobs < 1:
        raise _Usage("--ops, --kill-every and --jobs must be at least 1")
    if args.soak is not None:
        return _soak(args, out, available)
    chosen = [available[n] for n in _names(args.strategies, list(available), "strategies")]
    points = _names(args.crash_points, list(CRASH_POINTS), "crash points")
    named = args.crash_points is not None
    points, problem = opt_in_points(points, named=named, mcp=args.mcp, controls=args.controls)
    if problem:
        raise _Usage(problem)
    phase = 0 if args.seed is None else random.Random(args.seed).randrange(args.kill_every)
    settings = ProviderSettings(lag=args.lag)
    cells = plan_cells(
        chosen, points, ops=args.ops, kill_every=args.kill_every, phase=phase, settings=settings
    )
    if not cells:
        raise _Usage("nothing to run: no chosen strategy runs these crash points (opt-in: --mcp, --controls)")

    results, elapsed, rundir = _run_in_workdir(args, cells)
    cpu = cpu_seconds(forkserver_pid())

    out.print(
        f"[bold]Crash lab[/bold]: {args.ops} operations per cell; the first attempt of every "
        f"{_ordinal(args.kill_every)} one is faulted, then its thread is resumed. Each cell reads "
        "[bold]effects / missing[/bold], counted from the provider's own records."
    )
    groups = dict.fromkeys(CRASH_POINTS[p].group for p in points)
    for group in groups:
        columns = [p for p in points if CRASH_POINTS[p].group == group]
        if any(r.crash_point in columns for r in results):
            table = render_table(results, columns)
            if len(groups) > 1:
                table.title, table.title_justify = group, "left"
            out.print(table)
    for line in legend(results, points):
        out.print(line, style="dim", highlight=False)
    for line in _verdict(results, elapsed, args.jobs):
        out.print(line)
    if args.timings:
        for line in timings(results, elapsed, cpu):
            out.print(line, style="dim", highlight=False)
    if args.json is not None:
        _write_json(args, results, elapsed, phase, rundir if args.workdir else None, cpu)
    if any(r.error for r in results):
        return EXIT_BROKEN_CELL
    return EXIT_VIOLATED if any(r.ours and r.violations() for r in results) else EXIT_OK


def _run_in_workdir(args: argparse.Namespace, cells: Sequence[Cell]) -> tuple[list[CellResult], float, Path]:
    base = args.workdir or Path(tempfile.mkdtemp(prefix="lge-lab-", dir=_scratch_dir()))
    rundir = base / time.strftime(f"run-%Y%m%d-%H%M%S-{os.getpid()}")
    started = time.perf_counter()
    try:
        results = _run(cells, rundir, args.jobs)
    finally:
        if args.workdir is None:
            shutil.rmtree(base, ignore_errors=True)
    return results, time.perf_counter() - started, rundir


def soak_schedule(rng: random.Random, ops: int) -> tuple[SoakFault, ...]:
    """Each operation's fault: ``none`` for about half, else one of `SOAK_FAULTS`
    (with the moment, a fraction of a typical attempt, for ``random``)."""
    return tuple(
        (rng.choice(SOAK_FAULTS) if rng.random() < SOAK_FAULTED else "none", rng.random()) for _ in range(ops)
    )


def plan_soak(
    strategy: Strategy, total: int, chunk: int, seed: int, settings: ProviderSettings
) -> list[Cell]:
    """The soak's cells: ``total`` operations in chunks, the providers taking turns."""
    rng = random.Random(seed)
    cells = []
    first = 1
    for number in range((total + chunk - 1) // chunk):
        ops = min(chunk, total - first + 1)
        provider = strategy.providers[number % len(strategy.providers)]
        cells.append(
            Cell(
                strategy,
                provider,
                SOAK_POINT,
                ops,
                kill_every=1,
                settings=settings,
                schedule=soak_schedule(rng, ops),
                first_index=first,
                tag=f"--{number:05d}",
            )
        )
        first += ops
    return cells


def _soak(args: argparse.Namespace, out: Console, available: dict[str, Strategy]) -> int:
    if args.soak < 1 or args.soak_chunk < 1:
        raise _Usage("--soak and --soak-chunk must be at least 1")
    if args.strategies is not None or args.crash_points is not None:
        raise _Usage("--soak runs our strategy with random faults: drop --strategies/--crash-points")
    ours = [s for s in available.values() if s.ours and set(MODES) <= set(s.providers)]
    if not ours:
        raise _Usage("no strategy of ours runs every built-in provider")
    seed = 0 if args.seed is None else args.seed
    cells = plan_soak(ours[0], args.soak, args.soak_chunk, seed, ProviderSettings(lag=args.lag))
    results, elapsed, rundir = _run_in_workdir(args, cells)
    cpu = cpu_seconds(forkserver_pid())
    totals = soak_totals(results)
    out.print(render_soak(results))
    if args.timings:
        for line in timings(results, elapsed, cpu):
            out.print(line, style="dim", highlight=False)
    failed = [r for r in results if r.violations() or r.error]
    for r in failed[:20]:
        why = r.error.strip().splitlines()[-1] if r.error else "; ".join(r.violations())
        out.print(f"[bold red]FAIL[/bold red] {r.provider} operations {_span(r)}: {why}", highlight=False)
    verdict = (
        f"soak: {totals['operations']} operations, {totals['faulted']} faulted "
        f"({totals['kills']} killed, {totals['random_kills']} of them at a random moment): "
        f"{totals['duplicates']} duplicates, {totals['missing']} missing, "
        f"{totals['non_terminal']} left non-terminal, {totals['pending_reviews']} reviews unanswered "
        f"({totals['sent_to_review']} sent to review) · seed {seed} · {elapsed:.1f} s"
    )
    out.print(f"[bold red]{verdict}[/bold red]" if failed else f"[green]{verdict}[/green]", highlight=False)
    if args.json is not None:
        document = {
            "soak": {
                "operations": args.soak,
                "chunk": args.soak_chunk,
                "seed": seed,
                "seconds": round(elapsed, 3),
            },
            "totals": totals,
            "workdir": str(rundir) if args.workdir else None,
            "rows": [r.to_json() for r in results],
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(document, indent=2) + "\n")
    if any(r.error for r in results):
        return EXIT_BROKEN_CELL
    return EXIT_VIOLATED if failed else EXIT_OK


def _span(result: CellResult) -> str:
    return f"{result.first_operation}-{result.first_operation + result.operations - 1}"


def soak_totals(results: Sequence[CellResult]) -> dict[str, int]:
    """The soak's sums over its cells (the counts its verdict and exit code rest on)."""
    fields = (
        "intended",
        "faulted",
        "kills",
        "random_kills",
        "sends",
        "effects",
        "duplicates",
        "missing",
        "sent_to_review",
        "pending_reviews",
        "tool_errors",
    )
    totals = {name: sum(int(getattr(r, name)) for r in results) for name in fields}
    totals["operations"] = sum(r.operations for r in results)
    totals["non_terminal"] = sum(r.non_terminal or 0 for r in results)
    totals["cells_failed"] = sum(1 for r in results if r.error or r.violations())
    return totals


def render_soak(results: Sequence[CellResult]) -> Table:
    """One row per provider: what the soak did to it and what its records say."""
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, title="soak", title_justify="left")
    columns = (
        "provider",
        "operations",
        "faulted",
        "killed",
        "random",
        "effects",
        "dup",
        "missing",
        "open",
        "review",
    )
    for name in columns:
        table.add_column(name, justify="left" if name == "provider" else "right")
    for provider in dict.fromkeys(r.provider for r in results):
        rows = [r for r in results if r.provider == provider]
        sums = soak_totals(rows)
        bad = sums["duplicates"] or sums["missing"] or sums["non_terminal"] or sums["cells_failed"]
        table.add_row(
            provider,
            str(sums["operations"]),
            str(sums["faulted"]),
            str(sums["kills"]),
            str(sums["random_kills"]),
            str(sums["effects"]),
            str(sums["duplicates"]),
            str(sums["missing"]),
            str(sums["non_terminal"]),
            str(sums["sent_to_review"]),
            style="bold red" if bad else None,
        )
    return table


def _scratch_dir() -> str | None:
    """tmpfs when there is one.

    The lab kills processes, not the machine: what a process wrote before its
    SIGKILL is in the page cache and survives, so tmpfs keeps every crash
    semantics while making ``synchronous=FULL`` commits cheap (on a disk each
    costs an fsync, ~10 per operation). ``--workdir`` runs on a real disk.
    """
    shm = Path("/dev/shm")
    return str(shm) if shm.is_dir() and os.access(shm, os.W_OK) else None


def _run(cells: Sequence[Cell], rundir: Path, jobs: int) -> list[CellResult]:
    ctx = context()
    err = Console(stderr=True)
    progress = Progress(
        TextColumn("[bold]crash lab[/bold]"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("operations · {task.fields[cells]}"),
        TimeElapsedColumn(),
        console=err,
        transient=True,
    )
    total = sum(cell.ops for cell in cells)
    results: dict[int, CellResult] = {}
    started = time.perf_counter()
    with progress:
        task = progress.add_task("lab", total=total, cells=f"0/{len(cells)} cells")

        def one(position: int, cell: Cell) -> CellResult:
            try:
                return run_cell(ctx, cell, rundir / cell.name, on_operation=lambda: progress.advance(task))
            except Exception:
                failed = CellResult(
                    cell.strategy.name, cell.provider, cell.crash_point.name, cell.strategy.ours
                )
                failed.error = traceback.format_exc()
                return failed

        # The longest cells first, and cells that mostly wait (pauses, held sends) count
        # as the share of their time they compute (schedule.Admission).
        admission = Admission(cells, jobs)
        with ThreadPoolExecutor(max_workers=jobs * MAX_CELLS_PER_JOB) as pool:
            running: dict[Future[CellResult], int] = {}
            while admission.pending or running:
                for i in admission.ready():
                    running[pool.submit(one, i, cells[i])] = i
                finished, _ = wait(running, return_when=FIRST_COMPLETED)
                for future in finished:
                    position = running.pop(future)
                    admission.finished(position)
                    result = results[position] = future.result()
                    progress.update(task, cells=f"{len(results)}/{len(cells)} cells")
                    # One plain line per cell, above the bar on a terminal and on its own in
                    # a CI log (where the bar is not drawn): a long run is never silent.
                    progress.console.print(
                        progress_line(result, len(results), len(cells), time.perf_counter() - started),
                        highlight=False,
                        markup=False,
                        soft_wrap=True,
                    )
    return [results[i] for i in range(len(cells))]


def progress_line(result: CellResult, done: int, total: int, elapsed: float) -> str:
    """``[done/total] strategy/provider/point: effects / missing ... (s)``, one per cell."""
    name = f"{result.strategy}/{result.provider}/{result.crash_point}"
    if result.crash_point == SOAK_POINT.name:
        name += f" #{_span(result)}"
    if result.error:
        verdict = "error: " + result.error.strip().splitlines()[-1]
    else:
        verdict = f"{result.effects} / {result.missing} of {result.intended}"
        if result.sent_to_review:
            verdict += f", review {result.sent_to_review}"
        if result.ours:
            problems = result.violations()
            verdict += f" · FAIL: {'; '.join(problems)}" if problems else " · ok"
    return f"[{done}/{total}] {name}: {verdict} ({result.seconds:.1f} s; {elapsed:.0f} s elapsed)"


def _cell_text(result: CellResult) -> Text:
    if result.error:
        return Text("error", style="bold red")
    text = Text(f"{result.effects} / {result.missing}")
    if result.duplicates and result.missing:
        text.stylize("bold magenta")
    elif result.duplicates:
        text.stylize("bold red")
    elif result.missing:
        text.stylize("bold yellow")
    else:
        text.stylize("green")
    notes = []
    if result.sent_to_review:
        answered = result.reviews_answered
        notes.append(
            f"review {result.sent_to_review}"
            if answered >= result.sent_to_review
            else f"review {result.sent_to_review}, {answered} answered"
        )
    if result.non_terminal:
        notes.append(f"open {result.non_terminal}")
    if result.pending_reviews:
        notes.append(f"unanswered {result.pending_reviews}")
    if notes:
        failing = result.ours and bool(result.violations())
        text.append("\n" + " · ".join(notes), style="bold red" if failing else "cyan")
    return text


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def render_table(results: Sequence[CellResult], points: Sequence[str]) -> Table:
    """Rows: strategy x provider (the seed's rows, then ours); columns: crash points;
    cells: effects / missing, and how many operations went to an operator."""
    used = [p for p in points if any(r.crash_point == p for r in results)]
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False)
    table.add_column("strategy", no_wrap=True)
    table.add_column("provider", style="dim", no_wrap=True)
    for point in used:
        table.add_column(point.replace("-", "\n", 1), justify="center", no_wrap=True)
    rows: dict[tuple[str, str], dict[str, CellResult]] = {}
    ours: dict[tuple[str, str], bool] = {}
    for result in results:
        if result.crash_point not in used:
            continue  # a row with no cell in this table (the entrypoint rows) is not shown
        key = (result.strategy, result.provider)
        rows.setdefault(key, {})[result.crash_point] = result
        ours[key] = result.ours
    # The seed's rows first, then ours; each strategy named once, on its first row.
    ordered = sorted(rows, key=lambda key: ours[key])
    previous: tuple[str, bool] | None = None
    for key in ordered:
        if previous is not None and previous[1] != ours[key]:
            table.add_section()
        first = previous is None or previous[0] != key[0]
        label = Text(key[0] if first else "", style="bold" if ours[key] else "")
        by_point = rows[key]
        cells = [_cell_text(by_point[p]) if p in by_point else Text("n/a", style="dim") for p in used]
        table.add_row(label, key[1], *cells)
        previous = (key[0], ours[key])
    return table


def legend(results: Sequence[CellResult], points: Sequence[str]) -> list[str]:
    """The lines under the table: how to read a cell, and what each column injects."""
    used = [p for p in points if any(r.crash_point == p for r in results)]
    lines = [
        "effects / missing: green exact, red duplicated, yellow lost work, magenta both · "
        "review N: operations sent to an operator, answered from the provider's records · "
        "n/a: the seed rows never look anything up"
        + (
            "; in the edge paths, our rows run only the providers the path depends on"
            if any(CRASH_POINTS[p].group == "edge paths" for p in used if p in CRASH_POINTS)
            else ""
        )
    ]
    lines.append(" · ".join(f"{p}: {_summary(CRASH_POINTS[p])}" for p in used if p in CRASH_POINTS))
    return lines


def _summary(point: CrashPoint) -> str:
    if point.per_operation > 1:
        return f"{point.summary} ({point.per_operation} effects meant per thread)"
    return point.summary


def _verdict(results: Sequence[CellResult], elapsed: float, jobs: int) -> list[str]:
    seed = [r for r in results if not r.ours and not r.error]
    lines = []
    if seed:
        dup = sum(1 for r in seed if r.duplicates)
        lost = sum(1 for r in seed if r.missing)
        lines.append(
            f"seed strategies: {dup} of {len(seed)} cells duplicated effects, {lost} lost work "
            "(expected: that is what the seed experiment showed)"
        )
    ours = [r for r in results if r.ours]
    if ours:
        broken = [r for r in ours if r.violations()]
        if broken:
            for r in broken:
                lines.append(
                    f"[bold red]FAIL[/bold red] {r.strategy}/{r.provider}/{r.crash_point}: "
                    + "; ".join(r.violations())
                )
        else:
            lines.append(
                f"[green]ours: all {len(ours)} cells hold: 0 duplicates, 0 missing, "
                "0 operations left non-terminal in the ledger[/green]"
            )
        reviewed = sum(r.sent_to_review for r in ours)
        answered = sum(r.reviews_answered for r in ours)
        lines.append(
            f"ours: {reviewed} operations sent to review ({answered} answers given); " + _blind_summary(ours)
        )
    for r in results:
        if r.error:
            first = r.error.strip().splitlines()[-1]
            lines.append(f"[bold red]ERROR[/bold red] {r.strategy}/{r.provider}/{r.crash_point}: {first}")
    ops = sum(r.intended for r in results)
    lines.append(f"{len(results)} cells, {ops} operations in {elapsed:.1f} s ({jobs} at a time)")
    return lines


def _blind_summary(ours: Sequence[CellResult]) -> str:
    blind = [r for r in ours if r.provider == "blind" and not r.error]
    if not blind:
        return "no blind provider ran"
    ambiguous = sum(
        r.faulted for r in blind if r.crash_point in CRASH_POINTS and CRASH_POINTS[r.crash_point].ambiguous
    )
    reviewed = sum(r.sent_to_review for r in blind)
    # definite-retry: each faulted operation's 429 is a request that applied nothing.
    resent = sum(r.sends - r.effects - (r.faulted if _rate_limited(r) else 0) for r in blind)
    return (
        f"blind provider: {ambiguous} ambiguous crashes, {reviewed} surfaced to review, "
        f"{resent} re-sent automatically"
    )


def _rate_limited(result: CellResult) -> bool:
    point = CRASH_POINTS.get(result.crash_point)
    return point is not None and point.rate_limited


def _write_json(
    args: argparse.Namespace,
    results: Sequence[CellResult],
    elapsed: float,
    phase: int,
    kept: Path | None,
    cpu: tuple[float, float],
) -> None:
    document: dict[str, Any] = {
        "experiment": {
            "ops": args.ops,
            "kill_every": args.kill_every,
            "seed": args.seed,
            "phase": phase,
            "lag": args.lag,
            "jobs": args.jobs,
            "seconds": round(elapsed, 3),
            "cpu_seconds": {"lab": round(cpu[0], 2), "workers": round(cpu[1], 2)},
            "workdir": str(kept) if kept else None,
        },
        "environment": {
            "python": platform.python_version(),
            "platform": sys.platform,
            "cpus": os.cpu_count(),
            "langgraph": version("langgraph"),
            "langchain-core": version("langchain-core"),
        },
        "crash_points": {name: cp.summary for name, cp in CRASH_POINTS.items()},
        "rows": [r.to_json() for r in results],
    }
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(document, indent=2) + "\n")


def _print_catalogue(out: Console, strategies: dict[str, Strategy]) -> None:
    table = Table(title="strategies", title_justify="left")
    for column in ("name", "kind", "providers", "crash points", "summary"):
        table.add_column(column)
    for s in strategies.values():
        table.add_row(
            s.name, "ours" if s.ours else "seed", ",".join(s.providers), ",".join(s.columns()), s.summary
        )
    out.print(table)
    points = Table(title="crash points", title_justify="left")
    points.add_column("name")
    points.add_column("what happens")
    for name, cp in CRASH_POINTS.items():
        notes = ["ours only"] if cp.ours_only else []
        if cp.providers is not None:
            notes.append(f"ours: {', '.join(cp.providers)}")
        points.add_row(name, cp.summary + (f" ({'; '.join(notes)})" if notes else ""))
    out.print(points)
