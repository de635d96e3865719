"""Which ledger a command works on (``--db``, ``--schema``, ``--connect-timeout``), and opening it."""

from __future__ import annotations

import functools
import inspect
import shlex
import typing
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import typer
from rich.text import Text

from ..core.exitcodes import HELP as EXIT_CODES_HELP
from ..errors import UnknownBackendError
from ..ledger import registry
from .app import ENV_DB, DbOption, JsonOption, SchemaOption, TimeoutOption, app
from .failures import BadInput, fail
from .render import stderr


@dataclass(frozen=True)
class Target:
    """The ledger a command works on, and how to reach it."""

    db: str
    schema: str | None
    timeout: float
    json: bool

    def command(self, *words: str) -> str:
        """``langgraph-effects --db ... WORDS``: a command the operator can paste as is.

        A DSN holding a password is shown with the password starred out (it is never
        printed): give the password to libpq through ``PGPASSWORD`` or ``~/.pgpass``.
        """
        db = registry.redact(self.db)
        parts = ["langgraph-effects", "--db", shlex.quote(db)]
        if self.schema:
            parts += ["--schema", shlex.quote(self.schema)]
        return " ".join([*parts, *words])


def settings(
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
        fail(
            BadInput(
                f"no ledger given: pass --db PATH|DSN (the SQLite file or Postgres DSN the "
                f"graph's ledger uses) or set {ENV_DB}."
            ),
            use_json,
        )
    chosen_schema = schema or root.get("schema") or None
    try:
        backend = registry.backend_for(str(value))
    except UnknownBackendError as error:
        fail(error, use_json)
    if chosen_schema is not None and not backend.schemas:
        kind = "a SQLite path" if backend.scheme == "sqlite" else f"a {backend.scheme} ledger"
        fail(
            BadInput(
                f"--schema {chosen_schema} applies to a Postgres ledger only, and --db "
                f"{str(value)!r} is {kind} (a DSN starts with postgresql:// or reads "
                "host=... dbname=...)."
            ),
            use_json,
        )
    chosen_timeout = timeout if timeout is not None else root.get("timeout")
    return Target(
        db=str(value),
        schema=chosen_schema,
        timeout=float(chosen_timeout) if chosen_timeout is not None else registry.DEFAULT_CONNECT_TIMEOUT,
        json=use_json,
    )


_LEDGER_OPTIONS = [
    inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=annotation)
    for name, default, annotation in (
        ("db", None, DbOption),
        ("schema", None, SchemaOption),
        ("connect_timeout", None, TimeoutOption),
        ("json_output", False, JsonOption),
    )
]


_CONTEXT = inspect.Parameter("ctx", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=typer.Context)


def ledger_command(
    name: str, *, epilog: str = EXIT_CODES_HELP
) -> Callable[[Callable[..., None]], Callable[..., None]]:
    """Register a command on a ledger: it gets ``--db``, ``--schema``, ``--connect-timeout``
    and ``--json`` (after its own options), and is called with the `Target` they name.

    ``command(target, ...)`` declares only its own options; typer reads the signature
    built here, so every ledger command offers and resolves those four the same way.
    """

    def register(command: Callable[..., None]) -> Callable[..., None]:
        hints = typing.get_type_hints(command, include_extras=True)
        own = [
            parameter.replace(annotation=hints[parameter.name])
            for parameter in inspect.signature(command).parameters.values()
            if parameter.name != "target"
        ]

        @functools.wraps(command)
        def run_command(ctx: typer.Context, **options: Any) -> None:
            given = [options.pop(key) for key in ("db", "json_output", "schema", "connect_timeout")]
            command(settings(ctx, *given), **options)

        parameters = [_CONTEXT, *own, *_LEDGER_OPTIONS]
        run_command.__signature__ = inspect.Signature(parameters, return_annotation=None)  # type: ignore[attr-defined]
        run_command.__annotations__ = {p.name: p.annotation for p in parameters}
        app.command(name, epilog=epilog)(run_command)
        return run_command

    return register


def connecting(target: Target, *, read_only: bool) -> None:
    """One line on stderr: where the console connects, so a hang or a typo is visible."""
    where = registry.describe_target(target.db, schema=target.schema)
    if registry.backend_for(target.db).remote:
        wait = f"connect timeout {target.timeout:g}s"
    elif read_only:
        wait = "read-only"
    else:
        wait = f"waits up to {target.timeout:g}s for the write lock"
    verb = "reading" if read_only else "opening"
    stderr().print(Text(f"langgraph-effects: {verb} {where} ({wait})", style="dim"), soft_wrap=True)


@asynccontextmanager
async def open_target(target: Target, *, read_only: bool) -> AsyncIterator[Any]:
    """The ledger for ``target`` (which must hold one): read-only for ``list``/``show``."""
    connecting(target, read_only=read_only)
    async with registry.open_ledger(
        target.db, read_only=read_only, schema=target.schema, connect_timeout=target.timeout
    ) as ledger:
        yield ledger


@asynccontextmanager
async def open_checkpointer(target: Target) -> AsyncIterator[Any]:
    """The checkpointer + ledger for ``--db``: ``AsyncEffectSqliteSaver`` or ``AsyncEffectPostgresSaver``
    (the registry's `open_checkpointer`).

    The ledger must be there already (a database without one is refused, nothing
    created); the checkpoint tables are then set up as the saver needs them.
    """
    async with open_target(target, read_only=False):
        pass  # refuses a missing file, a non-ledger, an unreachable server, an old schema
    async with registry.open_checkpointer(
        target.db, schema=target.schema, connect_timeout=target.timeout
    ) as saver:
        await saver.setup()
        yield saver


def parse_duration(value: str) -> float:
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
        raise BadInput(f"{value!r} is not a duration: give seconds (e.g. 600) or 15m, 2h, 1d.")
    return seconds
