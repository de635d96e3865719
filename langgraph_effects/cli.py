"""The operator console ``langgraph-effects``: find, inspect and resolve operations.

::

    langgraph-effects --db agent.db list                  # what is unresolved?
    langgraph-effects --db agent.db show OP               # everything needed to decide
    langgraph-effects --db agent.db resolve OP --landed --receipt '{"id": "r1"}' \\
        --expected-version 3                              # record a verdict
    langgraph-effects --db agent.db recover --graph myapp.agent:make_graph
                                                          # resume threads a crash left mid-effect
    langgraph-effects lab ...                             # the crash lab

``--db`` takes a SQLite file path or a Postgres DSN (``postgresql://...``, or libpq's
``host=... port=... dbname=...``); it defaults to ``$LANGGRAPH_EFFECTS_DB`` and may be
given before or after the command, like ``--schema`` (the ledger's Postgres schema) and
``--connect-timeout`` (seconds to wait for the server, or for SQLite's write lock;
default 5). ``--json`` prints machine-readable JSON on stdout (errors too, as
``{"error": {...}}``); human messages, errors and the line saying where the console
connects always go to stderr.

Reading never writes: ``list`` and ``show`` open the ledger read-only, and every
command refuses a database that holds no ledger (exit 4, nothing created). Tables are
created or migrated only by ``langgraph-effects setup`` (or the graph's ``setup()``).

A verdict is bound to the version you saw (``--expected-version``, printed by
``show``): if the operation changed since, it is refused and nothing is written.
Re-running ``resolve`` with the same ``--decision-id`` is safe (a no-op).

Exit codes: one table for every subcommand (``lab`` and ``crashtest`` included), see
:mod:`langgraph_effects.exitcodes`:

====  ==========================================================================
0     ok (also: nothing to do)
1     ``lab``/``crashtest``: an effect was duplicated or lost
2     usage or bad input: unknown option, missing ``--db``, two decision flags,
      ``--receipt`` that is not JSON or too big, ``--reason`` missing for ``--abandon``
3     refused, nothing written: stale ``--expected-version``, decision id reused
      with other content, a state that takes no verdict (already resolved,
      pending), or a live lease (someone is sending it right now)
4     ledger unavailable: the ``--db`` file does not exist (never created for
      you), the database holds no ledger (or one at another schema version), is
      locked, or the Postgres server is unreachable or does not answer in time
5     could not run: an internal error (a bug in langgraph-effects: please report
      it), or a lab/crashtest run that could not be made
6     ``recover`` only: done, but something waits for a human (an operation awaits
      an operator's verdict or approval, a thread is paused at another interrupt,
      or unresolved operations sit in a thread with no pending work)
7     ``recover`` only: resuming at least one thread raised (see its ``error``);
      takes precedence over 6
8     not found: no such operation in this ledger (or not in ``--tenant``)
====  ==========================================================================

A missing SQLite file exits with 4, not 8, so that 8 always means "the ledger was
read and has no such operation".
"""

from __future__ import annotations

import asyncio
import getpass
import inspect
import json
import logging
import os
import shlex
import socket
import sys
import time
import traceback
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar, cast

import typer
from rich import box
from rich.console import Console, Group, RenderableType
from rich.json import JSON
from rich.padding import Padding
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from .errors import (
    DecisionConflictError,
    EffectsError,
    IllegalTransitionError,
    LedgerCorruptError,
    LedgerError,
    OperationNotFoundError,
    ReviewError,
    SchemaBehindError,
    SchemaTooNewError,
    StaleVersionError,
    TransitionError,
)
from .exitcodes import HELP as EXIT_CODES_HELP
from .exitcodes import ExitCode
from .ledger.base import AuditEntry
from .operation import Operation, State
from .operator import (
    DEFAULT_CONNECT_TIMEOUT,
    LeaseLiveError,
    LeaseStatus,
    LedgerNotFoundError,
    OperationView,
    Resolution,
    VerdictNotRecordedError,
    describe_target,
    has_password,
    is_postgres_dsn,
    lease_status,
    list_operations,
    new_decision_id,
    open_ledger,
    operation_to_json,
    redact_dsn,
    resolve_report,
    setup_database,
    show,
)

if TYPE_CHECKING:
    from .recovery import OperationReport, RecoveryReport

T = TypeVar("T")

ENV_DB = "LANGGRAPH_EFFECTS_DB"
ENV_SCHEMA = "LANGGRAPH_EFFECTS_SCHEMA"
ENV_CONNECT_TIMEOUT = "LANGGRAPH_EFFECTS_CONNECT_TIMEOUT"

EXIT_OK = int(ExitCode.OK)
EXIT_USAGE = int(ExitCode.USAGE)
EXIT_NOT_FOUND = int(ExitCode.NOT_FOUND)
EXIT_REFUSED = int(ExitCode.REFUSED)
EXIT_LEDGER = int(ExitCode.LEDGER)
EXIT_INTERNAL = int(ExitCode.INTERNAL)
EXIT_NEEDS_OPERATOR = int(ExitCode.NEEDS_OPERATOR)
EXIT_RESUME_FAILED = int(ExitCode.RESUME_FAILED)

STATE_STYLES: dict[State, str] = {
    State.PENDING: "cyan",
    State.DISPATCHED: "blue",
    State.UNKNOWN: "bold yellow",
    State.REVIEW: "bold magenta",
    State.CONFIRMED: "green",
    State.FAILED: "red",
    State.ABANDONED: "dim",
}

_LEASE_TEXT: dict[LeaseStatus, tuple[str, str]] = {
    "live": ("live", "blue"),
    "expired": ("expired", "bold yellow"),
    "owner_dead": ("owner dead", "bold yellow"),
}

_NEXT_STEP = {
    "landed": "the graph answers the model with an 'effect landed' message on its next resume",
    "not_landed": (
        "it is pending again: the graph sends it again under the same provider key on its next resume"
    ),
    "abandon": (
        "the graph tells the model the effect was not confirmed and must not be retried "
        "unless asked, on its next resume"
    ),
}

