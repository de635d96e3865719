"""Before and after: ``benchmarks/run.py`` from two checkouts, alternated, row by row.

    python benchmarks/compare.py --before /work/wt/base --after . --rounds 3 \\
        -- turn --only node,sqlite,fanout1,timing --repeats 11

Runs ``<checkout>/benchmarks/run.py <args> --json <file>`` for before, after, before,
after, ... (``--rounds`` pairs; each run.py puts its own checkout first on
``sys.path``, so one interpreter measures both). Every row of the runs' JSON that has
a ratio to plain (``ratio`` and ``ratio_ci95``: the ``turn`` scenario's ``e2e`` rows,
and any scenario's rows shaped the same) is then printed once per side:

* ``ratio``: the median over the rounds of each run's ratio to plain, and ``[lo, hi]``
  the widest of the runs' 95% intervals (lowest low, highest high);
* ``CPU``: the median of the runs' CPU ratios (less moved by a loaded machine);
* ``ms/call``: the median over the rounds of the milliseconds added per call;

and, on the after side, ``change``: the after/before ratio of the two medians, with
the range of the rounds' own after/before ratios (round i's after over round i's
before), and the change of ms/call. On a loaded machine read the intervals first: a
change whose round-by-round range straddles 0% is not a change.

Progress (each run's command and its time) goes to stderr; the table to stdout.
``--keep DIR`` keeps the runs' JSON files there (default: a temporary directory).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

SIDES = ("before", "after")


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def rows(report: Any, prefix: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """(name, row) for every dict in ``report`` that carries a ratio and its interval."""
    if isinstance(report, dict):
        if "ratio" in report and "ratio_ci95" in report:
            yield prefix, report
            return
        for key, value in report.items():
            if key != "samples":
                yield from rows(value, f"{prefix}/{key}" if prefix else str(key))
    elif isinstance(report, list):
        for i, value in enumerate(report):
            yield from rows(value, f"{prefix}[{i}]")


def run_once(checkout: Path, args: list[str], target: Path, python: str) -> dict[str, Any]:
    command = [python, str(checkout / "benchmarks" / "run.py"), *args, "--json", str(target)]
    log("$ " + " ".join(command))
    started = time.perf_counter()
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)
    log(f"  {time.perf_counter() - started:.0f} s")
    return dict(json.loads(target.read_text()))


def median(got: list[dict[str, Any]], key: str) -> float:
    """The median of ``key`` over the runs' rows (NaN when a row lacks it)."""
    return statistics.median(float(row.get(key, float("nan"))) for row in got)


def side_line(got: list[dict[str, Any]]) -> str:
    """One side of a row: its ratio [the span of the runs' intervals], CPU ratio, ms/call."""
    lo = min(row["ratio_ci95"][0] for row in got)
    hi = max(row["ratio_ci95"][1] for row in got)
    ratio = f"{median(got, 'ratio'):.3f}x [{lo:.3f}, {hi:.3f}]"
    return f"{ratio:24s} {median(got, 'cpu_ratio'):5.3f}x {median(got, 'added_ms_per_call'):+8.2f}"


def change(after: list[dict[str, Any]], before: list[dict[str, Any]]) -> str:
    """After against before: the ratio's change, the rounds' own range, ms/call's change."""
    paired = [a["ratio"] / b["ratio"] - 1 for a, b in zip(after, before, strict=False)]
    moved = median(after, "ratio") / median(before, "ratio") - 1
    ms = median(after, "added_ms_per_call") - median(before, "added_ms_per_call")
    return f"{moved:+.1%} (rounds {min(paired):+.1%} to {max(paired):+.1%}), ms/call {ms:+.2f}"


def table(runs: dict[str, list[dict[str, Any]]]) -> str:
    """The rows found in the runs, each side on a line of its own."""
    found: dict[str, dict[str, list[dict[str, Any]]]] = {}
    for side in SIDES:
        for report in runs[side]:
            for name, row in rows(report):
                found.setdefault(name, {s: [] for s in SIDES})[side].append(row)
    width = max([len(name) for name in found] + [3])
    head = f"{'row':{width}s} {'side':6s} {'ratio [95% CI span]':24s} {'CPU':>6s} {'ms/call':>8s}  change"
    lines = [head]
    for name, sides in found.items():
        for side in SIDES:
            got = sides[side]
            line = f"{name:{width}s} {side:6s} " + (side_line(got) if got else "(no such row)")
            if side == "after" and got and sides["before"]:
                line += "  " + change(got, sides["before"])
            lines.append(line)
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ours, theirs = _split(argv)
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--before", type=Path, required=True, help="the checkout measured first")
    parser.add_argument("--after", type=Path, required=True, help="the checkout measured second")
    parser.add_argument("--rounds", type=int, default=3, help="before/after pairs (3)")
    parser.add_argument("--python", default=sys.executable, help="interpreter for run.py (this one)")
    parser.add_argument("--keep", type=Path, help="keep the runs' JSON here")
    args = parser.parse_args(ours)
    if args.rounds < 1:
        parser.error("--rounds must be at least 1")
    if not theirs or "--json" in theirs:
        parser.error("give run.py's arguments after --, without --json")
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.keep or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        runs: dict[str, list[dict[str, Any]]] = {side: [] for side in SIDES}
        for n in range(args.rounds):
            for side in SIDES:
                log(f"round {n + 1}/{args.rounds}, {side}")
                target = folder / f"{side}-{n + 1}.json"
                runs[side].append(run_once(getattr(args, side).resolve(), theirs, target, args.python))
    print(table(runs))
    return 0


def _split(argv: list[str]) -> tuple[list[str], list[str]]:
    """(compare's own arguments, run.py's: those after ``--``)."""
    if "--" not in argv:
        return argv, []
    i = argv.index("--")
    return argv[:i], argv[i + 1 :]


if __name__ == "__main__":
    sys.exit(main())
