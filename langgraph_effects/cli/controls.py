"""``controls``: the budgets (used and left) and circuit breakers stored in the ledger."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from typing import Any

from rich import box
from rich.table import Table
from rich.text import Text

from ..core.controls import describe
from .failures import run
from .render import print_json, relative, stdout
from .target import Target, ledger_command, open_target

_STATUS_STYLES = {"closed": "green", "open": "bold red", "half-open": "yellow", "probing": "yellow"}


@ledger_command("controls")
def controls_command(target: Target) -> None:
    """Show every budget (sends and total used, and what is left) and every circuit
    breaker (closed, open, half-open), open circuits first.

    Read-only: nothing is written. A budget appears once a send was charged to it.
    """

    async def work() -> list[Any]:
        async with open_target(target, read_only=True) as ledger:
            return await ledger.control_rows()  # type: ignore[no-any-return]

    now = time.time()
    shown = [d for d in (describe(row, now=now) for row in run(target, work)) if d is not None]
    budgets = [d for d in shown if d["kind"] == "budget"]
    circuits = sorted((d for d in shown if d["kind"] == "circuit"), key=lambda d: d["status"] == "closed")
    if target.json:
        print_json({"budgets": budgets, "circuits": circuits})
        return
    console = stdout()
    if not shown:
        console.print(Text("No budget or circuit breaker has been used in this ledger.", style="green"))
        return
    if circuits:
        console.print(circuit_table(circuits, now))
    if budgets:
        console.print(budget_table(budgets))


def circuit_table(circuits: Sequence[Mapping[str, Any]], now: float) -> Table:
    """The circuit breakers, one line each (also shown by ``stats``)."""
    table = Table(box=box.SIMPLE_HEAVY, show_edge=False, title="Circuit breakers", title_justify="left")
    for column in ("circuit", "status", "recent failures", "opened"):
        table.add_column(column)
    for d in circuits:
        opened = relative(d["opened_at"], now) if d["opened_at"] is not None else "-"
        failures = f"{d['failures']}/{d['threshold']}" if d["threshold"] else str(d["failures"])
        table.add_row(d["name"], Text(d["status"], style=_STATUS_STYLES[d["status"]]), failures, opened)
    return table


def budget_table(budgets: Sequence[Mapping[str, Any]]) -> Table:
    """The budgets, one line per scope (also shown by ``stats``)."""
    table = Table(box=box.SIMPLE_HEAVY, show_edge=False, title="Budgets", title_justify="left")
    for column in ("budget", "scope (tenant, thread/run, window)", "sends", "left", "total", "left "):
        table.add_column(column)
    for d in budgets:
        table.add_row(
            d["name"],
            ", ".join(str(part) for part in d["scope"]) if isinstance(d["scope"], list) else d["scope"],
            str(d["sends"]),
            _left(d["sends_left"]),
            f"{d['total']:g}",
            _left(d["total_left"]),
        )
    return table


def _left(value: float | None) -> Text:
    if value is None:
        return Text("-", style="dim")
    return Text(f"{value:g}", style="bold red" if value <= 0 else "")
