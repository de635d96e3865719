"""``list`` and ``show``: read-only views of the ledger."""

from __future__ import annotations

import shlex
import time
from collections.abc import Sequence
from typing import Annotated

import typer
from rich import box
from rich.console import Group, RenderableType
from rich.json import JSON
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from ..core.operation import Operation, State, provider_check
from ..ledger.base import AuditEntry
from ..ledger.query import Cursor, cursor
from ..operator import (
    OperationView,
    has_password,
    lease_status,
    list_operations,
    operations_to_json,
    show,
)
from .app import OperationArgument, TenantOption
from .failures import BadInput, fail, run
from .render import STATE_STYLES, compact, field, print_json, relative, state_text, stdout, when
from .target import Target, ledger_command, open_target, parse_duration

# -- list ---------------------------------------------------------------------------


@ledger_command("list")
def list_command(
    target: Target,
    state: Annotated[
        list[State] | None,
        typer.Option(
            "--state",
            "-s",
            case_sensitive=False,
            metavar="STATE",
            help="Only this state (repeatable): pending, dispatched, unknown, review, "
            "confirmed, failed, abandoned. Default: every unresolved state.",
            show_default=False,
        ),
    ] = None,
    all_states: Annotated[bool, typer.Option("--all", help="Every state, resolved ones included.")] = False,
    thread: Annotated[str | None, typer.Option("--thread", help="Only this thread id.")] = None,
    tenant: TenantOption = None,
    tool: Annotated[str | None, typer.Option("--tool", help="Only this tool.")] = None,
    older_than: Annotated[
        str | None,
        typer.Option(
            "--older-than",
            metavar="SECONDS",
            help="Only operations unchanged for at least this long (600, 15m, 2h, 1d).",
        ),
    ] = None,
    limit: Annotated[int, typer.Option("--limit", min=1, help="At most this many.")] = 100,
    after: Annotated[
        str | None,
        typer.Option(
            "--after",
            metavar="CURSOR",
            help="Start after this point: the cursor a full page prints (its `next`), to read the next page.",
        ),
    ] = None,
) -> None:
    """List operations, unresolved ones by default, least recently changed first.

    Read-only: nothing is written, and it never waits for another process's write lock.
    """
    use_json = target.json
    try:
        if all_states and state:
            raise BadInput("give --state or --all, not both.")
        seconds = parse_duration(older_than) if older_than is not None else None
        start = parse_cursor(after) if after is not None else None
    except BadInput as error:
        fail(error, use_json)
    states: list[State] | None = list(State) if all_states else (state or None)

    async def work() -> list[Operation]:
        async with open_target(target, read_only=True) as ledger:
            return await list_operations(
                ledger, states=states, thread_id=thread, tenant=tenant, tool=tool, older_than=seconds,
                limit=limit, after=start,
            )

    ops = run(target, work)
    now = time.time()
    following = format_cursor(cursor(ops[-1])) if len(ops) >= limit else None
    if use_json:
        print_json(operations_to_json(ops, limit=limit, now=now, following=following))
        return
    _render_list(ops, now=now, limit=limit, states=states, target=target, following=following)


def format_cursor(position: Cursor) -> str:
    """A cursor as ``list --after`` takes it: the time exactly, a colon, the operation id."""
    return f"{position[0]!r}:{position[1]}"


def parse_cursor(text: str) -> Cursor:
    """``list --after``'s cursor (see `format_cursor`)."""
    stamp, colon, op_id = text.partition(":")
    try:
        position = (float(stamp), op_id)
    except ValueError:
        position = None
    if not colon or not op_id or position is None:
        raise BadInput(
            f"--after {text!r} is not a cursor: pass the `next` value a full page printed "
            "(a time, a colon, an operation id)."
        )
    return position


def _render_list(
    ops: list[Operation],
    *,
    now: float,
    limit: int,
    states: list[State] | None,
    target: Target,
    following: str | None = None,
) -> None:
    console = stdout()
    what = "Unresolved operations" if states is None else "Operations"
    if not ops:
        console.print(Text(f"{what}: none match.", style="green" if states is None else ""))
        return
    console.print(Text(f"{what} ({len(ops)}, least recently changed first)", style="bold"))
    wide = console.width >= 170
    table = _wide_table(ops, now) if wide else _narrow_table(ops, now, console.width)
    console.print(table)
    if following is not None:
        console.print(
            Text(f"Showing {limit}; the next page: add --after {shlex.quote(following)}.", style="dim"),
            soft_wrap=True,
        )
    inspect = target.command("show", shlex.quote(ops[0].op_id))
    console.print(Text(f"\nInspect one: {inspect}", style="dim"), soft_wrap=True)


