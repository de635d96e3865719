"""The ``typer`` application, its root options and the option types every command shares."""

from __future__ import annotations

import getpass
import socket
from typing import Annotated, Any

import typer

from ..core.exitcodes import HELP as EXIT_CODES_HELP
from ..operator import DEFAULT_CONNECT_TIMEOUT

ENV_DB = "LANGGRAPH_EFFECTS_DB"
ENV_SCHEMA = "LANGGRAPH_EFFECTS_SCHEMA"
ENV_CONNECT_TIMEOUT = "LANGGRAPH_EFFECTS_CONNECT_TIMEOUT"

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


def _target_option(
    flag: str, metavar: str, help: str, *, envvar: str | None = None, min: float | None = None
) -> Any:
    """One of the options naming the ledger (``--db``, ``--schema``, ``--connect-timeout``):
    on the root (reading its environment variable) or on a command (overriding the root)."""
    return typer.Option(flag, metavar=metavar, envvar=envvar, min=min, help=help, show_default=False)


DbOption = Annotated[
    str | None,
    _target_option(
        "--db",
        "PATH|DSN",
        "Ledger: SQLite file path, or Postgres DSN (postgresql://... or host=... dbname=...). "
        f"Default: the global --db, or ${ENV_DB}.",
    ),
]
SchemaOption = Annotated[
    str | None,
    _target_option(
        "--schema",
        "NAME",
        "Postgres only: the schema holding the ledger's tables. Default: the global --schema, "
        f"${ENV_SCHEMA}, or the search_path.",
    ),
]
TimeoutOption = Annotated[
    float | None,
    _target_option(
        "--connect-timeout",
        "SECONDS",
        "Give up after this long connecting to Postgres, or waiting for SQLite's write lock "
        f"(default {DEFAULT_CONNECT_TIMEOUT:g}, or ${ENV_CONNECT_TIMEOUT}).",
        min=0.5,
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON on stdout.")]
TenantOption = Annotated[
    str | None,
    typer.Option("--tenant", help="Only operations of this tenant (others count as missing)."),
]

ActorOption = Annotated[
    str | None,
    typer.Option("--actor", help="Who acts, for the audit trail. Default: user@host."),
]


def default_actor() -> str:
    """``user@host``: who acts when ``--actor`` is not given."""
    try:
        user = getpass.getuser()
    except Exception:
        user = "operator"
    return f"{user}@{socket.gethostname()}"


def installed_version() -> str:
    """The installed distribution's version (the package's own when run from a source tree)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("langgraph-effects")
    except PackageNotFoundError:
        from .. import __version__

        return __version__


def _print_version(value: bool) -> None:
    if value:
        typer.echo(f"langgraph-effects {installed_version()}")
        raise typer.Exit()


@app.callback()
def _root(
    ctx: typer.Context,
    db: Annotated[
        str | None,
        _target_option(
            "--db", "PATH|DSN", "Ledger: SQLite file path or postgresql:// DSN.", envvar=ENV_DB
        ),
    ] = None,
    schema: Annotated[
        str | None,
        _target_option(
            "--schema",
            "NAME",
            "Postgres only: the schema holding the ledger's tables (default: the search_path).",
            envvar=ENV_SCHEMA,
        ),
    ] = None,
    connect_timeout: Annotated[
        float | None,
        _target_option(
            "--connect-timeout",
            "SECONDS",
            "Give up after this long connecting to Postgres, or waiting for SQLite's write "
            f"lock (default {DEFAULT_CONNECT_TIMEOUT:g}).",
            envvar=ENV_CONNECT_TIMEOUT,
            min=0.5,
        ),
    ] = None,
    json_output: JsonOption = False,
    version: Annotated[
        bool,
        typer.Option(
            "--version",
            callback=_print_version,
            is_eager=True,
            help="Print the installed langgraph-effects version and exit.",
        ),
    ] = False,
) -> None:
    """Find, inspect and resolve operations left unresolved by a crash."""
    ctx.obj = {"db": db, "json": json_output, "schema": schema, "timeout": connect_timeout}
OperationArgument = Annotated[
    str, typer.Argument(metavar="OPERATION", help="The operation id (op_...).")
]