app = typer.Typer(
    name="langgraph-effects",
    help=(
        "Operator console for langgraph-effects: find operations a crash left unresolved, "
        "see the evidence, and record a verdict the graph honours on its next resume."
    ),
    epilog=EXIT_CODES_HELP,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="rich",
)


# -- options ------------------------------------------------------------------------

DbOption = Annotated[
    str | None,
    typer.Option(
        "--db",
        metavar="PATH|DSN",
        help="Ledger: SQLite file path, or Postgres DSN (postgresql://... or host=... dbname=...). "
        f"Default: the global --db, or ${ENV_DB}.",
        show_default=False,
    ),
]
SchemaOption = Annotated[
    str | None,
    typer.Option(
        "--schema",
        metavar="NAME",
        help=f"Postgres only: the schema holding the ledger's tables. Default: the global --schema, "
        f"${ENV_SCHEMA}, or the search_path.",
        show_default=False,
    ),
]
TimeoutOption = Annotated[
    float | None,
    typer.Option(
        "--connect-timeout",
        metavar="SECONDS",
        min=0.5,
        help=f"Give up after this long connecting to Postgres, or waiting for SQLite's write lock "
        f"(default {DEFAULT_CONNECT_TIMEOUT:g}, or ${ENV_CONNECT_TIMEOUT}).",
        show_default=False,
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON on stdout.")]
TenantOption = Annotated[
    str | None,
    typer.Option("--tenant", help="Only operations of this tenant (others count as missing)."),
]


@app.callback()
def _root(
    ctx: typer.Context,
    db: Annotated[
        str | None,
        typer.Option(
            "--db",
            metavar="PATH|DSN",
            envvar=ENV_DB,
            help="Ledger: SQLite file path or postgresql:// DSN.",
            show_default=False,
        ),
    ] = None,
    schema: Annotated[
        str | None,
        typer.Option(
            "--schema",
            metavar="NAME",
            envvar=ENV_SCHEMA,
            help="Postgres only: the schema holding the ledger's tables (default: the search_path).",
            show_default=False,
        ),
    ] = None,
    connect_timeout: Annotated[
        float | None,
        typer.Option(
            "--connect-timeout",
            metavar="SECONDS",
            envvar=ENV_CONNECT_TIMEOUT,
            min=0.5,
            help="Give up after this long connecting to Postgres, or waiting for SQLite's write "
            f"lock (default {DEFAULT_CONNECT_TIMEOUT:g}).",
            show_default=False,
        ),
    ] = None,
    json_output: JsonOption = False,
) -> None:
    """Find, inspect and resolve operations left unresolved by a crash."""
    ctx.obj = {"db": db, "json": json_output, "schema": schema, "timeout": connect_timeout}


@dataclass(frozen=True)
class Target:
    """The ledger a command works on, and how to reach it."""

    db: str
    schema: str | None
    timeout: float
    json: bool
    from_env: bool
    """``--db`` came from the environment, not the command line."""

    def command(self, *words: str) -> str:
        """``langgraph-effects --db ... WORDS``: a command the operator can paste as is.

        A DSN holding a password is shown with the password starred out (it is never
        printed): give the password to libpq through ``PGPASSWORD`` or ``~/.pgpass``.
        """
        db = redact_dsn(self.db) if has_password(self.db) else self.db
        parts = ["langgraph-effects", "--db", shlex.quote(db)]
        if self.schema:
            parts += ["--schema", shlex.quote(self.schema)]
        return " ".join([*parts, *words])


def _settings(
    ctx: typer.Context,
    db: str | None,
    json_output: bool,
    schema: str | None = None,
    timeout: float | None = None,
) -> Target:
    """The ledger to use and the output mode: command option, then global option/env."""
    root: dict[str, Any] = ctx.obj or {}
    use_json = json_output or bool(root.get("json"))
    value = db or root.get("db")
    if not value:
        _fail(
            _BadInput(
                f"no ledger given: pass --db PATH|DSN (the SQLite file or Postgres DSN the "
                f"graph's ledger uses) or set {ENV_DB}."
            ),
            use_json,
        )
    chosen_schema = schema or root.get("schema") or None
    if chosen_schema is not None and not is_postgres_dsn(str(value)):
        _fail(
            _BadInput(
                f"--schema {chosen_schema} applies to a Postgres ledger only, and --db "
                f"{str(value)!r} is a SQLite path (a DSN starts with postgresql:// or reads "
                "host=... dbname=...)."
            ),
            use_json,
        )
    chosen_timeout = timeout if timeout is not None else root.get("timeout")
    from_env = db is None and os.environ.get(ENV_DB) == value
    return Target(
        db=str(value),
        schema=chosen_schema,
        timeout=float(chosen_timeout) if chosen_timeout is not None else DEFAULT_CONNECT_TIMEOUT,
        json=use_json,
        from_env=from_env,
    )


def _connecting(target: Target, *, read_only: bool) -> None:
    """One line on stderr: where the console connects, so a hang or a typo is visible."""
    where = describe_target(target.db, schema=target.schema)
    if is_postgres_dsn(target.db):
        wait = f"connect timeout {target.timeout:g}s"
    elif read_only:
        wait = "read-only"
    else:
        wait = f"waits up to {target.timeout:g}s for the write lock"
    verb = "reading" if read_only else "opening"
    _stderr().print(Text(f"langgraph-effects: {verb} {where} ({wait})", style="dim"), soft_wrap=True)


@asynccontextmanager
async def _open(target: Target, *, read_only: bool) -> AsyncIterator[Any]:
    """The ledger for ``target`` (which must hold one): read-only for ``list``/``show``."""
    _connecting(target, read_only=read_only)
    async with open_ledger(
        target.db, read_only=read_only, schema=target.schema, connect_timeout=target.timeout
    ) as ledger:
        yield ledger


# -- output helpers -------------------------------------------------------------------


def _stdout() -> Console:
    wide = not sys.stdout.isatty() and "COLUMNS" not in os.environ
    return Console(highlight=False, width=240 if wide else None)


def _stderr() -> Console:
    return Console(stderr=True, highlight=False)


def _print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
    sys.stdout.flush()


def _ago(seconds: float) -> str:
    """``42s``, ``5m``, ``2h 5m``, ``3d 4h``."""
    s = int(abs(seconds))
    if s < 60:
        return f"{s}s"
    minutes, s = divmod(s, 60)
    if minutes < 60:
        return f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h {minutes}m" if minutes else f"{hours}h"
    days, hours = divmod(hours, 24)
    return f"{days}d {hours}h" if hours else f"{days}d"


def _relative(ts: float, now: float) -> str:
    delta = now - ts
    return f"in {_ago(delta)}" if delta < 0 else f"{_ago(delta)} ago"


def _when(ts: float | None, now: float) -> Text:
    if ts is None:
        return Text("-", style="dim")
    stamp = datetime.fromtimestamp(ts).astimezone().strftime("%Y-%m-%d %H:%M:%S %z")
    return Text.assemble(stamp, (f"  ({_relative(ts, now)})", "dim"))


def _compact(value: Any, limit: int = 60) -> str:
    text = json.dumps(value, sort_keys=True, separators=(", ", ": "), ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _state_text(op: Operation, lease: LeaseStatus | None) -> Text:
    text = Text(op.state.value, style=STATE_STYLES[op.state])
    if lease is not None:
        label, style = _LEASE_TEXT[lease]
        text.append(f" ({label})", style=style)
    return text


def _field(value: Any) -> Text:
    if value is None or value == "":
        return Text("-", style="dim")
    return Text(str(value))


class _BadInput(ValueError):
    """A command line the console refuses (exit code 1), with what to do instead."""


# -- errors -------------------------------------------------------------------------


def exit_code_for(error: BaseException) -> int:
    """The documented exit code for an error raised by a command."""
    if isinstance(error, VerdictNotRecordedError):
        return exit_code_for(error.cause) if isinstance(error.cause, EffectsError) else EXIT_REFUSED
    if isinstance(error, OperationNotFoundError):
        return EXIT_NOT_FOUND
    if isinstance(error, TransitionError):
        return EXIT_REFUSED
    if isinstance(error, LedgerError):
        return EXIT_LEDGER
    if isinstance(error, ReviewError | ValueError):
        return EXIT_USAGE
    if type(error).__module__.split(".", 1)[0] == "psycopg":
        return EXIT_LEDGER
    return EXIT_INTERNAL


def _error_kind(error: BaseException) -> str:
    kinds: list[tuple[type[BaseException], str]] = [
        (VerdictNotRecordedError, "verdict_not_recorded"),
        (OperationNotFoundError, "not_found"),
        (StaleVersionError, "stale_version"),
        (DecisionConflictError, "decision_conflict"),
        (LeaseLiveError, "lease_live"),
        (IllegalTransitionError, "illegal_transition"),
        (LedgerNotFoundError, "ledger_not_found"),
        (LedgerCorruptError, "ledger_corrupt"),
        (SchemaTooNewError, "schema_too_new"),
        (SchemaBehindError, "schema_behind"),
        (LedgerError, "ledger_unavailable"),
        (ReviewError, "bad_input"),
        (ValueError, "bad_input"),
    ]
    for cls, kind in kinds:
        if isinstance(error, cls):
            return kind
    return "ledger_unavailable" if exit_code_for(error) == EXIT_LEDGER else "internal"


def _hint(error: BaseException, target: Target | None) -> str | None:
    """What to run next, as a command that works when pasted (it names ``--db``)."""
    if target is None:
        return None
    kind = _error_kind(error)
    op_id = getattr(error, "op_id", None)
    if isinstance(error, VerdictNotRecordedError):
        op_id = error.operation.op_id
    lines: list[str] = []
    if kind == "not_found":
        lines.append(
            f"List operations with `{target.command('list', '--all')}` (--all: resolved ones too)."
        )
    elif kind in ("stale_version", "lease_live", "verdict_not_recorded") and op_id:
        lines.append(f"Read it again: `{target.command('show', shlex.quote(op_id))}`.")
    elif kind == "ledger_not_found" and not os.path.isdir(target.db):
        lines.append(
            f"If this is the right database, create the ledger with `{target.command('setup')}`."
        )
    elif kind == "schema_behind":
        lines.append(f"Migrate it with `{target.command('setup')}`.")
    if lines and has_password(target.db):
        lines.append("(The password is not printed: give it through PGPASSWORD or ~/.pgpass.)")
    return "\n".join(lines) or None


def _fail(error: BaseException, use_json: bool, target: Target | None = None) -> NoReturn:
    """Report ``error`` (stderr; and stdout as JSON with ``--json``) and exit."""
    code = exit_code_for(error)
    message = str(error) or type(error).__name__
    if use_json:
        payload: dict[str, Any] = {
            "kind": _error_kind(error),
            "type": type(error).__name__,
            "message": message,
            "exit_code": code,
        }
        if isinstance(error, StaleVersionError):
            payload["expected_version"] = error.expected
            payload["actual_version"] = error.actual
        if isinstance(error, VerdictNotRecordedError):
            payload["operation"] = operation_to_json(error.operation)
        hint_text = _hint(error, target)
        if hint_text:
            payload["hint"] = hint_text
        _print_json({"error": payload})
    console = _stderr()
    console.print(Text.assemble(("error: ", "bold red"), message), soft_wrap=True)
    hint = _hint(error, target)
    if hint:
        console.print(Text(hint, style="dim"), soft_wrap=True)
    if code == EXIT_INTERNAL:
        console.print(
            Text(
                "".join(traceback.format_exception(type(error), error, error.__traceback__)),
                style="dim",
            )
        )
        console.print("This is a bug in langgraph-effects; please report it with the above.")
    raise typer.Exit(code)


def _run(target: Target, work: Callable[[], Awaitable[T]]) -> T:
    """Run one command's async work, mapping errors to documented exit codes."""

    async def runner() -> T:
        return await work()

    try:
        return asyncio.run(runner())
    except Exception as error:  # mapped to a documented exit code (5 if unexpected)
        _fail(error, target.json, target)


# -- list ---------------------------------------------------------------------------


def _parse_duration(value: str) -> float:
    """``90``, ``90s``, ``15m``, ``2h``, ``1d`` -> seconds."""
    text = value.strip().lower()
    units = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}
    factor = 1.0
    if text and text[-1] in units:
        factor = units[text[-1]]
        text = text[:-1]
    try:
        seconds = float(text) * factor
    except ValueError:
        seconds = -1.0
    if not seconds >= 0:  # also rejects NaN
        raise _BadInput(f"{value!r} is not a duration: give seconds (e.g. 600) or 15m, 2h, 1d.")
    return seconds


@app.command("list", epilog=EXIT_CODES_HELP)
def list_command(
    ctx: typer.Context,
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
    db: DbOption = None,
    schema: SchemaOption = None,
    connect_timeout: TimeoutOption = None,
    json_output: JsonOption = False,
) -> None:
    """List operations, unresolved ones by default, least recently changed first.

    Read-only: nothing is written, and it never waits for another process's write lock.
    """
    target = _settings(ctx, db, json_output, schema, connect_timeout)
    use_json = target.json
    try:
        if all_states and state:
            raise _BadInput("give --state or --all, not both.")
        seconds = _parse_duration(older_than) if older_than is not None else None
    except _BadInput as error:
        _fail(error, use_json)
    states: list[State] | None = list(State) if all_states else (state or None)

    async def work() -> list[Operation]:
        async with _open(target, read_only=True) as ledger:
            return await list_operations(
                ledger,
                states=states,
                thread_id=thread,
                tenant=tenant,
                tool=tool,
                older_than=seconds,
                limit=limit,
            )

    ops = _run(target, work)
    now = time.time()
    if use_json:
        _print_json(
            {
                "count": len(ops),
                "limit": limit,
                "truncated": len(ops) >= limit,
                "operations": [operation_to_json(op, now=now) for op in ops],
            }
        )
        return
    _render_list(ops, now=now, limit=limit, states=states, target=target)


def _render_list(
    ops: list[Operation], *, now: float, limit: int, states: list[State] | None, target: Target
) -> None:
    console = _stdout()
    what = "Unresolved operations" if states is None else "Operations"
    if not ops:
        console.print(Text(f"{what}: none match.", style="green" if states is None else ""))
        return
    console.print(Text(f"{what} ({len(ops)}, least recently changed first)", style="bold"))
    wide = console.width >= 170
    table = _wide_table(ops, now) if wide else _narrow_table(ops, now, console.width)
    console.print(table)
    if len(ops) >= limit:
        console.print(Text(f"Showing the first {limit}; raise --limit to see more.", style="dim"))
    console.print(Text(f"\nInspect one: {target.command('show', shlex.quote(ops[0].op_id))}", style="dim"))


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
            _state_text(op, lease_status(op, now=now)),
            Text(str(op.version)),
            Text(op.tool),
            Text(op.thread_id),
        ]
        if show_tenant:
            row.append(_field(op.tenant))
        row += [
            Text(op.contract),
            Text(str(op.attempts)),
            Text(_relative(op.updated_at, now)),
            Text(op.provider_key),
            Text(_compact(dict(op.args), 48), style="dim"),
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
        state = _state_text(op, lease_status(op, now=now))
        tries = "try" if op.attempts == 1 else "tries"
        state.append(f"\nv{op.version}, {op.attempts} {tries}, {_relative(op.updated_at, now)}", "dim")
        where = Text(op.tool)
        where.append("\n" + op.thread_id + (f" ({op.tenant})" if op.tenant else ""), "dim")
        row: list[RenderableType] = [ids, state, where]
        if with_args:
            row.append(Text(_compact(dict(op.args), 90), style="dim"))
        table.add_row(*row)
    return table


# -- show ---------------------------------------------------------------------------


@app.command("show", epilog=EXIT_CODES_HELP)
def show_command(
    ctx: typer.Context,
    operation: Annotated[str, typer.Argument(metavar="OPERATION", help="The operation id (op_...).")],
    tenant: TenantOption = None,
    db: DbOption = None,
    schema: SchemaOption = None,
    connect_timeout: TimeoutOption = None,
    json_output: JsonOption = False,
) -> None:
    """Show one operation: arguments (redacted), keys, lease, evidence and audit trail.

    Read-only: nothing is written, and it never waits for another process's write lock.
    """
    target = _settings(ctx, db, json_output, schema, connect_timeout)

    async def work() -> OperationView:
        async with _open(target, read_only=True) as ledger:
            return await show(ledger, operation, tenant=tenant)

    view = _run(target, work)
    if target.json:
        _print_json(view.to_json())
        return
    _render_view(view, now=time.time(), target=target, tenant=tenant)


def _render_view(view: OperationView, *, now: float, target: Target, tenant: str | None) -> None:
    op = view.operation
    console = _stdout()
    facts = Table.grid(padding=(0, 2))
    facts.add_column(style="bold", no_wrap=True)
    facts.add_column(overflow="fold")
    facts.add_row("state", _state_text(op, view.lease))
    facts.add_row("version", Text(str(op.version)))
    facts.add_row("tool", Text(op.tool))
    facts.add_row("contract", Text(op.contract))
    facts.add_row("thread", Text(op.thread_id))
    if op.checkpoint_ns:
        facts.add_row("namespace", Text(op.checkpoint_ns))
    facts.add_row("tenant", _field(op.tenant))
    facts.add_row("policy version", _field(op.policy_version))
    facts.add_row("tool call id", Text(op.tool_call_id))
    facts.add_row("message id", _field(op.message_id))
    facts.add_row("checkpoint id", _field(op.checkpoint_id))
    facts.add_row("provider key", Text(op.provider_key, style="bold"))
    facts.add_row("args hash", Text(op.args_hash))
    facts.add_row("attempts", Text(str(op.attempts)))
    facts.add_row("created", _when(op.created_at, now))
    facts.add_row("changed", _when(op.updated_at, now))
    facts.add_row("dispatched", _when(op.dispatched_at, now))
    if op.owner is not None:
        facts.add_row(
            "owner",
            Text(f"{op.owner.host} pid {op.owner.pid} (dispatch {op.owner.token[:12]})"),
        )
    if op.lease_expires_at is not None:
        facts.add_row("lease until", _when(op.lease_expires_at, now))
    if op.result is not None:
        facts.add_row(
            "result",
            Text(f"{op.result_type or 'unknown type'}, {len(op.result)} bytes (not shown)"),
        )
    if op.decisions:
        facts.add_row("decisions", Text(", ".join(d for d, _ in op.decisions)))
    if op.extra:
        facts.add_row("extra", Text(_compact(dict(op.extra), 200)))

    parts: list[RenderableType] = [facts, Text("\narguments (as stored, secrets redacted)", "bold")]
    parts.append(JSON.from_data(dict(op.args), default=str))
    if op.evidence is not None:
        parts += [Text("\nevidence", "bold"), JSON.from_data(dict(op.evidence), default=str)]
    console.print(Panel(Group(*parts), title=Text(op.op_id, style="bold"), title_align="left", expand=False))
    console.print()
    console.print(_audit_table(view.audit, now=now))
    console.print()
    console.print(_next_steps(view, target, tenant))


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
            Text(_relative(entry.at, now)),
            Text(entry.actor),
            Text(entry.event),
            move,
            Text(str(entry.version)),
            Text(_compact(dict(entry.evidence), 120) if entry.evidence is not None else "-"),
        )
    return table


def _next_steps(view: OperationView, target: Target, tenant: str | None) -> RenderableType:
    op = view.operation
    if view.lease == "live":
        return Text(
            "Someone is sending this right now (live lease): wait for the worker or for the "
            "lease to expire before deciding.",
            style="blue",
        )
    if not view.allowed_decisions:
        if op.terminal:
            return Text(f"Resolved ({op.state.value}): nothing to decide.", style="green")
        return Text(
            f"{op.state.value}: nothing is in doubt; the graph sends it on its next run.",
            style="cyan",
        )
    words = ["resolve", shlex.quote(op.op_id), "--expected-version", str(op.version)]
    if tenant:
        words += ["--tenant", shlex.quote(tenant)]
    base = target.command(*words)
    lines = Text("Decide (after checking the provider for key ", style="bold")
    lines.append(op.provider_key, style="bold")
    lines.append("):\n", style="bold")
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


# -- resolve ------------------------------------------------------------------------


def _default_actor() -> str:
    try:
        user = getpass.getuser()
    except Exception:
        user = "operator"
    return f"{user}@{socket.gethostname()}"


@app.command("resolve", epilog=EXIT_CODES_HELP)
def resolve_command(
    ctx: typer.Context,
    operation: Annotated[str, typer.Argument(metavar="OPERATION", help="The operation id (op_...).")],
    expected_version: Annotated[
        int,
        typer.Option(
            "--expected-version",
            min=1,
            help="The version you saw (`show` prints it). Refused if it changed since.",
            show_default=False,
        ),
    ],
    landed: Annotated[bool, typer.Option("--landed", help="You checked: the effect landed.")] = False,
    receipt: Annotated[
        str | None,
        typer.Option("--receipt", metavar="JSON", help="With --landed: what the provider shows, as JSON."),
    ] = None,
    not_landed: Annotated[
        bool,
        typer.Option("--not-landed", help="You checked: it did not land; send again under the same key."),
    ] = False,
    abandon: Annotated[
        bool, typer.Option("--abandon", help="Close it without confirming the effect.")
    ] = False,
    reason: Annotated[
        str | None, typer.Option("--reason", help="With --abandon: why (for the audit).")
    ] = None,
    decision_id: Annotated[
        str | None,
        typer.Option(
            "--decision-id",
            help="Idempotency id of this decision; re-run with the same id to retry safely. "
            "Default: a fresh one (printed).",
        ),
    ] = None,
    actor: Annotated[
        str | None,
        typer.Option("--actor", help="Who decides, for the audit trail. Default: user@host."),
    ] = None,
    tenant: TenantOption = None,
    db: DbOption = None,
    schema: SchemaOption = None,
    connect_timeout: TimeoutOption = None,
    json_output: JsonOption = False,
) -> None:
    """Record a verdict: --landed [--receipt JSON] | --not-landed | --abandon --reason TEXT."""
    target = _settings(ctx, db, json_output, schema, connect_timeout)
    use_json = target.json
    try:
        decision = _decision(landed, receipt, not_landed, abandon, reason)
    except _BadInput as error:
        _fail(error, use_json)
    did = decision_id or new_decision_id()
    who = actor or _default_actor()

    async def work() -> Resolution:
        async with _open(target, read_only=False) as ledger:
            return await resolve_report(
                ledger,
                operation,
                decision,
                expected_version=expected_version,
                decision_id=did,
                actor=who,
                tenant=tenant,
                channel="console",
            )

    report = _run(target, work)
    if use_json:
        _print_json(
            {
                "operation": operation_to_json(report.operation),
                "decision_id": report.decision_id,
                "decision": decision,
                "from_state": report.from_state.value,
                "replayed": report.replayed,
                "lease_lost": report.lease_lost,
            }
        )
        return
    _render_resolution(report, decision, target)


def _decision(
    landed: bool, receipt: str | None, not_landed: bool, abandon: bool, reason: str | None
) -> dict[str, Any]:
    chosen = [
        name
        for name, on in (("--landed", landed), ("--not-landed", not_landed), ("--abandon", abandon))
        if on
    ]
    if len(chosen) != 1:
        got = " and ".join(chosen) if chosen else "none"
        raise _BadInput(f"give exactly one of --landed, --not-landed, --abandon (got {got}).")
    if receipt is not None and not landed:
        raise _BadInput("--receipt goes with --landed only.")
    if reason is not None and not abandon:
        raise _BadInput("--reason goes with --abandon only.")
    if landed:
        value: Any = None
        if receipt is not None:
            try:
                value = json.loads(receipt)
            except json.JSONDecodeError as error:
                raise _BadInput(
                    f"--receipt is not valid JSON ({error.msg} at column {error.colno}): "
                    f'{receipt!r}. Quote it for the shell, e.g. --receipt \'{{"id": "r1"}}\'; '
                    "a plain string needs JSON quotes too: --receipt '\"r1\"'."
                ) from error
        return {"type": "landed", "receipt": value}
    if not_landed:
        return {"type": "not_landed"}
    if not reason or not reason.strip():
        raise _BadInput("--abandon needs --reason TEXT (it goes into the audit trail).")
    return {"type": "abandon", "reason": reason}


def _render_resolution(report: Resolution, decision: dict[str, Any], target: Target) -> None:
    console = _stdout()
    op = report.operation
    if report.replayed:
        console.print(
            Text.assemble(
                ("Already recorded: ", "bold green"),
                f"decision {report.decision_id} was applied to {op.op_id} before; nothing changed. It is ",
                (op.state.value, STATE_STYLES[op.state]),
                f" at version {op.version}.",
            ),
            soft_wrap=True,
        )
        if lease_status(op) != "live" and op.state.value in ("unknown", "review", "dispatched"):
            console.print(
                Text(
                    f"  It is in doubt again: `{target.command('show', shlex.quote(op.op_id))}`, "
                    "then decide anew, with a new decision id.",
                    style="yellow",
                )
            )
        return
    line = Text.assemble(
        ("Recorded ", "bold green"),
        (decision["type"], "bold"),
        f" for {op.op_id}: ",
        (report.from_state.value, STATE_STYLES[report.from_state]),
        " -> ",
        (op.state.value, STATE_STYLES[op.state]),
        f", now version {op.version}.",
    )
    console.print(line)
    if report.lease_lost:
        console.print(
            Text(
                "  Its sender was gone: the lost lease was recorded first (dispatched -> unknown).",
                style="dim",
            )
        )
    console.print(Text(f"  decision id {report.decision_id} (re-run with it to retry safely)"))
    console.print(Text(f"  Next: {_NEXT_STEP[decision['type']]}.", style="dim"))


# -- setup --------------------------------------------------------------------------


@app.command("setup", epilog=EXIT_CODES_HELP)
def setup_command(
    ctx: typer.Context,
    db: DbOption = None,
    schema: SchemaOption = None,
    connect_timeout: TimeoutOption = None,
    json_output: JsonOption = False,
) -> None:
    """Create or migrate the ledger and LangGraph's checkpoint tables in --db.

    The only console command that changes the schema (``list``, ``show``, ``resolve``
    and ``recover`` refuse a database without a ledger). A SQLite file is created if
    missing. Idempotent, and safe from many processes at once.
    """
    target = _settings(ctx, db, json_output, schema, connect_timeout)
    _connecting(target, read_only=False)

    async def work() -> str:
        return await setup_database(target.db, schema=target.schema, connect_timeout=target.timeout)

    where = _run(target, work)
    if target.json:
        _print_json({"ledger": where, "set_up": True})
        return
    _stdout().print(
        Text.assemble(("Set up: ", "bold green"), f"the ledger and the checkpoint tables in {where}."),
        soft_wrap=True,
    )
    _stdout().print(Text(f"List what is unresolved: {target.command('list')}", style="dim"))


# -- recover ------------------------------------------------------------------------

RECOVER_EXIT_CODES_HELP = (
    EXIT_CODES_HELP
    + " For recover: 0 also when a thread is left alone because a worker is sending it now; "
    "2 also for a bad --graph or a factory that fails; 6 when an operation awaits review or "
    "approval, a thread is paused at another interrupt, or cannot be resumed."
)

_HOW_TEXT = {
    "confirmed_by_lookup": ("confirmed by lookup", "green"),
    "settled_by_dedup": ("settled by dedup", "green"),
    "resent_under_key": ("re-sent under key", "green"),
    "sent": ("sent", "green"),
    "confirmed": ("confirmed", "green"),
    "sent_to_review": ("sent to review", "bold magenta"),
    "awaiting_review": ("awaiting review", "bold magenta"),
    "decided_by_operator": ("decided by operator", "green"),
    "replayed": ("replayed", "green"),
    "failed": ("failed", "red"),
    "in_flight_elsewhere": ("in flight elsewhere", "blue"),
    "unsettled": ("unsettled", "bold yellow"),
    "not_resumed": ("not resumed", "dim"),
    "would_resume": ("would resume", "cyan"),
}

_ACTION_STYLES = {
    "resumed": "bold green",
    "would_resume": "bold cyan",
    "in_flight_elsewhere": "bold blue",
    "recently_active": "bold yellow",
    "awaiting_review": "bold magenta",
    "paused_at_other_interrupt": "bold yellow",
    "not_resumable": "bold yellow",
    "failed": "bold red",
    "nothing_to_do": "dim",
}


def _load_graph_factory(target: str) -> Callable[[Any], Any]:
    """The factory named by ``--graph MODULE:ATTR`` (the current directory is importable)."""
    import importlib

    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise _BadInput(
            f"--graph takes MODULE:ATTR naming a factory `def make_graph(checkpointer)` that returns "
            f"the compiled graph, e.g. --graph myapp.agent:make_graph (got {target!r})."
        )
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        found: Any = importlib.import_module(module_name)
    except Exception as error:
        raise _BadInput(
            f"--graph {target}: cannot import {module_name!r} ({type(error).__name__}: {error}). "
            "Run from the directory that holds it, or set PYTHONPATH."
        ) from error
    for part in attr.split("."):
        if not hasattr(found, part):
            raise _BadInput(f"--graph {target}: {module_name!r} has no attribute {attr!r}.")
        found = getattr(found, part)
    if not callable(found):
        raise _BadInput(
            f"--graph {target} is not callable: it must name a factory `def make_graph(checkpointer)` "
            "that compiles and returns the graph with that checkpointer."
        )
    return cast(Callable[[Any], Any], found)


def _parse_configurable(pairs: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise _BadInput(
                f"--configurable takes KEY=VALUE, e.g. --configurable policy_version=v7 (got {pair!r})."
            )
        if key.strip() in ("thread_id", "tenant_id"):
            raise _BadInput(
                f"--configurable {key.strip()}=...: recovery sets it per thread (use --thread / --tenant)."
            )
        out[key.strip()] = value
    return out


@asynccontextmanager
async def _open_checkpointer(target: Target) -> AsyncIterator[Any]:
    """The checkpointer + ledger for ``--db``: ``EffectSqliteSaver`` or ``EffectPostgresSaver``.

    The ledger must be there already (a database without one is refused, nothing
    created); the checkpoint tables are then set up as the saver needs them.
    """
    async with _open(target, read_only=False):
        pass  # refuses a missing file, a non-ledger, an unreachable server, an old schema
    db = target.db
    if is_postgres_dsn(db):
        from .checkpoint.postgres import EffectPostgresSaver

        async with EffectPostgresSaver.from_conn_string(
            db, ledger_schema=target.schema, connect_timeout=target.timeout
        ) as saver:
            await saver.setup()
            yield saver
        return
    from .checkpoint.sqlite import EffectSqliteSaver

    path = db[len("sqlite:") :] if db.startswith("sqlite:") else db
    async with EffectSqliteSaver.from_conn_string(path) as sqlite_saver:
        await sqlite_saver.setup()
        yield sqlite_saver


@app.command("recover", epilog=RECOVER_EXIT_CODES_HELP)
def recover_command(
    ctx: typer.Context,
    graph: Annotated[
        str,
        typer.Option(
            "--graph",
            metavar="MODULE:ATTR",
            help="A factory `def make_graph(checkpointer)` returning the compiled graph that ran the "
            "threads, compiled with the checkpointer it is given (the console opens it for --db).",
            show_default=False,
        ),
    ],
    thread: Annotated[
        list[str] | None,
        typer.Option(
            "--thread",
            metavar="THREAD",
            help="Only this thread (repeatable). Default: every thread with an unresolved operation "
            "or an out-of-band verdict not yet answered.",
            show_default=False,
        ),
    ] = None,
    tenant: Annotated[str | None, typer.Option("--tenant", help="Only operations of this tenant.")] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Report what would be resumed; resume and write nothing.")
    ] = False,
    min_idle: Annotated[
        str,
        typer.Option(
            "--min-idle",
            metavar="SECONDS",
            help="Leave a thread alone until it has been still this long, unless an expired lease "
            "proves its worker gone (30, 2m; 0 when no other worker can be running).",
        ),
    ] = "30s",
    lease_grace: Annotated[
        str,
        typer.Option(
            "--lease-grace",
            metavar="SECONDS",
            help="Extra time past a lease's expiry before its sender counts as gone (clock skew).",
        ),
    ] = "0",
    verdicts_within: Annotated[
        str,
        typer.Option(
            "--verdicts-within",
            metavar="SECONDS",
            help="Look for out-of-band verdicts the graph has not answered among operations changed "
            "this recently (7d, 12h; 'all' for the whole history). Older ones are answered by the "
            "thread's next run, or by naming it with --thread.",
        ),
    ] = "7d",
    configurable: Annotated[
        list[str] | None,
        typer.Option(
            "--configurable",
            "-c",
            metavar="KEY=VALUE",
            help="A configurable entry for the resumes, e.g. policy_version=v7 (repeatable).",
            show_default=False,
        ),
    ] = None,
    db: DbOption = None,
    schema: SchemaOption = None,
    connect_timeout: TimeoutOption = None,
    json_output: JsonOption = False,
) -> None:
    """Resume threads a crash left mid-effect, once each, and report what settled them.

    --graph names a factory in your code, `def make_graph(checkpointer)`, that builds the
    graph that ran the threads and compiles it with the checkpointer it is given
    (`builder.compile(checkpointer=checkpointer)`); it may be async. The console opens
    that checkpointer for --db (EffectSqliteSaver for a SQLite path, EffectPostgresSaver
    for a postgresql:// DSN) and resumes each thread once, with durability="sync", under
    the tenant its operations were recorded with. A thread with an operation under a live
    lease is left alone (someone is sending it right now).
    """
    from .recovery import recover

    target = _settings(ctx, db, json_output, schema, connect_timeout)
    use_json = target.json
    try:
        factory = _load_graph_factory(graph)
        idle = _parse_duration(min_idle)
        grace = _parse_duration(lease_grace)
        within = None if verdicts_within.strip().lower() == "all" else _parse_duration(verdicts_within)
        extra = _parse_configurable(configurable or [])
    except _BadInput as error:
        _fail(error, use_json)

    async def work() -> RecoveryReport:
        async with _open_checkpointer(target) as saver:
            ledger = saver.ledger
            try:
                built = factory(saver)
                if inspect.isawaitable(built):
                    built = await built
            except Exception as error:
                raise _BadInput(
                    f"--graph {graph}: the factory raised {type(error).__name__}: {error}"
                ) from error
            if not (hasattr(built, "ainvoke") and hasattr(built, "aget_state")):
                raise _BadInput(
                    f"--graph {graph} returned {type(built).__name__}, not a compiled graph "
                    "(builder.compile(checkpointer=checkpointer))."
                )
            if getattr(built, "checkpointer", None) is not saver:
                raise _BadInput(
                    f"--graph {graph}: the factory must compile the graph with the checkpointer it "
                    "is given (builder.compile(checkpointer=checkpointer)), so the resumes read and "
                    "write the threads in --db."
                )
            return await recover(
                built,
                ledger=ledger,
                tenant=tenant,
                thread_ids=thread or None,
                dry_run=dry_run,
                min_idle=idle,
                lease_grace=grace,
                config={"configurable": extra} if extra else None,
                verdicts_within=within,
            )

    report = _run(target, work)
    if use_json:
        _print_json(report.to_json())
    else:
        _render_recovery(report, target)
    if report.failed:
        raise typer.Exit(EXIT_RESUME_FAILED)
    if report.needs_operator:
        raise typer.Exit(EXIT_NEEDS_OPERATOR)


def _render_recovery(report: RecoveryReport, target: Target) -> None:
    console = _stdout()
    head = "Recovery (dry run)" if report.dry_run else "Recovery"
    if not report.threads:
        console.print(
            Text.assemble((f"{head}: ", "bold"), ("nothing to do", "green"), f" in {report.ledger}: "
                          "no thread needs recovery.")
        )
        return
    counts = report.counts()
    verb = "would resume" if report.dry_run else "resumed"
    moved = counts.get("resumed", 0) + counts.get("would_resume", 0)
    line = Text.assemble(
        (f"{head} of {report.ledger}: ", "bold"),
        f"{len(report.threads)} thread(s) looked at, {moved} {verb}",
    )
    if report.nothing_to_do:
        line.append(" (nothing to do)", "green")
    console.print(line)
    for t in report.threads:
        console.print()
        title = Text.assemble(("thread ", "bold"), (t.thread_id, "bold"))
        if t.tenant:
            title.append(f" (tenant {t.tenant})", "dim")
        title.append(": ")
        title.append(t.action.replace("_", " "), _ACTION_STYLES.get(t.action, "bold"))
        if t.outcome:
            title.append(f" -> {t.outcome}", "bold red" if t.outcome == "error" else "bold")
            title.append(f" in {t.seconds:.1f}s", "dim")
        console.print(title)
        console.print(Text(f"  {t.reason}", style="dim"), soft_wrap=True)
        if t.error:
            console.print(Text.assemble(("  error: ", "bold red"), t.error), soft_wrap=True)
        for op in t.operations:
            console.print(_recovery_line(op))
            console.print(Padding(Text(op.detail, style="dim"), (0, 0, 0, 4)))
    needs = report.awaiting_review
    if needs:
        console.print()
        console.print(
            Text(
                f"{len(needs)} operation(s) wait for an operator: check the provider, then\n"
                + "\n".join(f"  {target.command('show', shlex.quote(op_id))}" for op_id in needs)
                + f"\nand record a verdict with `{target.command('resolve', '...')}` (show prints it "
                f"in full); run `{target.command('recover', '--graph', '...')}` again to resume "
                "the thread.",
                style="bold magenta",
            )
        )


def _recovery_line(op: OperationReport) -> Text:
    line = Text("  ")
    line.append(op.op_id, "bold")
    line.append(f"  {op.tool}  ")
    if op.before is None:
        line.append("new", "dim")
    else:
        line.append(op.before.state.value, STATE_STYLES[op.before.state])
        line.append(f" v{op.before.version}", "dim")
    line.append(" -> ")
    line.append(op.after.state.value, STATE_STYLES[op.after.state])
    line.append(f" v{op.after.version}  ", "dim")
    label, style = _HOW_TEXT.get(op.how, (op.how, "bold"))
    line.append(label, style)
    return line


# -- lab ----------------------------------------------------------------------------


@app.command(
    "lab",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    add_help_option=False,
)
def lab_command(ctx: typer.Context) -> None:
    """The crash lab: run crash experiments (`langgraph-effects lab --help` for its options)."""
    try:
        from .lab import runner
    except ImportError as error:
        _stderr().print(Text(f"error: the crash lab is not available in this installation ({error})."))
        raise typer.Exit(EXIT_INTERNAL) from error
    args = list(ctx.args)
    if ("--help" in args or "-h" in args) and hasattr(runner, "build_parser"):
        _print_argparse_help(runner.build_parser(), "Usage: langgraph-effects lab [OPTIONS]")
        raise typer.Exit(EXIT_OK)
    code = runner.main(args)
    raise typer.Exit(int(code or 0))


@app.command(
    "crashtest",
    context_settings={"allow_extra_args": True, "ignore_unknown_options": True},
    add_help_option=False,
)
def crashtest_command(ctx: typer.Context) -> None:
    """Crash-test your own graph (`langgraph-effects crashtest --help` for its options)."""
    from .crashtest import cli as crashtest_cli

    raise typer.Exit(crashtest_cli.main(list(ctx.args)))


def _print_argparse_help(parser: Any, usage: str) -> None:
    """An argparse parser's help, laid out like the console's own (options panel, exit codes)."""
    console = _stdout()
    console.print()
    console.print(Text(usage, style="bold"))
    console.print()
    if parser.description:
        console.print(Padding(Text(parser.description), (0, 1)))
        console.print()
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold cyan", no_wrap=True)
    table.add_column(style="yellow", no_wrap=True)
    table.add_column()
    for action in parser._actions:  # argparse keeps no public list of its options
        if not action.option_strings:
            continue
        metavar = ""
        if action.nargs != 0:
            metavar = str(action.metavar or action.dest.upper())
        text = str(action.help or "")
        if text and action.default not in (None, False) and "%(default)" in text:
            text = text % {"default": action.default}
        table.add_row(", ".join(action.option_strings), metavar, text)
    console.print(Panel(table, title="Options", title_align="left", border_style="dim"))
    console.print(Padding(Text(EXIT_CODES_HELP, style="dim"), (0, 1)))


# -- entry point ----------------------------------------------------------------------


def _click_exception_types() -> tuple[type[Exception], type[Exception]]:
    """Click's ClickException and UsageError (vendored by typer >= 0.26, click before)."""
    mro = typer.BadParameter.__mro__
    usage = next(c for c in mro if c.__name__ == "UsageError")
    base = next(c for c in mro if c.__name__ == "ClickException")
    return cast(type[Exception], base), cast(type[Exception], usage)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the console; returns the exit code (see the module docstring)."""
    args = list(sys.argv[1:] if argv is None else argv)
    # The pool's own retry warnings would bury our one-line error (which names the cause).
    logging.getLogger("psycopg.pool").setLevel(logging.ERROR)
    command = typer.main.get_command(app)
    click_error, usage_error = _click_exception_types()
    # A model can put unpaired surrogates in arguments: print them escaped, never crash.
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if callable(reconfigure):
            reconfigure(errors="backslashreplace")
    try:
        result = command.main(args=args or ["--help"], prog_name="langgraph-effects", standalone_mode=False)
    except usage_error as error:
        _show_click_error(error)
        return EXIT_USAGE
    except click_error as error:
        _show_click_error(error)
        return EXIT_USAGE
    except (typer.Abort, KeyboardInterrupt):
        _stderr().print("Aborted.")
        return 130
    if not args:
        return EXIT_USAGE
    return result if isinstance(result, int) else EXIT_OK


def _show_click_error(error: Exception) -> None:
    try:
        from typer import rich_utils

        rich_utils.rich_format_error(cast(Any, error))
    except Exception:
        show = getattr(error, "show", None)
        if callable(show):
            show()
        else:
            _stderr().print(Text(f"error: {error}"))


if __name__ == "__main__":
    sys.exit(main())