def _wide_table(ops: list[Operation], now: float) -> Table:
    """One line per operation (a wide terminal, or output to a file or pipe)."""
    show_tenant = any(op.tenant for op in ops)
    table = Table(box=box.SIMPLE_HEAVY, show_edge=False)
    table.add_column("operation", no_wrap=True)
    table.add_column("state", no_wrap=True)
    table.add_column("v", justify="right")
    table.add_column("tool")
    table.add_column("thread")
    if show_tenant:
        table.add_column("tenant")
    table.add_column("contract")
    table.add_column("tries", justify="right")
    table.add_column("changed", no_wrap=True)
    table.add_column("provider key", no_wrap=True)
    table.add_column("args (redacted)", overflow="fold", max_width=50)
    for op in ops:
        row: list[RenderableType] = [
            Text(op.op_id, style="bold"),
            state_text(op, lease_status(op, now=now)),
            Text(str(op.version)),
            Text(op.tool),
            Text(op.thread_id),
        ]
        if show_tenant:
            row.append(field(op.tenant))
        row += [
            Text(op.contract),
            Text(str(op.attempts)),
            Text(relative(op.updated_at, now)),
            Text(op.provider_key),
            Text(compact(dict(op.args), 48), style="dim"),
        ]
        table.add_row(*row)
    return table


def _narrow_table(ops: list[Operation], now: float, width: int) -> Table:
    """Two lines per operation, for a narrow terminal: ids stacked, details stacked."""
    table = Table(box=box.SIMPLE_HEAVY, show_edge=False, show_lines=True)
    table.add_column("operation / provider key", no_wrap=True)
    table.add_column("state / version, tries, changed", no_wrap=True)
    table.add_column("tool / thread", overflow="fold")
    with_args = width >= 110
    if with_args:
        table.add_column("args (redacted)", overflow="fold")
    for op in ops:
        ids = Text(op.op_id, style="bold")
        ids.append("\n" + op.provider_key, style="dim")
        state = state_text(op, lease_status(op, now=now))
        tries = "try" if op.attempts == 1 else "tries"
        state.append(f"\nv{op.version}, {op.attempts} {tries}, {relative(op.updated_at, now)}", "dim")
        where = Text(op.tool)
        where.append("\n" + op.thread_id + (f" ({op.tenant})" if op.tenant else ""), "dim")
        row: list[RenderableType] = [ids, state, where]
        if with_args:
            row.append(Text(compact(dict(op.args), 90), style="dim"))
        table.add_row(*row)
    return table


# -- show ---------------------------------------------------------------------------


@ledger_command("show")
def show_command(
    target: Target,
    operation: OperationArgument,
    tenant: TenantOption = None,
) -> None:
    """Show one operation: arguments (redacted), keys, lease, evidence and audit trail.

    Read-only: nothing is written, and it never waits for another process's write lock.
    """

    async def work() -> OperationView:
        async with open_target(target, read_only=True) as ledger:
            return await show(ledger, operation, tenant=tenant)

    view = run(target, work)
    if target.json:
        print_json(view.to_json())
        return
    _render_view(view, now=time.time(), target=target, tenant=tenant)


