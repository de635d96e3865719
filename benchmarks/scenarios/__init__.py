"""The benchmark's scenarios: one module each, all run by ``benchmarks/run.py``.

A scenario module exposes:

* its docstring, whose first line ``run.py --list`` prints;
* ``CONFIGURATIONS``: the names of what it compares (the rows of its table);
* ``async def run(args, ctx) -> dict``: runs them and returns the part of the run's JSON
  it fills (``{"e2e": ...}`` for ``turn``; ``{"scenarios": {name: {"lines": [...], ...}}}``
  for the others: ``lines`` is the scenario's table as printed);
* optionally ``options(parser)``: options of its own, accepted when it is the only
  scenario named, and ``QUICK``: the options of a tiny run (the smoke tests use them).

``Context`` is what the runner hands every scenario.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

#: name -> module, in the order a run that names several runs them.
NAMES = (
    "turn",
    "counts",
    "scan",
    "memory",
    "sync",
    "turn_split",
    "floor_split",
    "gc_churn",
    "fencing",
    "fencing_race",
    "ledger_pairs",
    "ledger_throughput",
    "lease_children",
    "lease_window",
    "turn_read",
    "unfinished_scan",
    "ledger_scale",
)
#: What ``python benchmarks/run.py`` runs when no scenario is named: the table that
#: docs/performance.md shows.
DEFAULT = ("turn", "counts", "scan", "memory")


def load(name: str) -> ModuleType:
    if name not in NAMES:
        raise ValueError(f"unknown scenario {name!r} (known: {', '.join(NAMES)})")
    return importlib.import_module(f"scenarios.{name}")


def summary(module: ModuleType) -> str:
    return (module.__doc__ or "").strip().split("\n\n")[0].replace("\n", " ")


@dataclass
class Context:
    """What the runner hands every scenario."""

    quick: bool
    workdir: Path
    dsn: str
    #: why the Postgres parts do not run (None: a server answers)
    pg_skip: str | None
    #: what ``--only`` leaves in (paths, backends, tool latencies, fan-outs)
    only: Any
    log: Callable[[str], None]
    #: every pyperf benchmark the run measured (``--pyperf`` writes them as one suite)
    benchmarks: list[Any] = field(default_factory=list)


def section(name: str, lines: list[str], **data: Any) -> dict[str, Any]:
    """A scenario's part of the JSON: its printed table and its figures."""
    return {"scenarios": {name: {"lines": lines, **data}}}


def batched_options(group: Any, *, fanout: int, batches: int) -> None:
    """``--fanout`` and ``--batches``, as the scenarios that run shuffled batches take them."""
    group.add_argument("--fanout", type=int, default=fanout)
    group.add_argument("--batches", type=int, default=batches)


def check_batched(args: Any) -> str | None:
    """Refuse values no interval can come from (a paired interval needs two batches)."""
    if args.batches < 2 or args.fanout < 1:
        return "--batches must be at least 2 (a confidence interval needs pairs) and --fanout at least 1"
    return None


def opt(args: Any, name: str, default: Any) -> Any:
    """A scenario option: given when the scenario was named alone, else its default."""
    value = getattr(args, name, None)
    return default if value is None else value
