"""``stats``: the ledger's health, and an exit code a cron job or a health check alerts on."""

from __future__ import annotations

import shlex
from typing import Annotated

import typer
from rich import box
from rich.table import Table
from rich.text import Text

from ..core.operation import UNRESOLVED, State
from ..operator import LedgerStats, stats
from .app import TenantOption
from .controls import budget_table, circuit_table
from .failures import EXIT_ALERT, BadInput, fail, run
from .render import STATE_STYLES, print_json, relative, stdout
from .target import Target, ledger_command, open_target, parse_duration


def _age_option(flag: str, what: str) -> object:
    return typer.Option(
        flag,
        metavar="DURATION",
        help=f"Exit 9 if {what} for longer than this (600, 15m, 2h, 1d).",
        show_default=False,
    )


@ledger_command("stats")
def stats_command(
    target: Target,
    tenant: TenantOption = None,
    all_states: Annotated[
        bool,
        typer.Option(
            "--all",
            help="Also count settled operations (confirmed, failed, abandoned): reads the whole "
            "operations table, so leave it out of a health check that runs often.",
        ),
    ] = False,
    max_review_age: Annotated[
        str | None, _age_option("--max-review-age", "an operation has waited for a verdict or an approval")
    ] = None,
    max_unresolved_age: Annotated[
        str | None, _age_option("--max-unresolved-age", "an unresolved operation has been unchanged")
    ] = None,
    limit: Annotated[
        int, typer.Option("--limit", min=1, help="Show at most this many waiting operations.")
    ] = 20,
) -> None:
    """Unresolved operations by state and tool, the oldest one, who waits for a human and
    for how long, budgets and circuit breakers.

    Exit 0 when no threshold is crossed, 9 when one is (--max-review-age,
    --max-unresolved-age): run it from cron or a health check. Read-only, and it never
    waits for another process's write lock.
    """
    try:
        review_age = parse_duration(max_review_age) if max_review_age is not None else None
        unresolved_age = parse_duration(max_unresolved_age) if max_unresolved_age is not None else None
    except BadInput as error:
        fail(error, target.json)

    async def work() -> LedgerStats:
        async with open_target(target, read_only=True) as ledger:
            return await stats(
                ledger, tenant=tenant, settled=all_states, limit=limit,
                max_review_age=review_age, max_unresolved_age=unresolved_age,
            )

    found = run(target, work)
    if target.json:
        print_json(found.to_json())
    else:
        _render(found, target)
    if found.alerts:
        raise typer.Exit(EXIT_ALERT)


def _render(found: LedgerStats, target: Target) -> None:
    console = stdout()
    now = found.at
    scope = f" (tenant {found.tenant})" if found.tenant is not None else ""
    console.print(Text(f"Ledger {found.ledger}{scope}", style="bold"))
    console.print(_states_table(found, now))
    if not found.settled:
        console.print(Text("  Settled operations are not counted: add --all (reads the whole table).", "dim"))
    if found.counts:
        console.print(_tools_table(found, now))
    oldest = found.oldest_unresolved
    if oldest is not None:
        line = Text("Oldest unresolved: ", style="bold")
        line.append(f"{oldest.op_id} ", style="bold")
        line.append(oldest.state.value, STATE_STYLES[oldest.state])
        line.append(f", {oldest.tool}, thread {oldest.thread_id}, changed {relative(oldest.updated_at, now)}")
        console.print(line, soft_wrap=True)
    console.print(_waiting(found, now))
    if found.circuits:
        console.print(circuit_table(found.circuits, now))
    if found.budgets:
        console.print(budget_table(found.budgets))
    if not found.circuits and not found.budgets:
        console.print(Text("No budget or circuit breaker has been used in this ledger.", style="dim"))
    for alert in found.alerts:
        console.print(Text(f"ALERT {alert['kind']}: {alert['message']}", style="bold red"), soft_wrap=True)
    if found.waiting:
        hint = target.command("show", shlex.quote(found.waiting[0].op_id))
        console.print(Text(f"\nInspect the longest waiting: {hint}", style="dim"), soft_wrap=True)


def _states_table(found: LedgerStats, now: float) -> Table:
    least_recent: dict[State, float] = {}
    for c in found.counts:
        seen = least_recent.get(c.state)
        least_recent[c.state] = c.least_recent_update if seen is None else min(seen, c.least_recent_update)
    title = f"Operations by state ({found.unresolved} unresolved)"
    table = Table(box=box.SIMPLE_HEAVY, show_edge=False, title=title, title_justify="left")
    table.add_column("state")
    table.add_column("count", justify="right")
    table.add_column("least recently changed")
    for state, n in found.by_state.items():
        changed = relative(least_recent[state], now) if state in least_recent else "-"
        name = state.value + ("" if state in UNRESOLVED else " (settled)")
        table.add_row(Text(name, STATE_STYLES[state]), str(n), changed)
    return table


def _tools_table(found: LedgerStats, now: float) -> Table:
    table = Table(box=box.SIMPLE_HEAVY, show_edge=False, title="By tool", title_justify="left")
    for column in ("tool", "state", "count", "least recently changed"):
        table.add_column(column, justify="right" if column == "count" else "left")
    for c in sorted(found.counts, key=lambda c: (c.tool, list(found.by_state).index(c.state))):
        state = Text(c.state.value, STATE_STYLES[c.state])
        table.add_row(c.tool, state, str(c.count), relative(c.least_recent_update, now))
    return table


def _waiting(found: LedgerStats, now: float) -> Table | Text:
    if not found.waiting:
        return Text("Nothing waits for a human.", style="green")
    longest = relative(found.waiting[0].updated_at, now).removesuffix(" ago")
    title = f"Waiting for a human ({found.waiting_count}, the longest for {longest})"
    if not found.waiting_complete:
        title += "; approvals looked for among the least recently changed pending operations only"
    table = Table(box=box.SIMPLE_HEAVY, show_edge=False, title=title, title_justify="left")
    for column in ("operation", "waits for", "tool", "thread", "since"):
        table.add_column(column, no_wrap=column != "thread")
    for op in found.waiting:
        waits = "verdict" if op.state.value == "review" else "approval"
        since = relative(op.updated_at, now)
        table.add_row(Text(op.op_id, style="bold"), waits, op.tool, op.thread_id, since)
    if len(found.waiting) < found.waiting_count:
        table.caption = f"Showing the {len(found.waiting)} longest waiting; raise --limit to see more."
    return table