def _render_view(view: OperationView, *, now: float, target: Target, tenant: str | None) -> None:
    op = view.operation
    console = stdout()
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="bold", no_wrap=True)
    facts.add_column(overflow="fold")
    facts.add_row("state", state_text(op, view.lease))
    facts.add_row("version", Text(str(op.version)))
    facts.add_row("tool", Text(op.tool))
    facts.add_row("contract", Text(op.contract))
    facts.add_row("thread", Text(op.thread_id))
    if op.checkpoint_ns:
        facts.add_row("namespace", Text(op.checkpoint_ns))
    facts.add_row("tenant", field(op.tenant))
    facts.add_row("policy version", field(op.policy_version))
    facts.add_row("tool call id", Text(op.tool_call_id))
    facts.add_row("message id", field(op.message_id))
    facts.add_row("checkpoint id", field(op.checkpoint_id))
    facts.add_row("provider key", Text(op.provider_key, style="bold"))
    facts.add_row("args hash", Text(op.args_hash))
    facts.add_row("attempts", Text(str(op.attempts)))
    facts.add_row("created", when(op.created_at, now))
    facts.add_row("changed", when(op.updated_at, now))
    facts.add_row("dispatched", when(op.dispatched_at, now))
    if op.owner is not None:
        facts.add_row(
            "owner",
            Text(f"{op.owner.host} pid {op.owner.pid} (dispatch {op.owner.token[:12]})"),
        )
    if op.lease_expires_at is not None:
        facts.add_row("lease until", when(op.lease_expires_at, now))
    if op.result is not None:
        facts.add_row(
            "result",
            Text(f"{op.result_type or 'unknown type'}, {len(op.result)} bytes (not shown)"),
        )
    if op.decisions:
        facts.add_row("decisions", Text(", ".join(d for d, _ in op.decisions)))
    if op.extra:
        facts.add_row("extra", Text(compact(dict(op.extra), 200)))

    parts: list[RenderableType] = [facts]
    erased = op.extra.get("erased")
    if isinstance(erased, dict):
        at = when(float(erased.get("at") or 0), now).plain
        parts.append(Text(
            f"\nData erased by {erased.get('by')} at {at}: its arguments, result and notes are "
            "gone; ids, states and times are kept.",
            "bold yellow",
        ))
    else:
        parts += [Text("\narguments (as stored, secrets redacted)", "bold")]
        parts.append(JSON.from_data(dict(op.args), default=str))
    if op.evidence is not None:
        parts += [Text("\nevidence", "bold"), JSON.from_data(dict(op.evidence), default=str)]
    console.print(Panel(Group(*parts), title=Text(op.op_id, style="bold"), title_align="left", expand=False))
    console.print()
    console.print(_audit_table(view.audit, now=now))
    console.print()
    for entry in view.late_sends:
        console.print(_late_send(view.operation, entry), soft_wrap=True)
    # soft_wrap: each hint stays one line, so it can be pasted as printed
    console.print(_what_to_do(view, target, tenant), soft_wrap=True)


def _late_send(op: Operation, entry: AuditEntry) -> Text:
    """The warning for one late send: a second request may have reached the provider."""
    evidence = dict(entry.evidence or {})
    sender = evidence.get("sender") or {}
    who = f"pid {sender.get('pid')} on {sender.get('host')}" if sender else "a worker"
    return Text(
        f"A second request may have reached the provider: the tool of a dispatch by {who} "
        f"finished after another worker took it over (audit #{entry.seq}, while "
        f"{evidence.get('state_then')}; its outcome: {evidence.get('outcome')}). Check the provider "
        f"for a duplicate under the key {op.provider_key}.",
        style="bold yellow",
    )


def _audit_table(trail: Sequence[AuditEntry], *, now: float) -> Table:
    table = Table(
        title=Text("audit trail", style="bold"),
        box=box.SIMPLE_HEAVY,
        show_edge=False,
        title_justify="left",
    )
    table.add_column("#", justify="right")
    table.add_column("when", no_wrap=True)
    table.add_column("actor")
    table.add_column("event")
    table.add_column("transition", no_wrap=True)
    table.add_column("v", justify="right")
    table.add_column("evidence", overflow="fold")
    for entry in trail:
        move = Text()
        if entry.from_state is not None:
            move.append(entry.from_state.value, STATE_STYLES[entry.from_state])
            move.append(" -> ")
        move.append(entry.to_state.value, STATE_STYLES[entry.to_state])
        table.add_row(
            Text(str(entry.seq)),
            Text(relative(entry.at, now)),
            Text(entry.actor),
            Text(entry.event),
            move,
            Text(str(entry.version)),
            Text(compact(dict(entry.evidence), 120) if entry.evidence is not None else "-"),
        )
    return table


def _what_to_do(view: OperationView, target: Target, tenant: str | None) -> RenderableType:
    op = view.operation
    if view.lease == "live":
        return Text(
            "Someone is sending this right now (live lease): wait for the worker or for the "
            "lease to expire before giving a verdict.",
            style="blue",
        )
    if not view.allowed_verdicts:
        if op.terminal:
            return Text(f"Resolved ({op.state.value}): no verdict to give.", style="green")
        return Text(
            f"{op.state.value}: nothing is in doubt; the graph sends it on its next run.",
            style="cyan",
        )
    words = ["resolve", shlex.quote(op.op_id), "--expected-version", str(op.version)]
    if tenant:
        words += ["--tenant", shlex.quote(tenant)]
    base = target.command(*words)
    lines = Text(provider_check(op), style="bold")
    lines.append("\nGive a verdict:\n", style="bold")
    lines.append(f'  {base} --landed --receipt \'{{"id": "..."}}\'\n')
    lines.append(f"  {base} --not-landed\n")
    lines.append(f"  {base} --abandon --reason '...'")
    if view.lease is not None:
        lines.append(
            "\n  (its sender is gone: the lost lease is recorded first, then your verdict)",
            style="dim",
        )
    if has_password(target.db):
        lines.append(
            "\n  (the password is not printed: give it through PGPASSWORD or ~/.pgpass)", style="dim"
        )
    return lines

